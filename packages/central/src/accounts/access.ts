// Who may manage an account: a tenant manages an account linked to a pick up point it manages,
// except a dispatcher main account of another tenant: a tenant's main account (tenants.
// main_account_uid) is managed only by its own tenant, even when a shared PUP links it to others.
import type { ExpressionBuilder, Kysely, Transaction } from 'kysely';
import type { Database } from '../db/schema';
import type { TenantPrincipal } from '../context';

export async function canManageAccount(db: Kysely<Database> | Transaction<Database>, tenant: TenantPrincipal, accountUid: string): Promise<boolean> {
  if (tenant.pupUids.size === 0) return false;
  // The account's links (one or two as a rule) checked against the tenant's set, rather than an
  // IN list of every PUP of the tenant (hundreds of bound values for a large tenant).
  const links = await db.selectFrom('account_pups').select('pup_uid').where('account_uid', '=', accountUid).execute();
  if (!links.some((l) => tenant.pupUids.has(l.pup_uid))) return false;
  const owners = await db.selectFrom('tenants').select('uid').where('main_account_uid', '=', accountUid).execute();
  return owners.length === 0 || owners.some((o) => o.uid === tenant.uid);
}

/** SQL condition on `accounts as a`: not the main account of another tenant only (see above). */
export function notOthersMainAccount(eb: ExpressionBuilder<Database & { a: Database['accounts'] }, 'a'>, tenant: TenantPrincipal) {
  return eb.or([
    eb.not(eb.exists(eb.selectFrom('tenants as mt').select('mt.uid').whereRef('mt.main_account_uid', '=', 'a.uid'))),
    eb.exists(eb.selectFrom('tenants as mt2').select('mt2.uid').whereRef('mt2.main_account_uid', '=', 'a.uid').where('mt2.uid', '=', tenant.uid)),
  ]);
}
