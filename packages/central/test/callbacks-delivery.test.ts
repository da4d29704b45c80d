// Callback delivery against a real HTTP receiver on both engines: signatures checked the way a
// tenant checks them, ApiKey and None modes, retries with growing back-off, per-shipment order,
// a failing shipment not blocking others, a restart in between, two instances on one database.
import crypto from 'node:crypto';
import Fastify from 'fastify';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { CallbackReceiver, waitFor, type Received } from './support/receiver';
import { openSameStore, storeSchema, type SameStoreService } from './support/same-store';
import { enqueueShipmentStatus, type ShipmentStatusEvent } from '../src/callbacks/outbox';
import { CALLBACK_WORKER_NAME, CallbackDeliveryWorker } from '../src/callbacks/worker';
import { centralPlugin } from '../src/app';
import { createLogger } from '../src/logger';
import { backoffMs } from '../src/callbacks/backoff';
import { newUid, toDbTime } from '../src/ids';
import type { AppContext } from '../src/context';
import { PUP_A1 } from './support/fixtures';

const CONFIGURE = '/v1/Platform/ConfigureCallback';

// ---- what a tenant writes to verify a callback (docs/callbacks.md shows the same) ----
function tenantVerifiesHmac(headers: Record<string, string | string[] | undefined>, rawBody: string, authKey: string, nowSeconds: number): boolean {
  const sigHeader = String(headers['x-signature'] ?? '');
  const parts = Object.fromEntries(sigHeader.split(',').map((kv) => kv.split('=', 2) as [string, string]));
  const t = Number(parts.t);
  if (!Number.isInteger(t) || Math.abs(nowSeconds - t) > 300) return false; // replay window
  const expected = crypto.createHmac('sha256', authKey).update(`${parts.t}.${rawBody}`).digest('hex');
  const given = String(parts.v1 ?? '');
  if (given.length !== expected.length || !crypto.timingSafeEqual(Buffer.from(given), Buffer.from(expected))) return false;
  // The API document's header: HMAC of the shipment uid.
  const shipmentUid = JSON.parse(rawBody).message.shipmentUid as string;
  const legacy = crypto.createHmac('sha256', authKey).update(shipmentUid).digest('hex');
  const h = String(headers['x-hmac-sha256'] ?? '');
  return h.length === legacy.length && crypto.timingSafeEqual(Buffer.from(h), Buffer.from(legacy));
}

type Svc = TestService | SameStoreService;

async function tenantUid(ctx: AppContext, clientId = 'tenant-a'): Promise<string> {
  return (await ctx.db.kysely.selectFrom('tenants').select('uid').where('client_id', '=', clientId).executeTakeFirstOrThrow()).uid;
}

function event(tenant: string, shipmentUid: string, stateCode: string, at: Date, extra: Partial<ShipmentStatusEvent> = {}): ShipmentStatusEvent {
  return {
    tenantUid: tenant,
    shipmentUid,
    stateCode,
    stateStart: toDbTime(at),
    shipmentType: 'LocalPupShipment',
    referenceNo: 'REF-1',
    referenceCaseNo: null,
    description: 'a parcel',
    pupUid: PUP_A1,
    fromUserUid: 'f'.repeat(32),
    toUserUid: null,
    ...extra,
  };
}

async function enqueue(s: Svc, ev: ShipmentStatusEvent) {
  return s.ctx.db.kysely.transaction().execute((trx) => enqueueShipmentStatus(trx, ev, toDbTime(s.clock.now())));
}

function worker(s: Svc): CallbackDeliveryWorker {
  const w = s.ctx.workers.find((x) => x.name === CALLBACK_WORKER_NAME);
  if (!w) throw new Error('callback worker not registered');
  return w as CallbackDeliveryWorker;
}

async function outbox(s: Svc, shipmentUid?: string) {
  let q = s.ctx.db.kysely.selectFrom('callback_outbox').selectAll();
  if (shipmentUid) q = q.where('shipment_uid', '=', shipmentUid);
  return q.orderBy('shipment_uid').orderBy('sequence').execute();
}

const seqOf = (r: Received) => r.json?.message?.sequence as number;
const shipOf = (r: Received) => r.json?.message?.shipmentUid as string;

/** per shipment: attempted sequences never go back, and the 2xx ones are exactly 1..n */
function assertOrderPerShipment(reqs: Received[], expected: Record<string, number>) {
  const by = new Map<string, Received[]>();
  for (const r of reqs) by.set(shipOf(r), [...(by.get(shipOf(r)) ?? []), r]);
  for (const [ship, n] of Object.entries(expected)) {
    const list = by.get(ship) ?? [];
    const attempted = list.map(seqOf);
    for (let i = 1; i < attempted.length; i++) expect(attempted[i]!, `shipment ${ship} attempted ${attempted.join(',')}`).toBeGreaterThanOrEqual(attempted[i - 1]!);
    const ok = [...new Set(list.filter((r) => r.answered != null && r.answered < 300).map(seqOf))];
    expect(ok).toEqual(Array.from({ length: n }, (_, i) => i + 1));
  }
}

describe('backoffMs', () => {
  it('doubles per failure within [d/2, d], never shrinks, and is capped', () => {
    const lo = () => 0;
    const hi = () => 1;
    expect([1, 2, 3, 4].map((n) => backoffMs(n, 1000, 60_000, hi))).toEqual([1000, 2000, 4000, 8000]);
    expect([1, 2, 3, 4].map((n) => backoffMs(n, 1000, 60_000, lo))).toEqual([500, 1000, 2000, 4000]);
    expect(backoffMs(30, 1000, 60_000, hi)).toBe(60_000);
    expect(backoffMs(500, 1000, 60_000, lo)).toBe(30_000);
    for (let n = 1; n < 20; n++) expect(backoffMs(n + 1, 1000, 60_000, lo)).toBeGreaterThanOrEqual(backoffMs(n, 1000, 60_000, hi) / 2);
  });
});

describeEngines('callback delivery', (engine) => {
  let t: TestService;
  let rx: CallbackReceiver;
  let tenant: string;
  let schema: string | null;

  beforeAll(async () => {
    t = await createTestService(engine, { config: { callbacks: { allowPrivateNetworks: true, pollIntervalMs: 20, initialBackoffMs: 1000, maxBackoffMs: 60_000, requestTimeoutMs: 5_000 } } });
    tenant = await tenantUid(t.ctx);
    schema = await storeSchema(t.ctx);
  });
  afterAll(async () => t?.close());

  beforeEach(async () => {
    rx = new CallbackReceiver();
    await rx.start();
  });
  afterEach(async () => {
    await worker(t).stop();
    await rx.close();
    // leave nothing pending for the next test
    await t.ctx.db.kysely.updateTable('callback_outbox').set({ status: 'skipped' }).where('status', '=', 'pending').execute();
  });

  const configure = async (body: Record<string, unknown>) => {
    const res = await t.post(CONFIGURE, body);
    expect(res.body.success).toBe(true);
    return res.body as { changed: boolean; authKey?: string };
  };

  it('HMAC: the tenant verifies X-Signature and X-Hmac-Sha256; body, headers and order as documented', async () => {
    const { authKey } = await configure({ url: rx.url, authType: 'HMAC', resetKey: true });
    expect(authKey).toBeTruthy();
    const ship = newUid();
    const at = new Date('2026-03-01T09:59:58.123Z');
    const e1 = await enqueue(t, event(tenant, ship, 'ReadyForDropoff', at));
    const e2 = await enqueue(t, event(tenant, ship, 'ReadyForPickup', at, { referenceCaseNo: 'CASE-7', toUserUid: 'e'.repeat(32) }));
    expect([e1.sequence, e2.sequence]).toEqual([1, 2]);
    await worker(t).start();
    await waitFor(() => rx.delivered.length === 2, 'two deliveries');

    const [r1, r2] = rx.requests;
    expect(r1!.json).toEqual({
      messageType: 'ShipmentStatusUpdate',
      message: {
        shipmentUid: ship,
        stateCode: 'ReadyForDropoff',
        stateStart: '2026-03-01T09:59:58.123',
        shipmentType: 'LocalPupShipment',
        referenceNo: 'REF-1',
        referenceCaseNo: null,
        description: 'a parcel',
        pupUid: PUP_A1,
        fromUserUid: 'f'.repeat(32),
        toUserUid: null,
        eventId: e1.eventId,
        sequence: 1,
      },
    });
    expect(r2!.json.message).toMatchObject({ stateCode: 'ReadyForPickup', referenceCaseNo: 'CASE-7', toUserUid: 'e'.repeat(32), eventId: e2.eventId, sequence: 2 });
    const nowS = Math.floor(t.clock.now().getTime() / 1000);
    for (const [r, e] of [[r1!, e1], [r2!, e2]] as const) {
      expect(r.headers['content-type']).toBe('application/json');
      expect(r.headers['x-event-id']).toBe(e.eventId);
      expect(r.headers['x-event-sequence']).toBe(String(e.sequence));
      expect(r.headers['x-api-key']).toBeUndefined();
      expect(tenantVerifiesHmac(r.headers, r.raw, authKey!, nowS)).toBe(true);
      // a verification that can fail: other key, altered body, stale timestamp
      expect(tenantVerifiesHmac(r.headers, r.raw, 'x' + authKey!.slice(1), nowS)).toBe(false);
      expect(tenantVerifiesHmac(r.headers, r.raw.replace('LocalPupShipment', 'LocalPupShipmenX'), authKey!, nowS)).toBe(false);
      expect(tenantVerifiesHmac(r.headers, r.raw, authKey!, nowS + 3600)).toBe(false);
    }
    // the receiver has answered; the worker records the outcome just after
    await waitFor(async () => (await outbox(t, ship)).every((r) => r.status === 'delivered'), 'both recorded as delivered');
    const rows = await outbox(t, ship);
    expect(rows.map((r) => [r.sequence, r.status, r.attempts, r.last_status])).toEqual([
      [1, 'delivered', 1, 200],
      [2, 'delivered', 1, 200],
    ]);
  });

  it('ApiKey: X-Api-Key carries the key, X-Signature signs time and body with it, no X-Hmac-Sha256', async () => {
    const { authKey } = await configure({ url: rx.url, authType: 'ApiKey' });
    await enqueue(t, event(tenant, newUid(), 'ReadyForDropoff', t.clock.now()));
    await worker(t).start();
    await waitFor(() => rx.delivered.length === 1, 'delivery');
    const h = rx.requests[0]!.headers;
    expect(h['x-api-key']).toBe(authKey);
    expect(h['x-hmac-sha256']).toBeUndefined();
    const [tPart, vPart] = String(h['x-signature']).split(',');
    const ts = tPart!.replace(/^t=/, '');
    expect(vPart).toBe(`v1=${crypto.createHmac('sha256', authKey as string).update(`${ts}.${rx.requests[0]!.raw}`).digest('hex')}`);
  });

  it('None: no authentication headers', async () => {
    await configure({ url: rx.url, authType: 'None' });
    await enqueue(t, event(tenant, newUid(), 'ReadyForDropoff', t.clock.now()));
    await worker(t).start();
    await waitFor(() => rx.delivered.length === 1, 'delivery');
    const h = rx.requests[0]!.headers;
    expect(h['x-api-key'] ?? h['x-hmac-sha256'] ?? h['x-signature']).toBeUndefined();
    expect(h['x-event-id']).toMatch(/^[0-9a-f]{32}$/);
  });

  it('receiver answering 500: retried with growing back-off until a 2xx; order per shipment holds; a failing shipment does not block another', async () => {
    await configure({ url: rx.url, authType: 'HMAC' });
    const bad = newUid();
    const good = newUid();
    rx.behaviour = (r) => (shipOf(r) === bad ? 500 : 200);
    const ids: string[] = [];
    for (const s of ['ReadyForDropoff', 'ReadyForPickup', 'PickedUp']) ids.push((await enqueue(t, event(tenant, bad, s, t.clock.now()))).eventId);
    for (const s of ['ReadyForDropoff', 'ReadyForPickup', 'PickedUp']) await enqueue(t, event(tenant, good, s, t.clock.now()));
    await worker(t).start();
    // the good shipment completes while the bad one keeps failing its first message
    await waitFor(() => rx.delivered.filter((b) => b.message.shipmentUid === good).length === 3, 'good shipment delivered');
    await waitFor(async () => (await outbox(t, bad))[0]!.attempts === 1, 'first failure recorded');
    expect(rx.requests.filter((r) => shipOf(r) === bad).map(seqOf)).toEqual([1]);

    // Move the clock to each retry time: the delays grow.
    const delays: number[] = [];
    for (let attempt = 1; attempt <= 5; attempt++) {
      const row = (await outbox(t, bad))[0]!;
      expect(row.attempts).toBe(attempt);
      expect(row.last_status).toBe(500);
      const due = new Date(row.next_attempt_at).getTime();
      delays.push(due - t.clock.now().getTime());
      t.clock.set(due);
      worker(t).wake();
      await waitFor(async () => (await outbox(t, bad))[0]!.attempts === attempt + 1, `attempt ${attempt + 1}`);
    }
    for (let i = 1; i < delays.length; i++) expect(delays[i]!).toBeGreaterThanOrEqual(delays[i - 1]!);
    expect(delays[0]!).toBeGreaterThanOrEqual(500);
    expect(delays[0]!).toBeLessThanOrEqual(1000);
    expect(delays[4]!).toBeGreaterThanOrEqual(8000);
    // Still only sequence 1 was ever tried for the bad shipment.
    expect(new Set(rx.requests.filter((r) => shipOf(r) === bad).map(seqOf))).toEqual(new Set([1]));

    // Receiver recovers: everything arrives, in order, with the same event ids.
    rx.behaviour = () => 200;
    t.clock.advance(60_000);
    worker(t).wake();
    await waitFor(() => rx.delivered.filter((b) => b.message.shipmentUid === bad).length === 3, 'bad shipment delivered');
    expect(rx.delivered.filter((b) => b.message.shipmentUid === bad).map((b) => b.message.eventId)).toEqual(ids);
    const failedIds = new Set(rx.requests.filter((r) => r.answered === 500).map((r) => r.headers['x-event-id']));
    expect(failedIds).toEqual(new Set([ids[0]]));
    assertOrderPerShipment(rx.requests, { [bad]: 3, [good]: 3 });
  });

  it('a held (slow) delivery does not hold up the API or enqueueing', async () => {
    await configure({ url: rx.url, authType: 'HMAC' });
    rx.behaviour = () => 'hold';
    const ship = newUid();
    await enqueue(t, event(tenant, ship, 'ReadyForDropoff', t.clock.now()));
    await worker(t).start();
    await waitFor(() => rx.heldCount === 1, 'delivery on the wire');
    // While the receiver holds the request: an API call and another state change complete.
    const res = await t.post(CONFIGURE, { url: rx.url, authType: 'HMAC' });
    expect(res.body).toMatchObject({ success: true, changed: false });
    const other = newUid();
    const e = await enqueue(t, event(tenant, other, 'ReadyForDropoff', t.clock.now()));
    expect(e.status).toBe('pending');
    expect(rx.heldCount).toBeGreaterThanOrEqual(1);
    expect(rx.requests[0]!.answered).toBeNull();
    rx.behaviour = () => 200;
    rx.release(200);
    await waitFor(async () => (await outbox(t)).filter((r) => [ship, other].includes(r.shipment_uid) && r.status === 'delivered').length === 2, 'both delivered');
  });

  it('no callback URL at enqueue time: stored as skipped (sequence continues), never sent; disabling skips pending messages', async () => {
    await configure({ url: null });
    const ship = newUid();
    const e1 = await enqueue(t, event(tenant, ship, 'ReadyForDropoff', t.clock.now()));
    expect(e1).toMatchObject({ status: 'skipped', sequence: 1 });
    await configure({ url: rx.url, authType: 'HMAC' });
    const e2 = await enqueue(t, event(tenant, ship, 'ReadyForPickup', t.clock.now()));
    expect(e2).toMatchObject({ status: 'pending', sequence: 2 });
    await worker(t).start();
    await waitFor(() => rx.delivered.length === 1, 'delivery of the second');
    expect(rx.delivered[0].message).toMatchObject({ sequence: 2, eventId: e2.eventId });

    // pending when callbacks are disabled: not sent
    rx.behaviour = () => 500;
    const e3 = await enqueue(t, event(tenant, ship, 'PickedUp', t.clock.now()));
    await waitFor(async () => (await outbox(t, ship))[2]!.attempts === 1, 'failed attempt');
    await configure({ url: null });
    t.clock.advance(120_000);
    worker(t).wake();
    await waitFor(async () => (await outbox(t, ship))[2]!.status === 'skipped', 'skipped after disabling');
    expect(rx.requests.filter((r) => r.headers['x-event-id'] === e3.eventId)).toHaveLength(1);
  });

  it('the outbox row is written in the caller\'s transaction: rolled back with it, nothing queued', async () => {
    const ship = newUid();
    await expect(
      t.ctx.db.kysely.transaction().execute(async (trx) => {
        await enqueueShipmentStatus(trx, event(tenant, ship, 'ReadyForDropoff', t.clock.now()), toDbTime(t.clock.now()));
        throw new Error('rolled back');
      }),
    ).rejects.toThrow('rolled back');
    expect(await outbox(t, ship)).toEqual([]);
  });

  it('receiver closed, central restarted in between: everything arrives after the restart, in order, same event ids', async () => {
    await configure({ url: rx.url, authType: 'HMAC' });
    await rx.close(); // connection refused
    const ships = [newUid(), newUid()];
    const ids = new Map<string, string[]>();
    for (const s of ships) {
      ids.set(s, []);
      for (const st of ['ReadyForDropoff', 'ReadyForPickup', 'PickedUp']) ids.get(s)!.push((await enqueue(t, event(tenant, s, st, t.clock.now()))).eventId);
    }
    await worker(t).start();
    await waitFor(async () => (await outbox(t)).filter((r) => ships.includes(r.shipment_uid) && r.attempts > 0).length === 2, 'both heads failed');
    const failed = (await outbox(t)).filter((r) => ships.includes(r.shipment_uid) && r.attempts > 0);
    expect(failed.every((r) => r.sequence === 1 && r.last_status === null && /ECONNREFUSED|fetch failed/.test(r.last_error ?? ''))).toBe(true);

    // Restart: stop this central, open a new one on the same store.
    await t.svc.stop();
    const t2 = await openSameStore(t, { pgSchema: schema });
    try {
      await rx.start(); // same port again
      t2.clock.advance(5 * 60_000);
      await worker(t2).start();
      await waitFor(() => rx.delivered.length === 6, 'all six after restart');
      for (const s of ships) expect(rx.delivered.filter((b) => b.message.shipmentUid === s).map((b) => b.message.eventId)).toEqual(ids.get(s));
      assertOrderPerShipment(rx.requests, { [ships[0]!]: 3, [ships[1]!]: 3 });
    } finally {
      await worker(t2).stop();
      // hand the store back to `t` for the remaining tests and the cleanup
      await t2.close();
      t = await reopenAs(t);
    }
  });

  it('two central instances on one database deliver each message once, in order per shipment', async () => {
    await configure({ url: rx.url, authType: 'HMAC' });
    let inFlight = 0;
    let maxSameEvent = 0;
    const active = new Map<string, number>();
    rx.behaviour = (r) => {
      const id = String(r.headers['x-event-id']);
      active.set(id, (active.get(id) ?? 0) + 1);
      maxSameEvent = Math.max(maxSameEvent, active.get(id)!);
      inFlight++;
      setTimeout(() => {
        active.set(id, active.get(id)! - 1);
        inFlight--;
        rx.release(200);
      }, 5);
      return 'hold';
    };
    const ships = Array.from({ length: 6 }, () => newUid());
    for (const st of ['ReadyForDropoff', 'ReadyForPickup', 'PickedUp']) for (const s of ships) await enqueue(t, event(tenant, s, st, t.clock.now()));
    // two slots each, so neither instance can take every shipment at once
    const t2 = await openSameStore(t, { pgSchema: schema, config: { callbacks: { ...t.ctx.config.callbacks, concurrency: 2 } } });
    const oldConcurrency = t.ctx.config.callbacks.concurrency;
    t.ctx.config.callbacks.concurrency = 2;
    try {
      await Promise.all([worker(t).start(), worker(t2).start()]);
      await waitFor(() => rx.delivered.length === 18, 'all 18');
      await waitFor(() => inFlight === 0, 'quiet');
      await waitFor(async () => (await outbox(t)).filter((r) => ships.includes(r.shipment_uid) && r.status === 'delivered').length === 18, 'all 18 recorded');
      await waitFor(() => worker(t).stats.delivered + worker(t2).stats.delivered === 18, 'both workers counted');
      const ids = rx.requests.map((r) => String(r.headers['x-event-id']));
      expect(new Set(ids).size).toBe(18);
      expect(ids.length).toBe(18);
      expect(maxSameEvent).toBe(1);
      assertOrderPerShipment(rx.requests, Object.fromEntries(ships.map((s) => [s, 3])));
      expect((await outbox(t)).filter((r) => ships.includes(r.shipment_uid)).every((r) => r.status === 'delivered' && r.attempts === 1)).toBe(true);
      expect(worker(t).stats.delivered).toBeGreaterThan(0);
      expect(worker(t2).stats.delivered).toBeGreaterThan(0);
      expect(worker(t).stats.delivered + worker(t2).stats.delivered).toBe(18);
    } finally {
      t.ctx.config.callbacks.concurrency = oldConcurrency;
      await worker(t2).stop();
      await t2.close();
    }
  });

  // After the restart test the original service is stopped; continue on a fresh instance over the
  // same store, keeping `t`'s cleanup.
  async function reopenAs(orig: TestService): Promise<TestService> {
    const s = await openSameStore(orig, { pgSchema: schema });
    return { ...orig, svc: s.svc, app: s.app, ctx: s.ctx, post: s.post, token: s.token, close: async () => { await s.close(); await orig.close(); } };
  }
});

describeEngines('callback request timeout', (engine) => {
  let t: TestService;
  let rx: CallbackReceiver;
  beforeAll(async () => {
    t = await createTestService(engine, { config: { callbacks: { allowPrivateNetworks: true, pollIntervalMs: 20, requestTimeoutMs: 300 } } });
    rx = new CallbackReceiver();
    await rx.start();
  });
  afterAll(async () => {
    await rx?.close();
    await t?.close();
  });

  it('a receiver that does not answer within requestTimeoutMs is a failed attempt, retried later', async () => {
    const tenant = await tenantUid(t.ctx);
    await t.post(CONFIGURE, { url: rx.url, authType: 'None' });
    rx.behaviour = () => 'hold';
    const ship = newUid();
    await enqueue(t, event(tenant, ship, 'ReadyForDropoff', t.clock.now()));
    await worker(t).start();
    await waitFor(async () => (await outbox(t, ship))[0]!.attempts === 1, 'timed-out attempt');
    const row = (await outbox(t, ship))[0]!;
    expect(row).toMatchObject({ status: 'pending', last_status: null, last_error: 'timeout after 300 ms' });
    await waitFor(() => rx.requests[0]!.aborted, 'the receiver sees the connection dropped');
    rx.behaviour = () => 200;
    t.clock.advance(10_000);
    worker(t).wake();
    await waitFor(async () => (await outbox(t, ship))[0]!.status === 'delivered', 'delivered on retry');
    await worker(t).stop();
  });
});

describeEngines('callback logging', (engine) => {
  let t: TestService;
  let rx: CallbackReceiver;
  beforeAll(async () => {
    t = await createTestService(engine, { config: { callbacks: { allowPrivateNetworks: true, pollIntervalMs: 20 } } });
    rx = new CallbackReceiver();
    await rx.start();
  });
  afterAll(async () => {
    await rx?.close();
    await t?.close();
  });

  it('logs ids and the URL origin at debug level, never the key or the URL path and query', async () => {
    const lines: string[] = [];
    const log = createLogger({ level: 'debug', destination: { write: (s: string) => void lines.push(s) } });
    const ctx = { ...t.ctx, log };
    const app = Fastify({ loggerInstance: log });
    await app.register(centralPlugin, { ctx });
    await app.ready();
    const w = new CallbackDeliveryWorker(ctx);
    try {
      const tok = await t.token();
      const res = await app.inject({ method: 'POST', url: CONFIGURE, payload: JSON.stringify({ url: rx.url, authType: 'ApiKey' }), headers: { 'content-type': 'application/json', authorization: `Bearer ${tok}` } });
      const key = res.json().authKey as string;
      expect(key).toBeTruthy();
      const ship = newUid();
      rx.behaviour = (r) => (rx.requests.indexOf(r) === 0 ? 503 : 200);
      const e = await enqueue(t, event(await tenantUid(t.ctx), ship, 'ReadyForDropoff', t.clock.now()));
      await w.start();
      await waitFor(async () => (await outbox(t, ship))[0]!.attempts === 1, 'failed attempt');
      t.clock.advance(5_000);
      w.wake();
      await waitFor(() => rx.delivered.length === 1, 'delivery');
      const text = lines.join('');
      expect(text).toContain(e.eventId);
      expect(text).toContain('callback delivery failed');
      expect(text).toContain('callback registration changed');
      expect(text).toContain(`http://127.0.0.1:${rx.port}`);
      expect(text).not.toContain(key);
      expect(text).not.toContain('/hooks/locker');
      expect(text).not.toContain('tenant=a');
    } finally {
      await w.stop();
      await app.close();
    }
  });
});
