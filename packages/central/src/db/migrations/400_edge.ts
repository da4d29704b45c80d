import type { Kysely } from 'kysely';

// Edge sync (terminal <-> central over MQTT): per-terminal sync state and last status, the code
// set last pushed to each terminal, and every event a terminal reported (deduplicated by eventId).
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('edge_terminals')
    .addColumn('terminal_id', 'text', (c) => c.primaryKey())
    .addColumn('epoch', 'text', (c) => c.notNull())
    .addColumn('codes_version', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('online', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('status_at', 'text')
    .addColumn('last_status', 'text')
    .addColumn('last_seq', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .execute();

  await db.schema
    .createTable('edge_pushed_codes')
    .addColumn('terminal_id', 'text', (c) => c.notNull())
    .addColumn('code_uid', 'text', (c) => c.notNull())
    .addColumn('digest', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('edge_pushed_codes_pk', ['terminal_id', 'code_uid'])
    .execute();

  await db.schema
    .createTable('edge_events')
    .addColumn('event_id', 'text', (c) => c.primaryKey())
    .addColumn('terminal_id', 'text', (c) => c.notNull())
    .addColumn('seq', 'integer', (c) => c.notNull())
    .addColumn('type', 'text', (c) => c.notNull())
    .addColumn('at', 'text', (c) => c.notNull())
    .addColumn('received_at', 'text', (c) => c.notNull())
    .addColumn('payload', 'text', (c) => c.notNull())
    .addColumn('processed', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('outcome', 'text')
    .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
    .execute();
  await db.schema.createIndex('edge_events_terminal_seq').on('edge_events').columns(['terminal_id', 'seq']).execute();
  await db.schema.createIndex('edge_events_pending').on('edge_events').columns(['processed', 'terminal_id', 'seq']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const t of ['edge_events', 'edge_pushed_codes', 'edge_terminals']) await db.schema.dropTable(t).execute();
}
