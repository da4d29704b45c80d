import type { Kysely } from 'kysely';

// Per terminal (edge/clock.ts, docs/edge-protocol.md "Clock skew and door time"):
// - clock_offset_ms: central receive time - status.at, measured at every online status;
// - clock_skewed: 1 while |offset| exceeds edge.maxClockSkewSeconds (its event times are then
//   corrected by the offset);
// - clock_measured_at: when (central time) the offset was measured;
// - reported_through: a central time up to which every event of the terminal has reached the
//   central service (a status whose journal had nothing unsent, or whose lastSeq the central
//   service has received): the expiry sweep's proof that no earlier drop-off is still on its way;
// - pending_through_at / pending_through_seq: a status that still had events unsent: its
//   (corrected) time becomes reported_through once the central service holds seq pending_through_seq.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('edge_terminals').addColumn('clock_offset_ms', 'bigint').execute();
  await db.schema.alterTable('edge_terminals').addColumn('clock_skewed', 'integer', (c) => c.notNull().defaultTo(0)).execute();
  await db.schema.alterTable('edge_terminals').addColumn('clock_measured_at', 'text').execute();
  await db.schema.alterTable('edge_terminals').addColumn('reported_through', 'text').execute();
  await db.schema.alterTable('edge_terminals').addColumn('pending_through_at', 'text').execute();
  await db.schema.alterTable('edge_terminals').addColumn('pending_through_seq', 'bigint').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const c of ['pending_through_seq', 'pending_through_at', 'reported_through', 'clock_measured_at', 'clock_skewed', 'clock_offset_ms']) await db.schema.alterTable('edge_terminals').dropColumn(c).execute();
}
