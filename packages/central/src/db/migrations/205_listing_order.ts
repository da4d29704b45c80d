import type { Kysely } from 'kysely';

// The GetShipments family sorts by (created_at | updated_at, uid): uid breaks ties, so the order
// (and paging) is total. The listing indexes ended at the time column, so a page read its rows in
// time order and then sorted each run of equal times by uid in a temporary b-tree that held every
// selected column of every row of the page (SQLite: "USE TEMP B-TREE FOR LAST TERM OF ORDER BY",
// about a fifth of the page query). With uid as the last column the index gives the whole order:
// the page is the first LIMIT entries of one index range, read in place, in either direction.
// Same names, same number of index entries per booking (a little wider).
const LISTING: [string, string[]][] = [
  ['shipments_t_active_created', ['tenant_uid', 'active', 'created_at']],
  ['shipments_t_active_updated', ['tenant_uid', 'active', 'updated_at']],
  ['shipments_t_type_active_created', ['tenant_uid', 'type_code', 'active', 'created_at']],
  ['shipments_t_type_active_updated', ['tenant_uid', 'type_code', 'active', 'updated_at']],
];

export async function up(db: Kysely<any>): Promise<void> {
  for (const [name, cols] of LISTING) {
    await db.schema.dropIndex(name).execute();
    await db.schema.createIndex(name).on('shipments').columns([...cols, 'uid']).execute();
  }
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const [name, cols] of LISTING) {
    await db.schema.dropIndex(name).execute();
    await db.schema.createIndex(name).on('shipments').columns(cols).execute();
  }
}
