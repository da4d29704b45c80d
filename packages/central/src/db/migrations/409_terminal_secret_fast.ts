import type { Kysely } from 'kysely';

// Terminal logins (docs/edge-protocol.md, "Connection"): next to the scrypt hash, a keyed fast
// digest of a high-entropy terminal secret (HMAC-SHA256 with a pepper from the configuration,
// auth/terminal-secret-digest.ts). Null: no digest (a human-written secret, no pepper configured,
// a secret provisioned as a hash, or a row from before this migration): the login uses scrypt.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('terminals').addColumn('secret_fast', 'text').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('terminals').dropColumn('secret_fast').execute();
}
