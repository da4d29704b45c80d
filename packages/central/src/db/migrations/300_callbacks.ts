import type { Kysely } from 'kysely';

// Callback registrations, the callback outbox and Idempotency-Key storage (same shapes on SQLite
// and PostgreSQL: text, integer).
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('callback_configs')
    .addColumn('tenant_uid', 'text', (c) => c.primaryKey())
    .addColumn('url', 'text')
    .addColumn('auth_type', 'text', (c) => c.notNull())
    .addColumn('auth_key', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .execute();

  await db.schema
    .createTable('callback_outbox')
    .addColumn('event_id', 'text', (c) => c.primaryKey())
    .addColumn('tenant_uid', 'text', (c) => c.notNull())
    .addColumn('shipment_uid', 'text', (c) => c.notNull())
    .addColumn('sequence', 'integer', (c) => c.notNull())
    .addColumn('message_type', 'text', (c) => c.notNull())
    .addColumn('payload', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('next_attempt_at', 'text', (c) => c.notNull())
    .addColumn('lease_until', 'text')
    .addColumn('lease_owner', 'text')
    .addColumn('last_status', 'integer')
    .addColumn('last_error', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('delivered_at', 'text')
    .addUniqueConstraint('callback_outbox_shipment_seq', ['shipment_uid', 'sequence'])
    .execute();
  await db.schema.createIndex('callback_outbox_due').on('callback_outbox').columns(['status', 'next_attempt_at']).execute();
  await db.schema.createIndex('callback_outbox_shipment_status').on('callback_outbox').columns(['shipment_uid', 'status', 'sequence']).execute();
  await db.schema.createIndex('callback_outbox_tenant').on('callback_outbox').columns(['tenant_uid', 'status']).execute();

  await db.schema
    .createTable('idempotency_keys')
    .addColumn('tenant_uid', 'text', (c) => c.notNull())
    .addColumn('idem_key', 'text', (c) => c.notNull())
    .addColumn('request_hash', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('locked_until', 'text', (c) => c.notNull())
    .addColumn('response_status', 'integer')
    .addColumn('response_body', 'text')
    .addColumn('response_type', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('expires_at', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('idempotency_keys_pk', ['tenant_uid', 'idem_key'])
    .execute();
  await db.schema.createIndex('idempotency_keys_expires').on('idempotency_keys').column('expires_at').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const t of ['idempotency_keys', 'callback_outbox', 'callback_configs']) await db.schema.dropTable(t).execute();
}
