import { type Kysely, PostgresAdapter, sql } from 'kysely';

// Per-terminal event order (docs/edge-protocol.md, "Order and acknowledgement"): a terminal's
// events are applied in seq order of its journal, whatever order they arrive in. applied_seq is
// the highest seq of the current journal up to which every event is stored and processed (the
// acknowledgement sent back to the terminal); journal_id names the terminal's journal (a new store
// starts again at seq 1); gap_since is when the event after applied_seq was first missed while a
// later one was held.
export async function up(db: Kysely<any>): Promise<void> {
  const pg = db.getExecutor().adapter instanceof PostgresAdapter;
  await db.schema.alterTable('edge_terminals').addColumn('applied_seq', pg ? 'bigint' : 'integer', (c) => c.notNull().defaultTo(0)).execute();
  await db.schema.alterTable('edge_terminals').addColumn('journal_id', 'text').execute();
  await db.schema.alterTable('edge_terminals').addColumn('gap_since', 'text').execute();
  await db.schema.alterTable('edge_events').addColumn('journal_id', 'text').execute();
  // events already processed before this migration count as applied
  await sql`UPDATE edge_terminals SET applied_seq = last_seq`.execute(db);
  await db.schema.createIndex('edge_events_journal_seq').on('edge_events').columns(['terminal_id', 'journal_id', 'seq']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('edge_events_journal_seq').execute();
  await db.schema.alterTable('edge_events').dropColumn('journal_id').execute();
  for (const c of ['gap_since', 'journal_id', 'applied_seq']) await db.schema.alterTable('edge_terminals').dropColumn(c).execute();
}
