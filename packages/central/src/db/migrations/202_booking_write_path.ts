import type { Kysely } from 'kysely';
import { sql } from 'kysely';

// Fewer index entries written per booking. A booking writes ~40 b-tree entries; every one costs
// CPU and, when it lands on a page no other booking of the batch touched, a whole page in the
// WAL at COMMIT. These indexes were paying on every booking for lookups that never need them:
//
// - lockers_pup_booked (pup_uid, booked_shipment_uid) moved an entry on every booking and every
//   release; the lookups by PUP only need pup_uid (the free ones use lockers_free_candidates).
// - lockers_booked held an entry for every free locker (NULL); lookups are always by a shipment
//   uid, so only booked lockers need to be in it.
// - shipments_waits_on / shipments_swaps held an entry per shipment, almost all NULL; chains are
//   looked up by a uid, so only shipments in a chain need to be in them.
// (The outbox's share is in 301_outbox_indexes.)
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('lockers_pup_booked').execute();
  await db.schema.createIndex('lockers_pup').on('lockers').column('pup_uid').execute();
  await db.schema.dropIndex('lockers_booked').execute();
  await db.schema.createIndex('lockers_booked').on('lockers').column('booked_shipment_uid').where(sql.ref('booked_shipment_uid'), 'is not', null).execute();
  await db.schema.dropIndex('shipments_waits_on').execute();
  await db.schema.createIndex('shipments_waits_on').on('shipments').column('waits_on_uid').where(sql.ref('waits_on_uid'), 'is not', null).execute();
  await db.schema.dropIndex('shipments_swaps').execute();
  await db.schema.createIndex('shipments_swaps').on('shipments').column('swaps_shipment_uid').where(sql.ref('swaps_shipment_uid'), 'is not', null).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const [name, table, col] of [
    ['shipments_swaps', 'shipments', 'swaps_shipment_uid'],
    ['shipments_waits_on', 'shipments', 'waits_on_uid'],
    ['lockers_booked', 'lockers', 'booked_shipment_uid'],
  ] as const) {
    await db.schema.dropIndex(name).execute();
    await db.schema.createIndex(name).on(table).column(col).execute();
  }
  await db.schema.dropIndex('lockers_pup').execute();
  await db.schema.createIndex('lockers_pup_booked').on('lockers').columns(['pup_uid', 'booked_shipment_uid']).execute();
}
