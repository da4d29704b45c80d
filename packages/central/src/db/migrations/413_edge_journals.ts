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
  // The journals known so far, per terminal oldest first: those of its stored events in the order
  // of their first event's arrival, except that the journal the live one replaced comes before the
  // live one and the cursor's before the live one too (a store may have sent a status and no event:
  // ordered by its events alone it would come after the live one, and a late status of it take the
  // live journal); a live journal without events is the newest.
  const firstSeen = await sql<{ terminal_id: string; journal_id: string; first: string }>`SELECT terminal_id, journal_id, min(received_at) AS first FROM edge_events WHERE journal_id IS NOT NULL GROUP BY terminal_id, journal_id ORDER BY terminal_id, min(received_at), journal_id`.execute(db);
  const terminals = await sql<{ terminal_id: string; journal_id: string | null; live_journal_id: string | null; previous_live_journal_id: string | null }>`SELECT terminal_id, journal_id, live_journal_id, previous_live_journal_id FROM edge_terminals`.execute(db);
  const order = new Map<string, { journal: string; first: string }[]>();
  for (const r of firstSeen.rows) {
    const list = order.get(r.terminal_id) ?? [];
    list.push({ journal: r.journal_id, first: r.first });
    order.set(r.terminal_id, list);
  }
  const now = new Date().toISOString();
  for (const t of terminals.rows) {
    const list = order.get(t.terminal_id) ?? [];
    order.set(t.terminal_id, list);
    const live = t.live_journal_id;
    // moved (or added) just before the live journal, or at the end when there is none
    const before = (j: string | null) => {
      if (!j || j === live) return;
      const at = list.findIndex((x) => x.journal === j);
      const entry = at >= 0 ? list.splice(at, 1)[0]! : { journal: j, first: now };
      const liveAt = live ? list.findIndex((x) => x.journal === live) : -1;
      if (liveAt >= 0) list.splice(liveAt, 0, entry);
      else if (at >= 0) list.splice(at, 0, entry);
      else list.push(entry);
    };
    before(t.previous_live_journal_id);
    if (t.journal_id !== t.previous_live_journal_id) before(t.journal_id);
    if (live && !list.some((x) => x.journal === live)) list.push({ journal: live, first: now });
  }
  for (const [terminalId, list] of [...order].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))) {
    for (const x of list) await sql`INSERT INTO edge_journals (terminal_id, journal_id, first_seen_at) VALUES (${terminalId}, ${x.journal}, ${x.first}) ON CONFLICT (terminal_id, journal_id) DO NOTHING`.execute(db);
  }
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('edge_terminals').dropColumn('pending_through_journal').execute();
  await db.schema.dropTable('edge_journals').execute();
}
