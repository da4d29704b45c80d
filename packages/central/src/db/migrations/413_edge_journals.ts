import { type Kysely, PostgresAdapter, sql } from 'kysely';

// The order in which the central service first saw each journal of a terminal (edge_journals:
// `generation` grows with every journal recorded, assigned by the database, so every instance
// agrees whatever its clock). A status names the terminal's live journal (migration 412); one
// naming a journal seen before the live one (or before the cursor's) is stale: recorded late by a
// slower instance, it changes nothing. Migration 412 kept only the journal the live one replaced,
// which a status naming one replaced two stores ago, or any stale status while the live journal
// was still unknown, got past: the live journal then pointed at a dead store, whose statuses never
// come again to correct it, and every status of the real one counted as stale (the terminal's
// events never acknowledged again). Also the journal whose seq a pending expiry proof counts
// (edge_terminals.pending_through_journal; edge/clock.ts): a seq of one journal proves nothing
// about another's.
export async function up(db: Kysely<any>): Promise<void> {
  const pg = db.getExecutor().adapter instanceof PostgresAdapter;
  await db.schema
    .createTable('edge_journals')
    .addColumn('generation', pg ? 'bigserial' : 'integer', (c) => c.primaryKey())
    .addColumn('terminal_id', 'text', (c) => c.notNull())
    .addColumn('journal_id', 'text', (c) => c.notNull())
    .addColumn('first_seen_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('edge_journals_terminal_journal').unique().on('edge_journals').columns(['terminal_id', 'journal_id']).execute();
  await db.schema.alterTable('edge_terminals').addColumn('pending_through_journal', 'text').execute();
  // The journals known so far, oldest first: those of the stored events in the order of their
  // first event's arrival, then the journal the live one replaced, the cursor's and the live one
  // (each only when not recorded yet)
  const now = new Date().toISOString();
  await sql`INSERT INTO edge_journals (terminal_id, journal_id, first_seen_at)
    SELECT terminal_id, journal_id, min(received_at) FROM edge_events WHERE journal_id IS NOT NULL
    GROUP BY terminal_id, journal_id ORDER BY min(received_at), terminal_id, journal_id`.execute(db);
  for (const column of ['previous_live_journal_id', 'journal_id', 'live_journal_id']) {
    await sql`INSERT INTO edge_journals (terminal_id, journal_id, first_seen_at)
      SELECT terminal_id, ${sql.ref(column)}, ${now} FROM edge_terminals WHERE ${sql.ref(column)} IS NOT NULL ORDER BY terminal_id
      ON CONFLICT (terminal_id, journal_id) DO NOTHING`.execute(db);
  }
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('edge_terminals').dropColumn('pending_through_journal').execute();
  await db.schema.dropTable('edge_journals').execute();
}
