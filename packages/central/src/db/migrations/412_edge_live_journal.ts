import type { Kysely } from 'kysely';

// The terminal's live journal, as its latest online status names it (status journal.id; null: an
// agent that does not send it), and the live journal it replaced (journals never come back: a
// status naming that one, recorded late by a slower instance, is stale and changes nothing). The
// ingest takes the live journal over and applies the events of any other journal late
// (edge/ingest.ts, docs/edge-protocol.md "Order and acknowledgement"): a late event of a store
// replaced since can no longer take the cursor from the live journal by its seq 1.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('edge_terminals').addColumn('live_journal_id', 'text').execute();
  await db.schema.alterTable('edge_terminals').addColumn('previous_live_journal_id', 'text').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('edge_terminals').dropColumn('previous_live_journal_id').execute();
  await db.schema.alterTable('edge_terminals').dropColumn('live_journal_id').execute();
}
