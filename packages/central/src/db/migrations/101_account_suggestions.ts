import type { Kysely } from 'kysely';

// Accounts area: unique mail codes, and the account suggestion uploads.
export async function up(db: Kysely<any>): Promise<void> {
  // Several NULLs are allowed by a unique index on both engines (accounts without a code yet).
  await db.schema.createIndex('accounts_mail_code').on('accounts').column('mail_code').unique().execute();

  await db.schema
    .createTable('account_suggestion_uploads')
    .addColumn('uid', 'text', (c) => c.primaryKey())
    .addColumn('tenant_uid', 'text', (c) => c.notNull())
    .addColumn('reference', 'text', (c) => c.notNull())
    .addColumn('file_name', 'text', (c) => c.notNull())
    .addColumn('file_type', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('total_count', 'integer', (c) => c.notNull())
    .addColumn('imported_count', 'integer', (c) => c.notNull())
    .addColumn('existed_count', 'integer', (c) => c.notNull())
    .addColumn('removed_count', 'integer', (c) => c.notNull())
    .addColumn('error_count', 'integer', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('expired_at', 'text')
    .execute();
  await db.schema.createIndex('account_suggestion_uploads_tenant').on('account_suggestion_uploads').columns(['tenant_uid', 'status']).execute();

  await db.schema
    .createTable('account_suggestions')
    .addColumn('upload_uid', 'text', (c) => c.notNull())
    .addColumn('tenant_uid', 'text', (c) => c.notNull())
    .addColumn('row_no', 'integer', (c) => c.notNull())
    .addColumn('email_address', 'text', (c) => c.notNull())
    .addColumn('email_key', 'text', (c) => c.notNull())
    .addColumn('phone_number', 'text')
    .addColumn('language_code', 'text')
    .addColumn('first_name', 'text')
    .addColumn('last_name', 'text')
    .addColumn('remarks', 'text')
    .addColumn('pup_uid', 'text')
    .addPrimaryKeyConstraint('account_suggestions_pk', ['upload_uid', 'email_key'])
    .execute();
  await db.schema.createIndex('account_suggestions_tenant').on('account_suggestions').column('tenant_uid').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('account_suggestions').execute();
  await db.schema.dropTable('account_suggestion_uploads').execute();
  await db.schema.dropIndex('accounts_mail_code').execute();
}
