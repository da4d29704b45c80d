import { type Kysely, PostgresAdapter, sql } from 'kysely';

// The booking candidate search (shipments/booking.ts, bookAt): the free lockers of a PUP in
// candidate order (volume, normal before special kinds, name). This partial expression index holds
// exactly the free, active lockers in that order, so the search reads the first 16 index entries
// instead of every free locker of the PUP plus a sort. The ORDER BY there must stay identical to
// these expressions (on PostgreSQL names compare in the "C" collation, as the query does).
export async function up(db: Kysely<any>): Promise<void> {
  const pg = db.getExecutor().adapter instanceof PostgresAdapter;
  const name = sql.raw(pg ? 'name COLLATE "C"' : 'name');
  await sql`CREATE INDEX lockers_free_candidates ON lockers (pup_uid, (width * height * length), (CASE WHEN type_code = 'normal' THEN 0 ELSE 1 END), ${name}) WHERE booked_shipment_uid IS NULL AND active = 1`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('lockers_free_candidates').execute();
}
