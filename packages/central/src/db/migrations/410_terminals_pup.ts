import type { Kysely } from 'kysely';

// The terminals of a pick up point (edge/sync.ts: a point's codes changed, push to its online
// terminals) were found by scanning every terminal: about 6 ms a query at 10,000 terminals, and
// after a restart one such query per point queued on the one SQLite connection for a minute.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.createIndex('terminals_pup').on('terminals').column('pup_uid').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('terminals_pup').execute();
}
