import type { Kysely } from 'kysely';

// Fewer index entries per queued callback message (every booking queues one; see
// 202_booking_write_path): callback_outbox_shipment_status duplicated the unique
// (shipment_uid, sequence) index that serves the per-shipment order check, and
// callback_outbox_tenant served no query.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('callback_outbox_shipment_status').execute();
  await db.schema.dropIndex('callback_outbox_tenant').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.createIndex('callback_outbox_tenant').on('callback_outbox').columns(['tenant_uid', 'status']).execute();
  await db.schema.createIndex('callback_outbox_shipment_status').on('callback_outbox').columns(['shipment_uid', 'status', 'sequence']).execute();
}
