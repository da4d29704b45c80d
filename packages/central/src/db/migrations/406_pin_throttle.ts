import type { Kysely } from 'kysely';

// Wrong PINs are throttled per tenant and locker, per tenant and pick up point, and per tenant, not
// only per shipment (docs/api.md, "Throttling and limits"). The failures stay in the database, so
// every central instance sees the same counts. Rows written before this migration have no tenant
// and count only for their shipment, as before. `at` alone: old rows are purged by time.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('unlock_failures').addColumn('tenant_uid', 'text').execute();
  await db.schema.alterTable('unlock_failures').addColumn('pup_uid', 'text').execute();
  await db.schema.alterTable('unlock_failures').addColumn('locker_uid', 'text').execute();
  await db.schema.createIndex('unlock_failures_tenant').on('unlock_failures').columns(['tenant_uid', 'at']).execute();
  await db.schema.createIndex('unlock_failures_at').on('unlock_failures').column('at').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('unlock_failures_at').execute();
  await db.schema.dropIndex('unlock_failures_tenant').execute();
  for (const c of ['locker_uid', 'pup_uid', 'tenant_uid']) await db.schema.alterTable('unlock_failures').dropColumn(c).execute();
}
