import { type Kysely, PostgresAdapter, sql } from 'kysely';

// A terminal's event sequence number is its journal's row id, a 64-bit integer. On PostgreSQL the
// columns were 32-bit: an event past 2^31 could not be stored, so it was never acknowledged and
// held up the terminal's later events. SQLite integers are 64-bit already.
export async function up(db: Kysely<any>): Promise<void> {
  if (!(db.getExecutor().adapter instanceof PostgresAdapter)) return;
  await sql`ALTER TABLE edge_events ALTER COLUMN seq TYPE bigint`.execute(db);
  await sql`ALTER TABLE edge_terminals ALTER COLUMN last_seq TYPE bigint`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  if (!(db.getExecutor().adapter instanceof PostgresAdapter)) return;
  await sql`ALTER TABLE edge_events ALTER COLUMN seq TYPE integer`.execute(db);
  await sql`ALTER TABLE edge_terminals ALTER COLUMN last_seq TYPE integer`.execute(db);
}
