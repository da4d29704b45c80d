import { type Kysely, PostgresAdapter, sql } from 'kysely';

// The booking candidate search (shipments/booking.ts, bookAt): the free lockers of a PUP in
// candidate order (volume, normal before special kinds, name). This partial expression index holds
// exactly the free, active lockers in that order, so the search reads the first 16 index entries
// instead of every free locker of the PUP plus a sort. The ORDER BY there must stay identical to
// these expressions.
//
// SQLite only. On PostgreSQL the index's predicate (booked_shipment_uid IS NULL AND active = 1)
// is also implied by the single-locker statements of takeLocker (uid = $1 AND ... IS NULL AND
// active = 1), and on a freshly loaded table without statistics the planner then chose to scan
// this index instead of the primary key: bookings fell from ~150/s to ~6/s in the benchmark.
export async function up(db: Kysely<any>): Promise<void> {
  if (db.getExecutor().adapter instanceof PostgresAdapter) return;
  await sql`CREATE INDEX lockers_free_candidates ON lockers (pup_uid, (width * height * length), (CASE WHEN type_code = 'normal' THEN 0 ELSE 1 END), name) WHERE booked_shipment_uid IS NULL AND active = 1`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('lockers_free_candidates').ifExists().execute();
}
