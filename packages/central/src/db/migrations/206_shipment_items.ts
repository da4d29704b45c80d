import { type Kysely, PostgresAdapter, sql } from 'kysely';
import { syncShipmentItems } from '../../shipments/items';

// SQLite: each shipment's GetShipments item kept in its row (shipments.item_json), written by
// triggers on every write path (shipments/items.ts): a page reads one stored text per row instead
// of writing every item from its columns and four joined names (150 us against 655 us for a page
// of 100; the read thread's statement bounded the page's throughput). The triggers and the items
// are written by syncShipmentItems, which also runs after every migration: an item changed in
// code is written anew in every store without a migration of its own. PostgreSQL writes the item
// in the page's statement: nothing here.
export async function up(db: Kysely<any>): Promise<void> {
  if (db.getExecutor().adapter instanceof PostgresAdapter) return;
  await db.transaction().execute(async (trx) => {
    await trx.schema.alterTable('shipments').addColumn('item_json', 'text').execute();
    await syncShipmentItems(trx);
  });
}

export async function down(db: Kysely<any>): Promise<void> {
  if (db.getExecutor().adapter instanceof PostgresAdapter) return;
  const { rows } = await sql<{ name: string }>`SELECT name FROM sqlite_schema WHERE type = 'trigger' AND name LIKE '%\_item\_%' ESCAPE '\\'`.execute(db);
  for (const r of rows) await sql.raw(`DROP TRIGGER ${r.name}`).execute(db);
  await sql`DROP INDEX IF EXISTS shipments_active_locker`.execute(db);
  await db.schema.alterTable('shipments').dropColumn('item_json').execute();
}
