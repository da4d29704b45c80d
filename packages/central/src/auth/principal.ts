// Resolves a token's tenant, with a short cache: a token is checked on every call, tenants and
// their PUP lists change only through provisioning.
import type { Kysely } from 'kysely';
import type { Database } from '../db/schema';
import type { TenantPrincipal } from '../context';

const TTL_MS = 2000;

export class PrincipalCache {
  private readonly cache = new Map<string, { at: number; p: TenantPrincipal | null }>();
  constructor(private readonly db: Kysely<Database>) {}

  /** The cached principal while fresh (null: no such tenant), undefined when get() must look. */
  peek(tenantUid: string): TenantPrincipal | null | undefined {
    const hit = this.cache.get(tenantUid);
    return hit && Date.now() - hit.at < TTL_MS ? hit.p : undefined;
  }

  async get(tenantUid: string): Promise<TenantPrincipal | null> {
    const hit = this.cache.get(tenantUid);
    const now = Date.now();
    if (hit && now - hit.at < TTL_MS) return hit.p;
    const t = await this.db.selectFrom('tenants').selectAll().where('uid', '=', tenantUid).executeTakeFirst();
    let p: TenantPrincipal | null = null;
    if (t) {
      const pups = await this.db.selectFrom('tenant_pups').select('pup_uid').where('tenant_uid', '=', t.uid).execute();
      p = { uid: t.uid, clientId: t.client_id, name: t.name, mainAccountUid: t.main_account_uid, pupUids: new Set(pups.map((r) => r.pup_uid)) };
    }
    this.cache.set(tenantUid, { at: now, p });
    return p;
  }

  clear(): void {
    this.cache.clear();
  }
}
