// Callback targets (docs/callbacks.md, "Allowed targets"): ConfigureCallback refuses internal
// addresses in every spelling, names that resolve to them, cloud metadata names, control
// characters, userinfo and other schemes, with 400 InvalidRequest naming url; public targets are
// accepted. Names are resolved by an injected resolver: no real DNS. These services run with the
// default setting (callbacks.allowPrivateNetworks off) unless a block says otherwise.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { addressVerdict, hostVerdict } from '../src/net/address';
import { resolveBounded, setResolver, type Resolver } from '../src/net/resolve';

const PATH = '/v1/Platform/ConfigureCallback';

/** The fake DNS of these tests. */
const DNS: Record<string, string[]> = {
  'example.com': ['93.184.215.14', '2606:2800:21f:cb07:6820:80da:af6b:8b2c'],
  'hooks.example.org': ['151.101.1.69'],
  'loopback.example.com': ['127.0.0.1'],
  'private.example.com': ['10.1.2.3'],
  'mixed.example.com': ['93.184.215.14', '192.168.1.10'],
  'mapped.example.com': ['::ffff:127.0.0.1'],
  'metadata-alias.example.com': ['169.254.169.254'],
  'ula.example.com': ['fd00::1'],
  localhost: ['127.0.0.1', '::1'],
  'hooks.localhost': ['127.0.0.1'],
};
const resolved: string[] = [];
const fakeResolver: Resolver = async (host) => {
  resolved.push(host);
  const a = DNS[host];
  if (a) return a;
  throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
};

/** Refused with the setting off AND on: never a callback target. */
const ALWAYS_REFUSED: [string, RegExp][] = [
  ['http://0.0.0.0/', /the unspecified address/],
  ['http://0/', /the unspecified address/],
  ['http://[::]/', /the unspecified address/],
  ['http://169.254.169.254/latest/meta-data/', /link-local/],
  ['http://[fe80::1]/', /link-local/],
  ['http://metadata.google.internal/computeMetadata/v1/', /cloud metadata host name/],
  ['http://METADATA.GOOGLE.INTERNAL./computeMetadata/v1/', /cloud metadata host name/],
  ['http://metadata/', /cloud metadata host name/],
  ['http://instance-data/latest/', /cloud metadata host name/],
  ['http://instance-data.ec2.internal/', /cloud metadata host name/],
  ['http://metadata.goog/', /cloud metadata host name/],
  ['http://100.100.100.200/latest/meta-data/', /cloud metadata address/],
  ['http://[fd00:ec2::254]/', /cloud metadata address/],
  ['http://metadata-alias.example.com/', /metadata-alias\.example\.com resolves to 169\.254\.169\.254, a link-local/],
  ['http://224.0.0.1/', /multicast/],
  ['http://[ff02::1]/', /multicast/],
  ['http://255.255.255.255/', /broadcast/],
  ['http://240.0.0.1/', /reserved/],
  ['http://192.0.2.1/', /reserved/], // documentation (TEST-NET-1)
  ['http://198.51.100.1/', /reserved/], // TEST-NET-2
  ['http://203.0.113.1/', /reserved/], // TEST-NET-3
  ['http://198.18.0.1/', /reserved/], // benchmarking
  ['http://[2001:db8::1]/', /reserved/], // documentation
  ['http://[::127.0.0.1]/', /IPv4-compatible/],
  ['http://[64:ff9b::7f00:1]/', /NAT64/],
  ['http://[64:ff9b::a00:1]/', /NAT64/],
  ['http://[2002:7f00:1::]/', /6to4/],
  ['http://[2001::1]/', /Teredo/],
  ['http://[1::1]/', /unassigned IPv6/],
];

/** Refused with the setting off, accepted with it on (on-premises receivers). */
const PRIVATE: [string, RegExp][] = [
  ['http://127.0.0.1:8080/', /127\.0\.0\.1 is a loopback address/],
  ['http://127.0.0.1:5432/', /loopback/],
  ['http://127.0.0.1:6379/', /loopback/],
  ['http://localhost/', /loopback host name/],
  ['http://localhost./', /loopback host name/],
  ['http://LOCALHOST:8080/', /loopback host name/],
  ['http://hooks.localhost/', /loopback host name/],
  ['http://[::1]/', /loopback/],
  ['http://127.1/', /127\.0\.0\.1 is a loopback address/],
  ['http://2130706433/', /127\.0\.0\.1 is a loopback address/],
  ['http://0x7f000001/', /127\.0\.0\.1 is a loopback address/],
  ['http://0177.0.0.1/', /127\.0\.0\.1 is a loopback address/],
  ['http://0x7f.1/', /127\.0\.0\.1 is a loopback address/],
  ['http://127.0.0.1./', /127\.0\.0\.1 is a loopback address/],
  ['http://%31%32%37.0.0.1/', /127\.0\.0\.1 is a loopback address/],
  ['http://\uff11\uff12\uff17.0.0.1/', /127\.0\.0\.1 is a loopback address/], // full-width digits
  ['http://10.0.0.1/', /private \(RFC 1918\)/],
  ['http://172.16.0.1/', /private \(RFC 1918\)/],
  ['http://192.168.0.1/', /private \(RFC 1918\)/],
  ['http://100.64.0.1/', /carrier-grade NAT/],
  ['http://[fd00::1]/', /unique-local/],
  ['http://[::ffff:127.0.0.1]/', /IPv4-mapped form of a loopback address/],
  ['http://[::ffff:7f00:1]/', /IPv4-mapped form of a loopback address/],
  ['http://[::ffff:10.0.0.1]/', /IPv4-mapped form of a private/],
  ['http://loopback.example.com/hook', /loopback\.example\.com resolves to 127\.0\.0\.1, a loopback address/],
  ['http://private.example.com/hook', /private\.example\.com resolves to 10\.1\.2\.3/],
  ['http://mixed.example.com/hook', /mixed\.example\.com resolves to 192\.168\.1\.10/],
  ['http://mapped.example.com/hook', /IPv4-mapped form of a loopback address/],
  ['http://ula.example.com/hook', /unique-local/],
];

/** Refused by their form, whatever the setting. */
const MALFORMED: [string, RegExp][] = [
  ['http://example.com/a\r\nX-Injected: 1', /control characters or whitespace/],
  ['http://example.com/\r\n', /control characters or whitespace/],
  ['http://exa\tmple.com/', /control characters or whitespace/],
  [' http://example.com/', /control characters or whitespace/],
  ['http://example.com/ ', /control characters or whitespace/],
  ['http://example.com/a b', /control characters or whitespace/],
  ['http://example.com/\u0085', /control characters or whitespace/],
  ['http://example.com/\u00a0', /control characters or whitespace/],
  ['http://example.com/\u2028', /control characters or whitespace/],
  ['http://example.com/\u007f', /control characters or whitespace/],
  ['https://user@example.com/', /user name or password/],
  ['https://user:pw@example.com/', /user name or password/],
  ['https://:pw@example.com/', /user name or password/],
  ['file:///etc/passwd', /http or https/],
  ['gopher://example.com/_x', /http or https/],
  ['ftp://example.com/x', /http or https/],
  ['ws://example.com/x', /http or https/],
  ['javascript:alert(1)', /http or https/],
  ['data:text/plain,x', /http or https/],
];

const PUBLIC = [
  'https://example.com/hook',
  'http://example.com:8443/cb?tenant=a&x=1',
  'https://EXAMPLE.com./hook',
  'https://hooks.example.org/locker/callbacks',
  'https://93.184.215.14/hook',
  'https://[2606:4700:4700::1111]/hook',
];

describe('address classification (net/address.ts)', () => {
  const off = { allowPrivateNetworks: false };
  const on = { allowPrivateNetworks: true };
  it.each(['93.184.215.14', '8.8.8.8', '1.1.1.1', '2606:4700:4700::1111', '2a00:1450:4001:82a::200e'])('%s is public: allowed with the setting off', (ip) => {
    expect(addressVerdict(ip, off)).toMatchObject({ allowed: true, cls: 'public' });
  });
  it.each(['127.0.0.1', '127.255.255.254', '10.0.0.1', '172.31.255.255', '192.168.0.1', '100.64.0.1', '::1', 'fd12:3456::1', 'fc00::1', '::ffff:127.0.0.1', '::ffff:192.168.1.1'])(
    '%s is private: refused, allowed with the setting on',
    (ip) => {
      expect(addressVerdict(ip, off)).toMatchObject({ allowed: false, cls: 'private' });
      expect(addressVerdict(ip, on)).toMatchObject({ allowed: true, cls: 'private' });
    },
  );
  it.each([
    '0.0.0.0',
    '0.1.2.3',
    '169.254.169.254',
    '169.254.170.2',
    '100.100.100.200',
    '224.0.0.1',
    '239.255.255.250',
    '255.255.255.255',
    '240.0.0.1',
    '192.0.2.1',
    '192.0.0.170',
    '::',
    'fe80::1',
    'ff02::1',
    'fd00:ec2::254',
    '::ffff:169.254.169.254',
    '::ffff:0.0.0.0',
    '::7f00:1',
    '64:ff9b::a9fe:a9fe',
    '64:ff9b:1::1',
    '2002:a9fe:a9fe::',
    '2001::1',
    '2001:db8::1',
    '100::1',
    'fec0::1',
    'not-an-ip',
    '127.1',
  ])('%s is never allowed', (ip) => {
    expect(addressVerdict(ip, off).allowed).toBe(false);
    expect(addressVerdict(ip, on)).toMatchObject({ allowed: false, cls: 'never' });
  });
  it('names: metadata names are refused before DNS, localhost names are loopback, others need resolving', () => {
    expect(hostVerdict('metadata.google.internal.', on)).toMatchObject({ kind: 'name', verdict: { allowed: false } });
    expect(hostVerdict('foo.metadata.google.internal', on)).toMatchObject({ kind: 'name', verdict: { allowed: false } });
    expect(hostVerdict('localhost', off)).toMatchObject({ kind: 'name', verdict: { allowed: false, cls: 'private' } });
    expect(hostVerdict('localhost', on)).toMatchObject({ kind: 'name', verdict: { allowed: true } });
    expect(hostVerdict('[::1]', on)).toMatchObject({ kind: 'address', address: '::1', verdict: { allowed: true } });
    expect(hostVerdict('Hooks.Example.COM.', off)).toEqual({ kind: 'resolve', host: 'hooks.example.com' });
  });
  it('resolution is bounded in time and a failure is a ResolveError with the code', async () => {
    const hang: Resolver = () => new Promise(() => undefined);
    const t0 = Date.now();
    await expect(resolveBounded(hang, 'slow.example.com', 50)).rejects.toMatchObject({ name: 'ResolveError', code: 'ETIMEOUT' });
    expect(Date.now() - t0).toBeLessThan(2000);
    await expect(resolveBounded(fakeResolver, 'nx.example.com', 1000)).rejects.toMatchObject({ name: 'ResolveError', code: 'ENOTFOUND', message: 'nx.example.com could not be resolved (ENOTFOUND)' });
    await expect(resolveBounded(async () => [], 'empty.example.com', 1000)).rejects.toMatchObject({ code: 'ENODATA' });
  });
});

describeEngines('ConfigureCallback refuses internal targets (setting off, the default)', (engine) => {
  let t: TestService;
  beforeAll(async () => {
    t = await createTestService(engine);
    setResolver(t.ctx, fakeResolver);
  });
  afterAll(async () => t?.close());

  const stored = async () => {
    const tenant = await t.ctx.db.kysely.selectFrom('tenants').select('uid').where('client_id', '=', 'tenant-a').executeTakeFirstOrThrow();
    return t.ctx.db.kysely.selectFrom('callback_configs').selectAll().where('tenant_uid', '=', tenant.uid).executeTakeFirst();
  };

  it('runs with callbacks.allowPrivateNetworks off', () => {
    expect(t.ctx.config.callbacks.allowPrivateNetworks).toBe(false);
  });

  it.each([...ALWAYS_REFUSED, ...PRIVATE, ...MALFORMED])('refuses %j with 400 InvalidRequest naming url (%s), storing nothing', async (url, why) => {
    const before = await stored();
    const res = await t.post(PATH, { url, authType: 'HMAC' });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ success: false, error: 'InvalidRequest' });
    expect(res.body.message).toMatch(/^url: /);
    expect(res.body.message).toMatch(why);
    expect(await stored()).toEqual(before);
  });

  it('a name that does not resolve is a clear InvalidRequest, not a 500', async () => {
    const res = await t.post(PATH, { url: 'https://nx.example.com/hook', authType: 'HMAC' });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ success: false, error: 'InvalidRequest', message: 'url: must name a host that resolves (nx.example.com could not be resolved (ENOTFOUND))' });
  });

  it('the message of a refused name says what it resolves to', async () => {
    const res = await t.post(PATH, { url: 'http://loopback.example.com/hook?token=x', authType: 'HMAC' });
    expect(res.body.message).toBe('url: must point to a public internet address (loopback.example.com resolves to 127.0.0.1, a loopback address)');
  });

  it.each(PUBLIC)('accepts the public target %s (resolved by the injected resolver, no real DNS)', async (url) => {
    const n = resolved.length;
    const res = await t.post(PATH, { url, authType: 'HMAC' });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ success: true, error: null });
    expect((await stored())?.url).toBe(url);
    const host = new URL(url).hostname;
    if (!/^[\d.[]/.test(host)) expect(resolved.slice(n)).toContain(host.toLowerCase().replace(/\.$/, ''));
  });

  it('url null (disable) needs no check', async () => {
    const res = await t.post(PATH, { url: null });
    expect(res.body).toMatchObject({ success: true });
  });
});

describeEngines('ConfigureCallback with callbacks.allowPrivateNetworks on', (engine) => {
  let t: TestService;
  beforeAll(async () => {
    t = await createTestService(engine, { config: { callbacks: { allowPrivateNetworks: true } } });
    setResolver(t.ctx, fakeResolver);
  });
  afterAll(async () => t?.close());

  it.each(PRIVATE)('accepts the on-premises target %j', async (url) => {
    const res = await t.post(PATH, { url, authType: 'HMAC' });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ success: true });
  });

  it.each([...ALWAYS_REFUSED, ...MALFORMED])('still refuses %j (%s)', async (url, why) => {
    const res = await t.post(PATH, { url, authType: 'HMAC' });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ success: false, error: 'InvalidRequest' });
    expect(res.body.message).toMatch(/^url: /);
    expect(res.body.message).toMatch(why);
  });
});
