import { type Kysely, sql } from 'kysely';

// Tenants, pick up points, lockers, terminals, accounts. Types chosen to mean the same on
// SQLite and PostgreSQL: text, integer, double precision.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.createTable('settings').addColumn('key', 'text', (c) => c.primaryKey()).addColumn('value', 'text', (c) => c.notNull()).execute();

  await db.schema
    .createTable('tenants')
    .addColumn('uid', 'text', (c) => c.primaryKey())
    .addColumn('client_id', 'text', (c) => c.notNull().unique())
    .addColumn('secret_hash', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('main_account_uid', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .execute();

  await db.schema
    .createTable('pups')
    .addColumn('uid', 'text', (c) => c.primaryKey())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('time_zone', 'text')
    .addColumn('loc_street_name', 'text')
    .addColumn('loc_mailbox', 'text')
    .addColumn('loc_city', 'text')
    .addColumn('loc_country_iso2', 'text')
    .addColumn('loc_latitude', 'double precision')
    .addColumn('loc_longitude', 'double precision')
    .addColumn('delivery_address', 'text')
    .addColumn('parking_address', 'text')
    .addColumn('external_reference', 'text')
    .addColumn('overflow_pup_uid', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('pups_name').on('pups').column('name').execute();

  await db.schema
    .createTable('tenant_pups')
    .addColumn('tenant_uid', 'text', (c) => c.notNull())
    .addColumn('pup_uid', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('tenant_pups_pk', ['tenant_uid', 'pup_uid'])
    .execute();
  await db.schema.createIndex('tenant_pups_pup').on('tenant_pups').column('pup_uid').execute();

  await db.schema
    .createTable('lockers')
    .addColumn('uid', 'text', (c) => c.primaryKey())
    .addColumn('pup_uid', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('width', 'double precision', (c) => c.notNull())
    .addColumn('height', 'double precision', (c) => c.notNull())
    .addColumn('length', 'double precision', (c) => c.notNull())
    .addColumn('size_code', 'text')
    .addColumn('type_code', 'text', (c) => c.notNull())
    .addColumn('bus', 'text', (c) => c.notNull())
    .addColumn('board_address', 'integer', (c) => c.notNull())
    .addColumn('lock_number', 'integer', (c) => c.notNull())
    .addColumn('booked_shipment_uid', 'text')
    .addColumn('active', 'integer', (c) => c.notNull().defaultTo(1))
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addUniqueConstraint('lockers_pup_name', ['pup_uid', 'name'])
    .execute();
  await db.schema.createIndex('lockers_pup_booked').on('lockers').columns(['pup_uid', 'booked_shipment_uid']).execute();
  await db.schema.createIndex('lockers_booked').on('lockers').column('booked_shipment_uid').execute();

  await db.schema
    .createTable('terminals')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('pup_uid', 'text', (c) => c.notNull())
    .addColumn('secret_hash', 'text', (c) => c.notNull())
    .addColumn('name', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .execute();

  let t = db.schema
    .createTable('accounts')
    .addColumn('uid', 'text', (c) => c.primaryKey())
    .addColumn('user_name', 'text', (c) => c.notNull())
    .addColumn('user_name_key', 'text', (c) => c.notNull().unique())
    .addColumn('email_address', 'text', (c) => c.notNull())
    .addColumn('email_key', 'text', (c) => c.notNull().unique());
  for (const col of ['first_name', 'last_name', 'phone_number', 'main_pup_uid', 'mail_code', 'language_code', 'street_name', 'street_no', 'mailbox', 'city', 'country_code']) {
    t = t.addColumn(col, 'text');
  }
  for (const [col, def] of [
    ['can_change_first_name', 1], ['can_change_last_name', 1], ['can_change_email_address', 1], ['can_change_phone_number', 1],
    ['can_change_language_code', 1], ['can_change_main_pick_up_point', 1], ['can_change_address', 1],
    ['can_remove_automatically', 0], ['can_remove_manually', 1], ['is_dispatcher', 0],
  ] as const) {
    t = t.addColumn(col, 'integer', (c) => c.notNull().defaultTo(def));
  }
  await t.addColumn('created_at', 'text', (c) => c.notNull()).addColumn('updated_at', 'text', (c) => c.notNull()).execute();
  await db.schema.createIndex('accounts_main_pup').on('accounts').column('main_pup_uid').execute();

  await db.schema
    .createTable('account_pups')
    .addColumn('account_uid', 'text', (c) => c.notNull())
    .addColumn('pup_uid', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('account_pups_pk', ['account_uid', 'pup_uid'])
    .execute();
  await db.schema.createIndex('account_pups_pup').on('account_pups').column('pup_uid').execute();
  void sql;
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const t of ['account_pups', 'accounts', 'terminals', 'lockers', 'tenant_pups', 'pups', 'tenants', 'settings']) {
    await db.schema.dropTable(t).execute();
  }
}
