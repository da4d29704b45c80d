// Callback targets at delivery (docs/callbacks.md, "Allowed targets"): the worker checks the
// address it actually connects to, on every attempt, after resolution (DNS rebinding: a name that
// was public when it was configured and resolves to 127.0.0.1 now is refused at connect time), also
// for URLs stored without ConfigureCallback's check (before the upgrade, by provisioning); a
// refused attempt is a failure with its reason in last_error, logged without the URL's path and
// query; a 3xx is a failure and its Location is not followed; with callbacks.allowPrivateNetworks
// on, a receiver on 127.0.0.1 gets the POST. Both engines; names come from an injected resolver.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, beforeEach, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { CallbackReceiver, waitFor } from './support/receiver';
import { captureLog } from './support/log-capture';
import { enqueueShipmentStatus } from '../src/callbacks/outbox';
import { CallbackDeliveryWorker } from '../src/callbacks/worker';
import { createLogger } from '../src/logger';
import { newUid, toDbTime } from '../src/ids';
import { setResolver, type Resolver } from '../src/net/resolve';
import type { AppContext } from '../src/context';
import { PUP_A1 } from './support/fixtures';

const CONFIGURE = '/v1/Platform/ConfigureCallback';

async function tenantUid(ctx: AppContext, clientId = 'tenant-a'): Promise<string> {
  return (await ctx.db.kysely.selectFrom('tenants').select('uid').where('client_id', '=', clientId).executeTakeFirstOrThrow()).uid;
}

async function enqueue(t: TestService, tenant: string): Promise<string> {
  const shipmentUid = newUid();
  const ev = {
    tenantUid: tenant,
    shipmentUid,
    stateCode: 'ReadyForDropoff',
    stateStart: toDbTime(t.clock.now()),
    shipmentType: 'LocalPupShipment',
    referenceNo: 'REF-1',
    referenceCaseNo: null,
    description: 'a parcel',
    pupUid: PUP_A1,
    fromUserUid: 'f'.repeat(32),
    toUserUid: null,
  };
  await t.ctx.db.kysely.transaction().execute((trx) => enqueueShipmentStatus(trx, ev, toDbTime(t.clock.now())));
  return shipmentUid;
}

const row = (t: TestService, shipmentUid: string) => t.ctx.db.kysely.selectFrom('callback_outbox').selectAll().where('shipment_uid', '=', shipmentUid).executeTakeFirstOrThrow();

/** A delivery worker of the test service with its own captured log and resolver. */
function startWorker(t: TestService, resolver?: Resolver) {
  const log = captureLog();
  const w = new CallbackDeliveryWorker({ ...t.ctx, log: createLogger({ level: 'debug', destination: log.destination }) }, { resolver, random: () => 0 });
  return { w, log };
}

describeEngines('callback delivery refuses internal targets at connect time (setting off)', (engine) => {
  let t: TestService;
  let tenant: string;
  let rx: CallbackReceiver;
  let worker: CallbackDeliveryWorker | null = null;
  /** what the fake DNS answers now, and every name it was asked */
  const dns = new Map<string, string[]>();
  const asked: string[] = [];
  const resolver: Resolver = async (host) => {
    asked.push(host);
    const a = dns.get(host);
    if (!a) throw Object.assign(new Error(`ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
    return a;
  };

  beforeAll(async () => {
    t = await createTestService(engine, { config: { callbacks: { pollIntervalMs: 20, initialBackoffMs: 50, maxBackoffMs: 100, requestTimeoutMs: 3_000 } } });
    setResolver(t.ctx, resolver);
    tenant = await tenantUid(t.ctx);
  });
  afterAll(async () => t?.close());
  beforeEach(async () => {
    rx = new CallbackReceiver();
    await rx.start();
  });
  afterEach(async () => {
    await worker?.stop();
    worker = null;
    await rx.close();
    await t.ctx.db.kysely.updateTable('callback_outbox').set({ status: 'skipped' }).where('status', '=', 'pending').execute();
  });

  it('runs with callbacks.allowPrivateNetworks off', () => {
    expect(t.ctx.config.callbacks.allowPrivateNetworks).toBe(false);
  });

  it('DNS rebinding: a name public at ConfigureCallback that resolves to 127.0.0.1 at delivery is refused on every attempt, recorded and logged without the query', async () => {
    dns.set('rebind.example.com', ['93.184.215.14']);
    const url = `http://rebind.example.com:${rx.port}/hooks/locker?token=s3cret-tenant-token`;
    const conf = await t.post(CONFIGURE, { url, authType: 'HMAC' });
    expect(conf.body).toMatchObject({ success: true });
    // the attacker's DNS now answers the loopback address, where our receiver listens
    dns.set('rebind.example.com', ['127.0.0.1']);
    const ship = await enqueue(t, tenant);
    const askedBefore = asked.filter((h) => h === 'rebind.example.com').length;
    const started = startWorker(t, resolver);
    worker = started.w;
    await worker.start();
    // each failure waits its back-off on the service's manual clock: move it on
    await waitFor(async () => {
      t.clock.advance(1_000);
      return (await row(t, ship)).attempts >= 3;
    }, 'three refused attempts');
    const r = await row(t, ship);
    expect(r).toMatchObject({
      status: 'pending',
      last_status: null,
      last_error: 'target refused: rebind.example.com resolves to 127.0.0.1, a loopback address (callbacks.allowPrivateNetworks is off)',
    });
    expect(rx.requests).toHaveLength(0);
    // resolved again at each attempt (a new connection each time: nothing was ever connected)
    expect(asked.filter((h) => h === 'rebind.example.com').length - askedBefore).toBeGreaterThanOrEqual(3);
    const warn = started.log.entries.find((e) => e.msg === 'callback delivery refused: target not allowed; will retry');
    expect(warn).toMatchObject({ level: 40, refused: true, to: `http://rebind.example.com:${rx.port}`, eventId: r.event_id, error: r.last_error });
    for (const line of started.log.lines) {
      expect(line).not.toContain('s3cret-tenant-token');
      expect(line).not.toContain('/hooks/locker');
    }
  });

  it('a name resolving to a public and a private address is refused (no mixing)', async () => {
    dns.set('mixed.example.com', ['93.184.215.14']);
    expect((await t.post(CONFIGURE, { url: `http://mixed.example.com:${rx.port}/cb`, authType: 'None' })).body.success).toBe(true);
    dns.set('mixed.example.com', ['93.184.215.14', '127.0.0.1']);
    const ship = await enqueue(t, tenant);
    worker = startWorker(t, resolver).w;
    await worker.start();
    await waitFor(async () => (await row(t, ship)).attempts >= 1, 'a refused attempt');
    expect((await row(t, ship)).last_error).toBe('target refused: mixed.example.com resolves to 127.0.0.1, a loopback address (callbacks.allowPrivateNetworks is off)');
    expect(rx.requests).toHaveLength(0);
  });

  // URLs that never passed ConfigureCallback's check: stored before the upgrade, or written by
  // provisioning. Each points at the receiver on 127.0.0.1 in another spelling.
  const spellings: [string, (port: number) => string, RegExp][] = [
    ['127.0.0.1', (p) => `http://127.0.0.1:${p}/cb`, /^target refused: 127\.0\.0\.1 is a loopback address \(callbacks\.allowPrivateNetworks is off\)$/],
    ['localhost', (p) => `http://localhost:${p}/cb`, /^target refused: localhost is a loopback host name/],
    ['2130706433', (p) => `http://2130706433:${p}/cb`, /^target refused: 127\.0\.0\.1 is a loopback address/],
    ['0x7f000001', (p) => `http://0x7f000001:${p}/cb`, /^target refused: 127\.0\.0\.1 is a loopback address/],
    ['127.1', (p) => `http://127.1:${p}/cb`, /^target refused: 127\.0\.0\.1 is a loopback address/],
    ['[::ffff:127.0.0.1]', (p) => `http://[::ffff:127.0.0.1]:${p}/cb`, /^target refused: ::ffff:7f00:1 is the IPv4-mapped form of a loopback address/],
    ['0.0.0.0', (p) => `http://0.0.0.0:${p}/cb`, /^target refused: 0\.0\.0\.0 is the unspecified address$/],
    ['CR LF', (p) => `http://127.0.0.1:${p}/cb\r\nX-Injected: 1`, /^target refused: callback URL must not contain control characters or whitespace$/],
  ];
  it.each(spellings)('a stored URL with host %s is refused at delivery; the receiver gets nothing', async (_name, make, reason) => {
    await t.ctx.db.kysely.updateTable('callback_configs').set({ url: make(rx.port) }).where('tenant_uid', '=', tenant).execute();
    if (!(await t.ctx.db.kysely.selectFrom('callback_configs').select('url').where('tenant_uid', '=', tenant).executeTakeFirst())) {
      const now = toDbTime(t.clock.now());
      await t.ctx.db.kysely.insertInto('callback_configs').values({ tenant_uid: tenant, url: make(rx.port), auth_type: 'None', auth_key: 'k'.repeat(64), created_at: now, updated_at: now }).execute();
    }
    const ship = await enqueue(t, tenant);
    worker = startWorker(t, resolver).w;
    await worker.start();
    await waitFor(async () => (await row(t, ship)).attempts >= 1, 'a refused attempt');
    const r = await row(t, ship);
    expect(r.status).toBe('pending');
    expect(r.last_error).toMatch(reason);
    expect(rx.requests).toHaveLength(0);
  });
});

describeEngines('callback delivery with callbacks.allowPrivateNetworks on', (engine) => {
  let t: TestService;
  let tenant: string;
  let rx: CallbackReceiver;
  let worker: CallbackDeliveryWorker | null = null;

  beforeAll(async () => {
    t = await createTestService(engine, { config: { callbacks: { allowPrivateNetworks: true, pollIntervalMs: 20, initialBackoffMs: 60_000, requestTimeoutMs: 3_000 } } });
    tenant = await tenantUid(t.ctx);
  });
  afterAll(async () => t?.close());
  beforeEach(async () => {
    rx = new CallbackReceiver();
    await rx.start();
  });
  afterEach(async () => {
    await worker?.stop();
    worker = null;
    await rx.close();
    await t.ctx.db.kysely.updateTable('callback_outbox').set({ status: 'skipped' }).where('status', '=', 'pending').execute();
  });

  it('a receiver on 127.0.0.1 gets the POST', async () => {
    expect((await t.post(CONFIGURE, { url: rx.url, authType: 'HMAC' })).body.success).toBe(true);
    const ship = await enqueue(t, tenant);
    worker = startWorker(t).w;
    await worker.start();
    await waitFor(() => rx.delivered.length === 1, 'the delivery');
    expect(rx.delivered[0].message.shipmentUid).toBe(ship);
    await waitFor(async () => (await row(t, ship)).status === 'delivered', 'delivered recorded');
  });

  it('still refuses a cloud metadata address at delivery', async () => {
    await t.ctx.db.kysely.updateTable('callback_configs').set({ url: 'http://169.254.169.254/latest/meta-data/' }).where('tenant_uid', '=', tenant).execute();
    const ship = await enqueue(t, tenant);
    worker = startWorker(t).w;
    await worker.start();
    await waitFor(async () => (await row(t, ship)).attempts >= 1, 'a refused attempt');
    expect((await row(t, ship)).last_error).toBe('target refused: 169.254.169.254 is a link-local address (cloud metadata range)');
  });

  it('a 302 is a failed attempt and its Location is not followed', async () => {
    let redirected = 0;
    const redirector = http.createServer((req, res) => {
      redirected++;
      req.resume();
      res.writeHead(302, { location: `${rx.url}&followed=1` }).end();
    });
    await new Promise<void>((r) => redirector.listen(0, '127.0.0.1', () => r()));
    try {
      const port = (redirector.address() as AddressInfo).port;
      expect((await t.post(CONFIGURE, { url: `http://127.0.0.1:${port}/moved`, authType: 'None' })).body.success).toBe(true);
      const ship = await enqueue(t, tenant);
      worker = startWorker(t).w;
      await worker.start();
      await waitFor(async () => (await row(t, ship)).attempts >= 1, 'the failed attempt');
      const r = await row(t, ship);
      expect(r).toMatchObject({ status: 'pending', attempts: 1, last_status: 302, last_error: 'HTTP 302 (redirects are not followed)' });
      expect(redirected).toBe(1);
      await new Promise((res) => setTimeout(res, 200));
      expect(rx.requests).toHaveLength(0);
    } finally {
      redirector.closeAllConnections();
      await new Promise<void>((r) => redirector.close(() => r()));
    }
  });
});
