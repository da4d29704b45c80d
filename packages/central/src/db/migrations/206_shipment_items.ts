import { type Kysely, PostgresAdapter, sql } from 'kysely';
import { SHIPMENT_ITEM_TRIGGERS, syncShipmentItems } from '../../shipments/items';

// SQLite: each shipment's GetShipments item kept in its row (shipments.item_json), written by
// triggers on every write path (shipments/items.ts): a page reads one stored text per row instead
// of writing every item from its columns and four joined names (150 us against 655 us for a page
// of 100; the read thread's statement bounded the page's throughput). The triggers and the items
// are written by syncShipmentItems, which also runs after every migration: an item changed in
// code is written anew in every store without a migration of its own. PostgreSQL: migration 207.
export async function up(db: Kysely<any>): Promise<void> {
  if (db.getExecutor().adapter instanceof PostgresAdapter) return;
  // Kysely records a SQLite migration after up() returns, outside its transaction: a process that
  // died between the two runs up() again, which must then find the column there
  await db.transaction().execute(async (trx) => {
    const { rows } = await sql<{ n: number }>`SELECT count(*) AS n FROM pragma_table_info('shipments') WHERE name = 'item_json'`.execute(trx);
    if (!rows[0]?.n) await trx.schema.alterTable('shipments').addColumn('item_json', 'text').execute();
    await syncShipmentItems(trx);
  });
}

export async function down(db: Kysely<any>): Promise<void> {
  if (db.getExecutor().adapter instanceof PostgresAdapter) return;
  for (const name of Object.keys(SHIPMENT_ITEM_TRIGGERS)) await sql.raw(`DROP TRIGGER IF EXISTS ${name}`).execute(db);
  await sql`DROP INDEX IF EXISTS shipments_active_locker`.execute(db);
  await db.schema.alterTable('shipments').dropColumn('item_json').execute();
}
