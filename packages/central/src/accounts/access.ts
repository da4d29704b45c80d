// Who may manage an account: a tenant manages an account linked to a pick up point it manages.
import type { Kysely, Transaction } from 'kysely';
import type { Database } from '../db/schema';
import type { TenantPrincipal } from '../context';

export async function canManageAccount(db: Kysely<Database> | Transaction<Database>, tenant: TenantPrincipal, accountUid: string): Promise<boolean> {
  if (tenant.pupUids.size === 0) return false;
  // The account's links (one or two as a rule) checked against the tenant's set, rather than an
  // IN list of every PUP of the tenant (hundreds of bound values for a large tenant).
  const links = await db.selectFrom('account_pups').select('pup_uid').where('account_uid', '=', accountUid).execute();
  return links.some((l) => tenant.pupUids.has(l.pup_uid));
}
