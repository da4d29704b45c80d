import type { Kysely } from 'kysely';

// The change marker of a pick up point's codes (edge/sync.ts): a counter raised in the very
// transaction that changes the point's codes (shipments/service.ts ServiceTxRunner). The marker
// poll of every central instance reads one row per pick up point instead of aggregating the whole
// access_codes table, which grows with every booking ever made (at 100,000 shipments that
// aggregate took ~0.3 s of every second on SQLite).
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('pup_code_versions')
    .addColumn('pup_uid', 'text', (c) => c.primaryKey())
    .addColumn('version', 'bigint', (c) => c.notNull())
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('pup_code_versions').execute();
}
