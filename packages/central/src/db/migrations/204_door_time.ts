import type { Kysely } from 'kysely';

// Door time is the truth (docs/state-machine.md, "Door time"): a transition caused by a terminal's
// event is dated with the time at the door (`at`), and the time the central service recorded it is
// kept next to it for audit (`received_at`; null on rows written before this migration, where
// both were the arrival time). An Expired shipment keeps the deadline it missed
// (`missed_deadline`): a drop-off that arrives after the expiry but happened at the door before
// that deadline wins the expiry race ("The expiry race").
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('shipment_transitions').addColumn('received_at', 'text').execute();
  await db.schema.alterTable('shipments').addColumn('missed_deadline', 'text').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('shipments').dropColumn('missed_deadline').execute();
  await db.schema.alterTable('shipment_transitions').dropColumn('received_at').execute();
}
