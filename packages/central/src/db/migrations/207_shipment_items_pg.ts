import { type Kysely, PostgresAdapter, sql } from 'kysely';
import { PG_ITEM_FUNCTION_NAMES, PG_ITEM_TRIGGER_TABLES, PG_REFRESH_TABLE, syncShipmentItems } from '../../shipments/items';

// PostgreSQL: each shipment's GetShipments item kept in its row too (shipments.item_json), written
// by PL/pgSQL triggers (shipments/items.ts): PostgreSQL's own page of 100 among 100,000 read as
// stored, 8,121-10,534 pages/s, against 1,944-2,137 written from the columns and four joined
// names (pgbench, 64 connections). Migration 206 did the same for SQLite. The column, the table of
// changed names, and the functions, triggers and items (syncShipmentItems, in the migration's
// transaction; it runs again after every migration, in a transaction of its own, whenever the
// code's item changes). A lock wait of this migration that ends in a deadlock with a live
// transaction fails the start; the next start applies it again.
export async function up(db: Kysely<any>): Promise<void> {
  if (!(db.getExecutor().adapter instanceof PostgresAdapter)) return;
  await sql`ALTER TABLE shipments ADD COLUMN IF NOT EXISTS item_json text`.execute(db);
  await sql.raw(PG_REFRESH_TABLE).execute(db);
  await syncShipmentItems(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  if (!(db.getExecutor().adapter instanceof PostgresAdapter)) return;
  for (const [name, table] of PG_ITEM_TRIGGER_TABLES) await sql.raw(`DROP TRIGGER IF EXISTS ${name} ON ${table}`).execute(db);
  for (const fn of PG_ITEM_FUNCTION_NAMES) await sql.raw(`DROP FUNCTION IF EXISTS ${fn}()`).execute(db);
  await sql`DROP TABLE IF EXISTS shipment_item_refresh`.execute(db);
  await sql`DROP INDEX IF EXISTS shipments_active_locker`.execute(db);
  await sql`ALTER TABLE shipments DROP COLUMN IF EXISTS item_json`.execute(db);
}
