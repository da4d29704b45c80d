// The token's tenant cache (auth/principal.ts): no principal older than TTL_MS is used; an entry
// past REFRESH_MS is served at once while a lookup refreshes it in the background; concurrent
// lookups of one tenant are one lookup while it is younger than TTL_MS; clear() wins over a lookup
// under way. Both engines.
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import type { Kysely } from 'kysely';
import type { Database } from '../src/db/schema';
import { PrincipalCache, REFRESH_MS, TTL_MS } from '../src/auth/principal';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { PUP_A1, PUP_A2 } from './support/fixtures';

describeEngines('principal cache', (engine) => {
  let t: TestService;
  let uid: string;
  beforeAll(async () => {
    t = await createTestService(engine);
    uid = (await t.ctx.db.kysely.selectFrom('tenants').select('uid').where('client_id', '=', 'tenant-a').executeTakeFirstOrThrow()).uid;
  });
  afterAll(async () => t?.close());

  /** a cache on the service's store with a clock of its own, and switches that make its lookups fail or hang */
  function cache() {
    const clock = { now: 0 };
    const down = { on: false };
    const hung = { on: false };
    const kysely = t.ctx.db.kysely;
    const never = { selectAll: () => never, where: () => never, executeTakeFirst: () => new Promise(() => {}) };
    const db = new Proxy(kysely, {
      get(target, prop) {
        if (prop === 'selectFrom' && down.on)
          return () => {
            throw new Error('store down');
          };
        if (prop === 'selectFrom' && hung.on) return () => never;
        const v = Reflect.get(target, prop, target) as unknown;
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    }) as Kysely<Database>;
    return { c: new PrincipalCache(db, () => clock.now), clock, down, hung };
  }
  const rename = (name: string) => t.ctx.db.kysely.updateTable('tenants').set({ name }).where('uid', '=', uid).execute();

  it('concurrent lookups of one tenant are one lookup', async () => {
    const { c } = cache();
    const all = await Promise.all(Array.from({ length: 20 }, () => c.get(uid)));
    expect(c.lookups).toBe(1);
    for (const p of all) expect(p).toBe(all[0]);
    expect(all[0]).toMatchObject({ uid, clientId: 'tenant-a', name: 'Tenant A' });
    expect([...all[0]!.pupUids].sort()).toEqual([PUP_A1, PUP_A2].sort());
    // a tenant that does not exist is cached as null, also in one lookup
    const none = await Promise.all([c.get('f'.repeat(32)), c.get('f'.repeat(32))]);
    expect(none).toEqual([null, null]);
    expect(c.lookups).toBe(2);
    expect(c.peek('f'.repeat(32))).toBeNull();
  });

  it('an entry past REFRESH_MS is served at once and refreshed in the background', async () => {
    const { c, clock } = cache();
    try {
      expect((await c.get(uid))!.name).toBe('Tenant A');
      await rename('Tenant A renamed');
      clock.now = REFRESH_MS - 1;
      expect(c.peek(uid)!.name).toBe('Tenant A');
      expect(c.lookups).toBe(1);
      clock.now = REFRESH_MS;
      // served from the entry, without waiting; a lookup started
      expect(c.peek(uid)!.name).toBe('Tenant A');
      expect(c.lookups).toBe(2);
      // requests meanwhile join it rather than start their own
      expect(c.peek(uid)!.name).toBe('Tenant A');
      expect(c.lookups).toBe(2);
      await vi.waitFor(() => expect(c.peek(uid)!.name).toBe('Tenant A renamed'), { timeout: 5000 });
      // the entry is as old as the refresh: at TTL_MS after the first lookup it is still served
      clock.now = TTL_MS + 10;
      expect(c.peek(uid)!.name).toBe('Tenant A renamed');
    } finally {
      await rename('Tenant A');
    }
  });

  it('nothing older than TTL_MS is used: past it a request waits for the store', async () => {
    const { c, clock } = cache();
    try {
      await c.get(uid);
      await rename('Tenant A later');
      clock.now = TTL_MS;
      expect(c.peek(uid)).toBeUndefined();
      expect((await c.get(uid))!.name).toBe('Tenant A later');
      expect(c.lookups).toBe(2);
    } finally {
      await rename('Tenant A');
    }
  });

  it('a failed background lookup changes nothing; the entry still ages out and a request then sees the failure', async () => {
    const { c, clock, down } = cache();
    await c.get(uid);
    down.on = true;
    clock.now = REFRESH_MS + 100;
    expect(c.peek(uid)!.name).toBe('Tenant A');
    expect(c.lookups).toBe(2);
    // the failed lookup is over: the next request past REFRESH_MS starts another
    await vi.waitFor(() => {
      expect(c.peek(uid)!.name).toBe('Tenant A');
      expect(c.lookups).toBeGreaterThanOrEqual(3);
    }, { timeout: 5000 });
    clock.now = TTL_MS;
    await expect(c.get(uid)).rejects.toThrow('store down');
    // and nothing is left stuck: once the store answers, so does the cache
    down.on = false;
    expect((await c.get(uid))!.name).toBe('Tenant A');
  });

  it('clear() during a lookup: the lookup stores nothing, a request meanwhile looks again', async () => {
    const { c } = cache();
    const first = c.get(uid);
    c.clear();
    // not joined to the lookup from before the clear()
    const second = c.get(uid);
    expect(c.lookups).toBe(2);
    expect((await first)!.clientId).toBe('tenant-a');
    expect((await second)!.clientId).toBe('tenant-a');
    expect(c.peek(uid)!.clientId).toBe('tenant-a');
    c.clear();
    expect(c.peek(uid)).toBeUndefined();
  });

  it('a lookup held up past TTL_MS is not joined: a request then reads the store again (a hung one locks no tenant out)', async () => {
    const { c, clock, hung } = cache();
    await c.get(uid);
    await rename('Tenant A meanwhile');
    try {
      hung.on = true;
      clock.now = REFRESH_MS;
      // a background refresh starts and never answers
      expect(c.peek(uid)!.name).toBe('Tenant A');
      expect(c.lookups).toBe(2);
      clock.now = TTL_MS - 1;
      // still served from the entry; the refresh under way is joined, none started
      expect(c.peek(uid)!.name).toBe('Tenant A');
      expect(c.lookups).toBe(2);
      hung.on = false;
      clock.now = REFRESH_MS + TTL_MS;
      // the entry is too old and so is the refresh: a new lookup, which reads the store as it is now
      expect(c.peek(uid)).toBeUndefined();
      expect((await c.get(uid))!.name).toBe('Tenant A meanwhile');
      expect(c.lookups).toBe(3);
    } finally {
      await rename('Tenant A');
    }
  });

  it('the API: concurrent requests of a tenant not cached do one lookup', async () => {
    const token = await t.token();
    t.app.principals.clear();
    const before = t.app.principals.lookups;
    const res = await Promise.all(Array.from({ length: 10 }, () => t.post('/v1/PickupPoints/GetPickUpPoints', { pageNo: 1, pageSize: 10 }, token)));
    for (const r of res) expect(r.status).toBe(200);
    // one lookup (a second only if the requests took over REFRESH_MS: a background refresh); one each without the sharing
    expect(t.app.principals.lookups - before).toBeGreaterThanOrEqual(1);
    expect(t.app.principals.lookups - before).toBeLessThanOrEqual(2);
  });
});
