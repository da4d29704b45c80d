import type { Kysely } from 'kysely';

// The edge sync's change marker per pick up point reads the latest locker change of every point
// every edge.pollMs (edge/sync.ts readMarkers: max(updated_at) grouped by pup_uid). Through the
// point's index it read every locker row: 30 ms a poll at 40,000 lockers (3 % of a core all the
// time). A covering index serves it from the index alone: 15 ms.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.createIndex('lockers_pup_updated').on('lockers').columns(['pup_uid', 'updated_at']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('lockers_pup_updated').execute();
}
