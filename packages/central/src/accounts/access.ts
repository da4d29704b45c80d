// Who may manage an account: a tenant manages an account linked to a pick up point it manages.
import type { Kysely, Transaction } from 'kysely';
import type { Database } from '../db/schema';
import type { TenantPrincipal } from '../context';

export async function canManageAccount(db: Kysely<Database> | Transaction<Database>, tenant: TenantPrincipal, accountUid: string): Promise<boolean> {
  if (tenant.pupUids.size === 0) return false;
  const row = await db
    .selectFrom('account_pups')
    .select('account_uid')
    .where('account_uid', '=', accountUid)
    .where('pup_uid', 'in', [...tenant.pupUids])
    .executeTakeFirst();
  return !!row;
}
