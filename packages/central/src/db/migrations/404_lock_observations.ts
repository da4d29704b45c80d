import type { Kysely } from 'kysely';

// What the doors say (issue 11 part 7, edge/observations.ts): the last observed physical state of
// each locker from its terminal's events, and the disagreements between it and the shipments that
// are currently open (each is logged once when it appears, whichever central instance sees it).
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('lock_observations')
    .addColumn('locker_uid', 'text', (c) => c.primaryKey())
    .addColumn('pup_uid', 'text', (c) => c.notNull())
    .addColumn('terminal_id', 'text', (c) => c.notNull())
    .addColumn('journal_id', 'text')
    .addColumn('seq', 'bigint', (c) => c.notNull())
    .addColumn('event_id', 'text', (c) => c.notNull())
    .addColumn('at', 'text', (c) => c.notNull())
    .addColumn('received_at', 'text', (c) => c.notNull())
    .addColumn('door', 'text')
    .addColumn('door_at', 'text')
    .addColumn('item', 'integer')
    .addColumn('item_at', 'text')
    .addColumn('left_open_at', 'text')
    .addColumn('jammed_at', 'text')
    .addColumn('board_offline_at', 'text')
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('lock_observations_pup').on('lock_observations').column('pup_uid').execute();

  await db.schema
    .createTable('lock_disagreements')
    .addColumn('locker_uid', 'text', (c) => c.notNull())
    .addColumn('kind', 'text', (c) => c.notNull())
    .addColumn('pup_uid', 'text', (c) => c.notNull())
    .addColumn('shipment_uid', 'text')
    .addColumn('state', 'text')
    .addColumn('since', 'text', (c) => c.notNull())
    .addColumn('detected_at', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('lock_disagreements_pk', ['locker_uid', 'kind'])
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const t of ['lock_disagreements', 'lock_observations']) await db.schema.dropTable(t).execute();
}
