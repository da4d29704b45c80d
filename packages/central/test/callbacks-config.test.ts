import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { testSite, TENANT_A } from './support/fixtures';
import { decideCallbackChange } from '../src/callbacks/registration';
import { setResolver } from '../src/net/resolve';

// ConfigureCallback resolves the callback host (docs/callbacks.md, "Allowed targets"); the names
// of these tests (*.example.test) resolve, without real DNS, to a public address.
const publicResolver = async () => ['93.184.215.14'];

const PATH = '/v1/Platform/ConfigureCallback';

describeEngines('ConfigureCallback', (engine) => {
  let t: TestService;
  beforeAll(async () => {
    t = await createTestService(engine);
    setResolver(t.ctx, publicResolver);
  });
  afterAll(async () => t?.close());

  const stored = async (clientId = 'tenant-a') => {
    const tenant = await t.ctx.db.kysely.selectFrom('tenants').select('uid').where('client_id', '=', clientId).executeTakeFirstOrThrow();
    return t.ctx.db.kysely.selectFrom('callback_configs').selectAll().where('tenant_uid', '=', tenant.uid).executeTakeFirst();
  };

  it('requires a bearer token', async () => {
    const res = await t.post(PATH, { url: 'https://example.test/cb', authType: 'HMAC' }, null);
    expect(res.status).toBe(401);
    expect(res.body).toMatchObject({ success: false, error: 'Unauthorized' });
  });

  it('first call with a url enables callbacks and generates a key', async () => {
    const res = await t.post(PATH, { url: 'https://tenant-a.example.test/hooks/locker', authType: 'HMAC' });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ success: true, error: null, message: null, changed: true, authKey: expect.stringMatching(/^[0-9a-f]{64}$/) });
    const row = await stored();
    expect(row).toMatchObject({ url: 'https://tenant-a.example.test/hooks/locker', auth_type: 'HMAC', auth_key: res.body.authKey });
  });

  it('the same call again changes nothing and returns no key', async () => {
    const before = await stored();
    const res = await t.post(PATH, { url: 'https://tenant-a.example.test/hooks/locker', authType: 'HMAC' });
    expect(res.body).toEqual({ success: true, error: null, message: null, changed: false });
    expect((await stored())?.auth_key).toBe(before?.auth_key);
  });

  it('a call with only a new url keeps the key (authType sent unchanged or omitted)', async () => {
    const before = await stored();
    let res = await t.post(PATH, { url: 'https://tenant-a.example.test/v2/hooks', authType: 'HMAC' });
    expect(res.body).toEqual({ success: true, error: null, message: null, changed: true });
    res = await t.post(PATH, { url: 'http://tenant-a.example.test:8081/v3' });
    expect(res.body).toEqual({ success: true, error: null, message: null, changed: true });
    const after = await stored();
    expect(after).toMatchObject({ url: 'http://tenant-a.example.test:8081/v3', auth_type: 'HMAC', auth_key: before?.auth_key });
  });

  it('a new authType makes a new key', async () => {
    const before = await stored();
    const res = await t.post(PATH, { url: 'http://tenant-a.example.test:8081/v3', authType: 'ApiKey' });
    expect(res.body).toMatchObject({ success: true, changed: true, authKey: expect.stringMatching(/^[0-9a-f]{64}$/) });
    expect(res.body.authKey).not.toBe(before?.auth_key);
    expect(await stored()).toMatchObject({ auth_type: 'ApiKey', auth_key: res.body.authKey });
  });

  it('resetKey makes a new key', async () => {
    const before = await stored();
    const res = await t.post(PATH, { url: 'http://tenant-a.example.test:8081/v3', authType: 'ApiKey', resetKey: true });
    expect(res.body).toMatchObject({ success: true, changed: true, authKey: expect.stringMatching(/^[0-9a-f]{64}$/) });
    expect(res.body.authKey).not.toBe(before?.auth_key);
    expect((await stored())?.auth_key).toBe(res.body.authKey);
  });

  it('a new authType or resetKey with a given authKey uses the given key', async () => {
    const given = 'tenant-chosen-key-0123456789';
    let res = await t.post(PATH, { url: 'http://tenant-a.example.test:8081/v3', authType: 'HMAC', authKey: given });
    expect(res.body).toMatchObject({ success: true, changed: true, authKey: given });
    expect(await stored()).toMatchObject({ auth_type: 'HMAC', auth_key: given });
    res = await t.post(PATH, { url: 'http://tenant-a.example.test:8081/v3', authType: 'HMAC', resetKey: true, authKey: given });
    expect(res.body).toEqual({ success: true, error: null, message: null, changed: false });
    const other = 'another-chosen-key-9876543210';
    res = await t.post(PATH, { url: 'http://tenant-a.example.test:8081/v3', authType: 'HMAC', resetKey: true, authKey: other });
    expect(res.body).toMatchObject({ changed: true, authKey: other });
  });

  it('accepts the field names in any letter case (API convention)', async () => {
    const res = await t.post(PATH, { Url: 'http://tenant-a.example.test:8081/v3', AuthType: 'HMAC', ResetKey: false });
    expect(res.body).toEqual({ success: true, error: null, message: null, changed: false });
  });

  it('url null disables callbacks and keeps the key; enabling again keeps it', async () => {
    const before = await stored();
    let res = await t.post(PATH, { url: null, authType: 'HMAC' });
    expect(res.body).toEqual({ success: true, error: null, message: null, changed: true });
    expect(await stored()).toMatchObject({ url: null, auth_key: before?.auth_key });
    res = await t.post(PATH, { url: null });
    expect(res.body).toMatchObject({ changed: false });
    res = await t.post(PATH, { url: 'https://tenant-a.example.test/again', authType: 'HMAC' });
    expect(res.body).toEqual({ success: true, error: null, message: null, changed: true });
    expect(await stored()).toMatchObject({ url: 'https://tenant-a.example.test/again', auth_key: before?.auth_key });
  });

  it('authType None also gets a key on the first call (used if HMAC or ApiKey is chosen later with resetKey false? no: a type change makes a new one)', async () => {
    const tb = await t.token('tenant-b');
    let res = await t.post(PATH, { url: 'https://tenant-b.example.test/cb', authType: 'None' }, tb);
    expect(res.body).toMatchObject({ success: true, changed: true, authKey: expect.any(String) });
    const first = res.body.authKey;
    res = await t.post(PATH, { url: 'https://tenant-b.example.test/cb', authType: 'HMAC' }, tb);
    expect(res.body).toMatchObject({ changed: true, authKey: expect.any(String) });
    expect(res.body.authKey).not.toBe(first);
  });

  it('first call with url null changes nothing', async () => {
    // tenant B of a fresh site would be needed; use the pure rule for the never-configured case
    expect(decideCallbackChange(null, { url: null })).toEqual({ next: { url: null, authType: 'HMAC', authKey: null }, changed: false, newKey: null });
  });

  it.each([
    [{ url: 'ftp://example.test/x', authType: 'HMAC' }, 'url'],
    [{ url: 'not a url', authType: 'HMAC' }, 'url'],
    [{ url: '/relative/path', authType: 'HMAC' }, 'url'],
    [{ url: 'https://user:pw@example.test/x', authType: 'HMAC' }, 'url'],
    [{ url: 'https://example.test/' + 'x'.repeat(2100), authType: 'HMAC' }, 'url'],
    [{ url: 'https://example.test/x', authType: 'Basic' }, 'authType'],
    [{ url: 'https://example.test/x', authType: 'HMAC', authKey: 'short' }, 'authKey'],
    [{ url: 'https://example.test/x', authType: 'HMAC', authKey: 'has spaces in the key 0123' }, 'authKey'],
    [{ url: 'https://example.test/x', authType: 'HMAC', resetKey: 'yes' }, 'resetKey'],
    [{ authType: 'HMAC' }, 'url'],
    [{ url: 42 }, 'url'],
  ])('refuses %o with InvalidRequest naming %s', async (body, field) => {
    const before = await stored();
    const res = await t.post(PATH, body);
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ success: false, error: 'InvalidRequest' });
    expect(res.body.message).toContain(field);
    expect(await stored()).toEqual(before);
  });

  it('refuses a malformed JSON body with the envelope', async () => {
    const res = await t.app.inject({ method: 'POST', url: PATH, payload: '{"url":', headers: { 'content-type': 'application/json', authorization: `Bearer ${await t.token()}` } });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toMatchObject({ success: false, error: 'InvalidRequest' });
  });
});

describeEngines('ConfigureCallback, concurrent first calls', (engine) => {
  let t: TestService;
  beforeAll(async () => {
    t = await createTestService(engine);
    setResolver(t.ctx, publicResolver);
  });
  afterAll(async () => t?.close());

  it('several first calls at once: all succeed, exactly one makes the key', async () => {
    const tok = await t.token();
    const res = await Promise.all(Array.from({ length: 6 }, () => t.post(PATH, { url: 'https://tenant-a.example.test/race', authType: 'HMAC' }, tok)));
    expect(res.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 200]);
    const withKey = res.filter((r) => r.body.authKey);
    expect(withKey).toHaveLength(1);
    expect(res.filter((r) => r.body.changed)).toHaveLength(1);
    const tenant = await t.ctx.db.kysely.selectFrom('tenants').select('uid').where('client_id', '=', 'tenant-a').executeTakeFirstOrThrow();
    const row = await t.ctx.db.kysely.selectFrom('callback_configs').selectAll().where('tenant_uid', '=', tenant.uid).executeTakeFirstOrThrow();
    expect(row.auth_key).toBe(withKey[0]!.body.authKey);
  });

  it('several resetKey calls at once: each caller gets a distinct new key, and the stored key is one of them', async () => {
    const tok = await t.token();
    const res = await Promise.all(Array.from({ length: 5 }, () => t.post(PATH, { url: 'https://tenant-a.example.test/race', authType: 'HMAC', resetKey: true }, tok)));
    const keys = res.map((r) => r.body.authKey as string);
    expect(new Set(keys).size).toBe(5);
    const tenant = await t.ctx.db.kysely.selectFrom('tenants').select('uid').where('client_id', '=', 'tenant-a').executeTakeFirstOrThrow();
    const row = await t.ctx.db.kysely.selectFrom('callback_configs').selectAll().where('tenant_uid', '=', tenant.uid).executeTakeFirstOrThrow();
    expect(keys).toContain(row.auth_key);
  });
});

describeEngines('callback provisioning', (engine) => {
  let t: TestService;
  beforeAll(async () => {
    t = await createTestService(engine);
    setResolver(t.ctx, publicResolver);
  });
  afterAll(async () => t?.close());

  const row = async () => {
    const tenant = await t.ctx.db.kysely.selectFrom('tenants').select('uid').where('client_id', '=', TENANT_A.clientId).executeTakeFirstOrThrow();
    return t.ctx.db.kysely.selectFrom('callback_configs').selectAll().where('tenant_uid', '=', tenant.uid).executeTakeFirst();
  };
  const siteWith = (callback: unknown) => {
    const s = testSite();
    (s.tenants![0] as any).callback = callback;
    return s;
  };

  it('applies a tenant callback from the provisioning file idempotently', async () => {
    const cb = { url: 'https://tenant-a.example.test/prov', authType: 'HMAC', authKey: 'provisioned-key-0123456789' };
    const r1 = await t.provision(siteWith(cb));
    expect(r1.changes).toContain('updated callback of tenant tenant-a');
    expect(await row()).toMatchObject({ url: cb.url, auth_type: 'HMAC', auth_key: cb.authKey });
    const r2 = await t.provision(siteWith(cb));
    expect(r2.changes.filter((c) => c.includes('callback'))).toEqual([]);
  });

  it('without authKey keeps the stored key; a changed url is applied', async () => {
    const r = await t.provision(siteWith({ url: 'https://tenant-a.example.test/prov2', authType: 'ApiKey' }));
    expect(r.changes).toContain('updated callback of tenant tenant-a');
    expect(await row()).toMatchObject({ url: 'https://tenant-a.example.test/prov2', auth_type: 'ApiKey', auth_key: 'provisioned-key-0123456789' });
    const again = await t.provision(siteWith({ url: 'https://tenant-a.example.test/prov2', authType: 'ApiKey' }));
    expect(again.changes.filter((c) => c.includes('callback'))).toEqual([]);
  });

  it('a tenant entry without callback leaves the registration alone', async () => {
    const before = await row();
    const r = await t.provision(testSite());
    expect(r.changes.filter((c) => c.includes('callback'))).toEqual([]);
    expect(await row()).toEqual(before);
  });

  it('refuses a non-http callback url', async () => {
    await expect(t.provision(siteWith({ url: 'ftp://tenant-a.example.test/x', authType: 'HMAC' }))).rejects.toMatchObject({ code: 'PROVISIONING_INVALID' });
  });

  it('generates a key when none is given or stored (the tenant gets it with resetKey)', async () => {
    const s = testSite();
    (s.tenants![1] as any).callback = { url: 'https://tenant-b.example.test/prov', authType: 'HMAC' };
    await t.provision(s);
    const tenant = await t.ctx.db.kysely.selectFrom('tenants').select('uid').where('client_id', '=', 'tenant-b').executeTakeFirstOrThrow();
    const r = await t.ctx.db.kysely.selectFrom('callback_configs').selectAll().where('tenant_uid', '=', tenant.uid).executeTakeFirstOrThrow();
    expect(r.auth_key).toMatch(/^[0-9a-f]{64}$/);
    const res = await t.post(PATH, { url: 'https://tenant-b.example.test/prov', authType: 'HMAC', resetKey: true }, await t.token('tenant-b'));
    expect(res.body).toMatchObject({ changed: true, authKey: expect.stringMatching(/^[0-9a-f]{64}$/) });
  });
});

describe('decideCallbackChange (rules of product.md)', () => {
  const key = () => 'k'.repeat(64);
  it('first url: generates', () => {
    expect(decideCallbackChange(null, { url: 'https://x.test/' }, key)).toEqual({ next: { url: 'https://x.test/', authType: 'HMAC', authKey: key() }, changed: true, newKey: key() });
  });
  it('url change only: keeps', () => {
    const cur = { url: 'https://x.test/', authType: 'ApiKey' as const, authKey: 'a'.repeat(20) };
    expect(decideCallbackChange(cur, { url: 'https://y.test/' }, key)).toEqual({ next: { ...cur, url: 'https://y.test/' }, changed: true, newKey: null });
  });
  it('type change: new key; with given key: the given one', () => {
    const cur = { url: 'https://x.test/', authType: 'ApiKey' as const, authKey: 'a'.repeat(20) };
    expect(decideCallbackChange(cur, { url: 'https://x.test/', authType: 'HMAC' }, key).newKey).toBe(key());
    expect(decideCallbackChange(cur, { url: 'https://x.test/', authType: 'HMAC', authKey: 'b'.repeat(20) }, key).newKey).toBe('b'.repeat(20));
  });
});
