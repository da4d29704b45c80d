import { type Kysely, sql } from 'kysely';

// Shipments, their audit trail, objects, access codes, unlock throttling. Indexes serve every
// filter and sort of the GetShipments family (always scoped by tenant), the expiry sweep, chains
// and the code lookups of door events.
export async function up(db: Kysely<any>): Promise<void> {
  let t = db.schema
    .createTable('shipments')
    .addColumn('uid', 'text', (c) => c.primaryKey())
    .addColumn('tenant_uid', 'text', (c) => c.notNull())
    .addColumn('type_code', 'text', (c) => c.notNull())
    .addColumn('flow', 'text', (c) => c.notNull())
    .addColumn('state_code', 'text', (c) => c.notNull())
    .addColumn('active', 'integer', (c) => c.notNull())
    .addColumn('state_start', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull());
  for (const col of ['reference_no', 'reference_case_no', 'description', 'from_user_uid', 'to_user_uid', 'from_address', 'to_address']) t = t.addColumn(col, 'text');
  t = t
    .addColumn('receiver_delayed', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('keep_booked', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('pup_uid', 'text', (c) => c.notNull())
    .addColumn('locker_uid', 'text')
    .addColumn('width', 'double precision', (c) => c.notNull())
    .addColumn('height', 'double precision', (c) => c.notNull())
    .addColumn('length', 'double precision', (c) => c.notNull());
  for (const col of ['swaps_shipment_uid', 'prior_shipment_uid', 'waits_on_uid', 'wait_kind', 'drop_off_deadline']) t = t.addColumn(col, 'text');
  await t.addColumn('seq', 'integer', (c) => c.notNull().defaultTo(0)).execute();

  const idx = (name: string, cols: string[]) => db.schema.createIndex(name).on('shipments').columns(cols).execute();
  await idx('shipments_t_active_created', ['tenant_uid', 'active', 'created_at']);
  await idx('shipments_t_active_updated', ['tenant_uid', 'active', 'updated_at']);
  await idx('shipments_t_type_active_created', ['tenant_uid', 'type_code', 'active', 'created_at']);
  await idx('shipments_t_type_active_updated', ['tenant_uid', 'type_code', 'active', 'updated_at']);
  await idx('shipments_t_state_created', ['tenant_uid', 'state_code', 'created_at']);
  await idx('shipments_t_pup_created', ['tenant_uid', 'pup_uid', 'created_at']);
  await idx('shipments_t_from', ['tenant_uid', 'from_user_uid']);
  await idx('shipments_t_to', ['tenant_uid', 'to_user_uid']);
  await idx('shipments_deadline', ['state_code', 'drop_off_deadline']);
  await idx('shipments_waits_on', ['waits_on_uid']);
  await idx('shipments_swaps', ['swaps_shipment_uid']);

  await db.schema
    .createTable('shipment_transitions')
    .addColumn('shipment_uid', 'text', (c) => c.notNull())
    .addColumn('seq', 'integer', (c) => c.notNull())
    .addColumn('tenant_uid', 'text', (c) => c.notNull())
    .addColumn('from_state', 'text')
    .addColumn('to_state', 'text', (c) => c.notNull())
    .addColumn('cause', 'text', (c) => c.notNull())
    .addColumn('detail', 'text')
    .addColumn('at', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('shipment_transitions_pk', ['shipment_uid', 'seq'])
    .execute();

  await db.schema
    .createTable('shipment_objects')
    .addColumn('uid', 'text', (c) => c.primaryKey())
    .addColumn('shipment_uid', 'text', (c) => c.notNull())
    .addColumn('reference_no', 'text')
    .addColumn('description', 'text')
    .addColumn('weight', 'integer', (c) => c.notNull())
    .addColumn('count', 'integer', (c) => c.notNull())
    .addColumn('width', 'double precision', (c) => c.notNull())
    .addColumn('height', 'double precision', (c) => c.notNull())
    .addColumn('length', 'double precision', (c) => c.notNull())
    .addColumn('object_type_uid', 'text')
    .addColumn('ord', 'integer', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('shipment_objects_shipment').on('shipment_objects').columns(['shipment_uid', 'ord']).execute();

  await db.schema
    .createTable('access_codes')
    .addColumn('uid', 'text', (c) => c.primaryKey())
    .addColumn('shipment_uid', 'text', (c) => c.notNull())
    .addColumn('tenant_uid', 'text', (c) => c.notNull())
    .addColumn('pup_uid', 'text', (c) => c.notNull())
    .addColumn('locker_uid', 'text')
    .addColumn('usage', 'text', (c) => c.notNull())
    .addColumn('type', 'text', (c) => c.notNull())
    .addColumn('value', 'text', (c) => c.notNull())
    .addColumn('valid', 'integer', (c) => c.notNull())
    .addColumn('shared', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('invalidated_at', 'text')
    .execute();
  await db.schema.createIndex('access_codes_shipment').on('access_codes').columns(['shipment_uid', 'usage', 'created_at']).execute();
  await db.schema.createIndex('access_codes_pup_value').on('access_codes').columns(['pup_uid', 'value']).execute();
  // A PIN is unique among the valid codes of one pick up point (copies of a swap excluded).
  await db.schema
    .createIndex('access_codes_pin_unique')
    .on('access_codes')
    .columns(['pup_uid', 'value'])
    .unique()
    .where(sql.ref('valid'), '=', 1)
    .where(sql.ref('shared'), '=', 0)
    .where(sql.ref('type'), '=', sql.lit('Code'))
    .execute();

  await db.schema
    .createTable('unlock_failures')
    .addColumn('shipment_uid', 'text', (c) => c.notNull())
    .addColumn('at', 'text', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('unlock_failures_shipment').on('unlock_failures').columns(['shipment_uid', 'at']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const t of ['unlock_failures', 'access_codes', 'shipment_objects', 'shipment_transitions', 'shipments']) await db.schema.dropTable(t).execute();
}
