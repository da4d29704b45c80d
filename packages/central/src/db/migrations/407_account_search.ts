import { type Kysely, PostgresAdapter, sql } from 'kysely';

// GetAccounts bounded in cost (issue 12, item 4; docs/benchmarks.md "Worst allowed searches").
//
// - accounts.full_name_key: lower(coalesce(first_name, '') || ' ' || coalesce(last_name, '')),
//   the text the fullName filter searches, stored so a search does not lower-case and concatenate
//   the names of every row again for every word. The database computes it, with the same lower()
//   the search used before, on every write path (the API, provisioning, anything that writes
//   accounts): PostgreSQL as a stored generated column, SQLite (which cannot add a stored generated
//   column to an existing table) with triggers after INSERT and after UPDATE of the names.
// - SQLite: accounts_search (user_name_key, uid, full_name_key, email_key, phone_number,
//   mail_code) covers the GetAccounts filters and serves its order (user name, then uid), so the
//   count and the page walk one narrow index instead of the table. PostgreSQL hashes the tenant's
//   accounts and sorts the matches itself (a scan of an index would need the heap for visibility).
const FULL_NAME = sql`lower(coalesce(first_name, '') || ' ' || coalesce(last_name, ''))`;

export async function up(db: Kysely<any>): Promise<void> {
  if (db.getExecutor().adapter instanceof PostgresAdapter) {
    await sql`ALTER TABLE accounts ADD COLUMN full_name_key text GENERATED ALWAYS AS (${FULL_NAME}) STORED`.execute(db);
    return;
  }
  await db.schema.alterTable('accounts').addColumn('full_name_key', 'text').execute();
  await sql`UPDATE accounts SET full_name_key = ${FULL_NAME}`.execute(db);
  await sql`CREATE TRIGGER accounts_full_name_key_insert AFTER INSERT ON accounts
    BEGIN UPDATE accounts SET full_name_key = lower(coalesce(NEW.first_name, '') || ' ' || coalesce(NEW.last_name, '')) WHERE rowid = NEW.rowid; END`.execute(db);
  // full_name_key itself too: a write that sets it directly is put right
  await sql`CREATE TRIGGER accounts_full_name_key_update AFTER UPDATE OF first_name, last_name, full_name_key ON accounts
    BEGIN UPDATE accounts SET full_name_key = lower(coalesce(NEW.first_name, '') || ' ' || coalesce(NEW.last_name, '')) WHERE rowid = NEW.rowid; END`.execute(db);
  await db.schema.createIndex('accounts_search').on('accounts').columns(['user_name_key', 'uid', 'full_name_key', 'email_key', 'phone_number', 'mail_code']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  if (!(db.getExecutor().adapter instanceof PostgresAdapter)) {
    await db.schema.dropIndex('accounts_search').execute();
    await sql`DROP TRIGGER accounts_full_name_key_update`.execute(db);
    await sql`DROP TRIGGER accounts_full_name_key_insert`.execute(db);
  }
  await db.schema.alterTable('accounts').dropColumn('full_name_key').execute();
}
