import type { Kysely } from 'kysely';

// down/lockers (docs/edge-protocol.md): per terminal, the version of the locker list last pushed
// (claimed by compare-and-set, as codes_version) and a digest of that list, so a change is pushed
// once and an unchanged list is not pushed again.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('edge_terminals').addColumn('lockers_version', 'integer', (c) => c.notNull().defaultTo(0)).execute();
  await db.schema.alterTable('edge_terminals').addColumn('lockers_digest', 'text').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const c of ['lockers_digest', 'lockers_version']) await db.schema.alterTable('edge_terminals').dropColumn(c).execute();
}
