// GetAccounts bounded in cost (issue 12, item 4; migration 407_account_search): the search reads
// the stored accounts.full_name_key, counts and pages differently per engine (SQLite reads a page
// of the second half from the end), and must answer exactly as before. These tests check that
// (1) every page of every size equals the slice of the whole result in the documented order, with
// the right totals, also past the last page, and (2) full_name_key equals lower(first || ' ' ||
// last) after every write path that touches names: the create calls, SetAccountDetails,
// provisioning (insert and update of a dispatcher main account) and a plain SQL insert/update.
import { sql } from 'kysely';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { migrationStore } from './support/migration-store';
import { PUP_A1, PUP_A2, PUP_B1, TENANT_B, testSite } from './support/fixtures';

describeEngines('GetAccounts paging and the stored full name', (engine) => {
  let t: TestService;
  const tag = `pg${Date.now().toString(36)}`;
  beforeAll(async () => {
    t = await createTestService(engine);
    // 23 accounts of tenant A on two PUPs, user names in mixed case (the order ignores case), some
    // names with "ann" in them; 2 of tenant B that A must never see
    const names = ['Ann', 'Bert', 'Johanna', 'Dirk', 'Eva', 'Hanna', 'Gijs', 'Anouk', 'Ivo', 'Jan', 'Karin', 'Lotte', 'Maan', 'Noor', 'Otto', 'Pien', 'Quinn', 'Roos', 'Sanne', 'Tom', 'Ursula', 'Vera', 'Wim'];
    for (const [i, first] of names.entries()) {
      const userName = (i % 2 ? first.toUpperCase() : first.toLowerCase()) + `.${tag}.${(i * 7) % 23}`;
      const res = await t.post('/v1/Account/CreateAccount', { emailAddress: `${first.toLowerCase()}.${i}.${tag}@example.test`, userName, firstName: first, lastName: `Lastname${i}`, pickUpPointUid: i % 3 ? PUP_A1 : PUP_A2 });
      expect(res.body.success, JSON.stringify(res.body)).toBe(true);
    }
    const tokB = await t.token(TENANT_B.clientId);
    for (const first of ['Annabel', 'Zed']) {
      const res = await t.post('/v1/Account/CreateAccount', { emailAddress: `${first.toLowerCase()}.${tag}@example.test`, firstName: first, lastName: 'Other', pickUpPointUid: PUP_B1 }, tokB);
      expect(res.body.success, JSON.stringify(res.body)).toBe(true);
    }
  });
  afterAll(async () => t?.close());

  const get = (body: Record<string, unknown>) => t.post('/v1/Account/GetAccounts', body);

  it.each([
    ['no filter', {}],
    ['fullName "ann" (a part of the accounts)', { fullName: 'ann' }],
    ['fullName "an n" (two words, one inside the other dropped)', { fullName: 'AN n' }],
    ['a filter matching nothing', { fullName: 'nobody-has-this' }],
  ])('every page of every size is the slice of the whole result in order (%s)', async (_name, filter) => {
    const all = await get({ pageNo: 1, pageSize: 500, ...filter });
    expect(all.body.success, JSON.stringify(all.body)).toBe(true);
    const uids: string[] = all.body.items.map((i: { userUid: string }) => i.userUid);
    const total = all.body.totalItems as number;
    expect(uids.length).toBe(total);
    // the documented order: user name ignoring case, then uid
    const keys = all.body.items.map((i: { userName: string; userUid: string }) => [i.userName.toLowerCase(), i.userUid] as const);
    const sorted = [...keys].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0));
    expect(keys).toEqual(sorted);
    for (const size of [1, 2, 3, 5, 7, 11, 22, 23, 24]) {
      const pages = Math.ceil(total / size);
      for (let pageNo = 1; pageNo <= pages + 1; pageNo++) {
        const res = await get({ pageNo, pageSize: size, ...filter, includeAddress: true, includePhone: true, includeMailCode: true, includeLanguage: true });
        expect(res.body.success, JSON.stringify(res.body)).toBe(true);
        expect(res.body.totalItems).toBe(total);
        expect(res.body.totalPages).toBe(pages);
        expect(res.body.items.map((i: { userUid: string }) => i.userUid), `pageSize ${size} pageNo ${pageNo}`).toEqual(uids.slice((pageNo - 1) * size, pageNo * size));
        // the whole item, not only its uid
        for (const item of res.body.items) expect(item).toEqual(expect.objectContaining({ canManage: true, firstName: expect.any(String), mailCode: expect.any(String), mainPupUid: expect.any(String) }));
      }
    }
  });

  const outOfSync = async () => {
    const rows = await sql<{ uid: string; full_name_key: string | null; expected: string }>`
      select uid, full_name_key, lower(coalesce(first_name, '') || ' ' || coalesce(last_name, '')) as expected from accounts`.execute(t.ctx.db.kysely);
    expect(rows.rows.length).toBeGreaterThan(2);
    return rows.rows.filter((r) => r.full_name_key !== r.expected);
  };
  const found = async (fullName: string) => (await get({ pageNo: 1, pageSize: 500, fullName })).body.items.map((i: { userUid: string }) => i.userUid);

  it('full_name_key follows every write path that sets names', async () => {
    expect(await outOfSync()).toEqual([]);
    // CreateOrGetAccount (create)
    const created = await t.post('/v1/Account/CreateOrGetAccount', { emailAddress: `sync.${tag}@example.test`, firstName: 'ÉMILE', lastName: 'Zola-Sync', pickUpPointUid: PUP_A1 });
    expect(created.body.success, JSON.stringify(created.body)).toBe(true);
    const uid = created.body.userUid as string;
    expect(await found('zola-sync')).toEqual([uid]);
    // SetAccountDetails: both names change
    const set = await t.post('/v1/Account/SetAccountDetails', { userUid: uid, firstName: 'Marie', lastName: 'Curie-Sync' });
    expect(set.body.success, JSON.stringify(set.body)).toBe(true);
    expect(await found('zola-sync')).toEqual([]);
    expect(await found('marie curie-sync')).toEqual([uid]);
    // SetAccountDetails without names keeps them
    expect((await t.post('/v1/Account/SetAccountDetails', { userUid: uid, phoneNumber: '+31612345670' })).body.success).toBe(true);
    expect(await found('curie-sync')).toEqual([uid]);
    expect(await outOfSync()).toEqual([]);

    // provisioning: a new tenant's main account (insert), then its names changed (update)
    const site = testSite();
    const tenantC = { clientId: `tenant-c-${tag}`, clientSecret: 'secret-c-0123456789', name: 'Tenant C', mainAccount: { email: `dispatch-c.${tag}@example.test`, firstName: 'Carla', lastName: 'Provisioned' }, pickupPoints: [PUP_A1] };
    await t.provision({ ...site, tenants: [...(site.tenants ?? []), tenantC] } as never);
    expect(await outOfSync()).toEqual([]);
    await t.provision({ ...site, tenants: [...(site.tenants ?? []), { ...tenantC, mainAccount: { ...tenantC.mainAccount, firstName: 'Renamed', lastName: 'Reprovisioned' } }] } as never);
    expect(await outOfSync()).toEqual([]);
    const c = await t.ctx.db.kysely.selectFrom('accounts').select('uid').where('email_key', '=', `dispatch-c.${tag}@example.test`).executeTakeFirstOrThrow();
    const keyOf = async (u: string) => (await sql<{ k: string }>`select full_name_key as k from accounts where uid = ${u}`.execute(t.ctx.db.kysely)).rows[0]!.k;
    expect(await keyOf(c.uid)).toBe('renamed reprovisioned');

    // plain SQL, as test helpers and scripts write accounts: insert with a null last name, update one name
    const now = new Date().toISOString();
    await t.ctx.db.kysely
      .insertInto('accounts')
      .values({ uid: 'cccc0000000000000000000000000099', user_name: `raw.${tag}`, user_name_key: `raw.${tag}`, email_address: `raw.${tag}@example.test`, email_key: `raw.${tag}@example.test`, first_name: 'RAW', last_name: null, main_pup_uid: PUP_A2, created_at: now, updated_at: now })
      .execute();
    await t.ctx.db.kysely.insertInto('account_pups').values({ account_uid: 'cccc0000000000000000000000000099', pup_uid: PUP_A2 }).execute();
    expect(await keyOf('cccc0000000000000000000000000099')).toBe('raw ');
    expect(await found('raw')).toEqual(['cccc0000000000000000000000000099']);
    await t.ctx.db.kysely.updateTable('accounts').set({ last_name: 'Sql-Updated' }).where('uid', '=', 'cccc0000000000000000000000000099').execute();
    expect(await keyOf('cccc0000000000000000000000000099')).toBe('raw sql-updated');
    expect(await found('sql-updated')).toEqual(['cccc0000000000000000000000000099']);
    expect(await outOfSync()).toEqual([]);
  });

  it('full_name_key cannot be set apart from the names', async () => {
    const u = 'cccc0000000000000000000000000099';
    if (engine === 'postgres') {
      // a generated column: writing it is an error
      await expect(sql`update accounts set full_name_key = 'x' where uid = ${u}`.execute(t.ctx.db.kysely)).rejects.toThrow();
    } else {
      // a trigger puts it right again
      await sql`update accounts set full_name_key = 'x' where uid = ${u}`.execute(t.ctx.db.kysely);
    }
    expect(await outOfSync()).toEqual([]);
  });
});

describeEngines('migration 407_account_search on a database with accounts', (engine) => {
  it('fills full_name_key of the accounts already there', async () => {
    const store = await migrationStore(engine);
    const { db, migrate } = store;
    try {
      expect((await migrate('406_pin_throttle')).error).toBeUndefined();
      const now = new Date().toISOString();
      const row = (uid: string, first: string | null, last: string | null) => ({ uid, user_name: uid, user_name_key: uid, email_address: `${uid}@example.test`, email_key: `${uid}@example.test`, first_name: first, last_name: last, created_at: now, updated_at: now });
      await db.kysely.insertInto('accounts').values([row('m1', 'Anna', 'DE VRIES'), row('m2', null, 'Solo'), row('m3', null, null)]).execute();
      expect((await migrate('999')).error).toBeUndefined();
      const rows = await sql<{ uid: string; k: string }>`select uid, full_name_key as k from accounts order by uid`.execute(db.kysely);
      expect(rows.rows).toEqual([{ uid: 'm1', k: 'anna de vries' }, { uid: 'm2', k: ' solo' }, { uid: 'm3', k: ' ' }]);
    } finally {
      await store.close();
    }
  });
});
