import type { Kysely } from 'kysely';
import { freeMailCode } from '../../accounts/mail-code';

// Every account has a mail code from the moment it is made. Before, provisioning made dispatcher
// main accounts without one and GetAccountPickUpPoint wrote it on first use (a read that wrote).
// This backfills the accounts still without a code; the unique index accounts_mail_code (101)
// keeps them unique.
export async function up(db: Kysely<any>): Promise<void> {
  const rows = await db.selectFrom('accounts').select('uid').where('mail_code', 'is', null).orderBy('uid').execute();
  for (const r of rows) {
    await db.updateTable('accounts').set({ mail_code: await freeMailCode(db) }).where('uid', '=', r.uid).where('mail_code', 'is', null).execute();
  }
}

// The codes stay: an account may have used its code already, and nothing tells a backfilled code
// from one given at creation.
export async function down(): Promise<void> {}
