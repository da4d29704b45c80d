// Idempotency-Key on routes marked idempotent, exercised through a test-only route on an app
// built from a real service (real store, real auth), on both engines.
import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { z } from 'zod';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { centralPlugin } from '../src/app';
import { v1Post } from '../src/http/route';
import { envelope } from '../src/http/envelope';
import { ApiError } from '../src/errors';
import { IdempotencySweeper, idempotencyStats } from '../src/http/idempotency';
import { newUid, toDbTime } from '../src/ids';

const CREATE = '/v1/Test/CreateThing';
const PLAIN = '/v1/Test/PlainThing';

describeEngines('Idempotency-Key', (engine) => {
  let t: TestService;
  let app: FastifyInstance;
  let calls = 0;
  let gate: Promise<void> | null = null;
  let openGate: () => void = () => undefined;

  beforeAll(async () => {
    t = await createTestService(engine);
    app = Fastify();
    await app.register(centralPlugin, { ctx: t.ctx });
    await app.register(async (s) => {
      const body = z.object({ pupUid: z.string(), count: z.number().int().optional(), fail: z.enum(['domain', 'crash']).nullish(), details: z.object({ referenceNo: z.string().nullish() }).nullish() });
      const response = envelope({ thingUid: z.string(), call: z.number().int() });
      const handler = async (b: z.infer<typeof body>) => {
        calls++;
        if (gate) await gate;
        if (b.fail === 'domain') throw new ApiError('NoLockerAvailable', 'no locker of that size is free', 400);
        if (b.fail === 'crash') throw new Error('boom');
        return { thingUid: newUid(), call: calls };
      };
      v1Post(s, { path: CREATE, summary: 'test', tags: ['Test'], body, response, idempotent: true, handler });
      v1Post(s, { path: PLAIN, summary: 'test', tags: ['Test'], body, response, handler });
    });
    await app.ready();
  });
  afterAll(async () => {
    await app?.close();
    await t?.close();
  });
  beforeEach(() => {
    calls = 0;
    gate = null;
  });

  const send = async (url: string, body: unknown, key?: string, client = 'tenant-a') => {
    const res = await app.inject({
      method: 'POST',
      url,
      payload: typeof body === 'string' ? body : JSON.stringify(body),
      headers: { 'content-type': 'application/json', authorization: `Bearer ${await t.token(client)}`, ...(key !== undefined ? { 'idempotency-key': key } : {}) },
    });
    return { status: res.statusCode, body: res.json(), raw: res.body, headers: res.headers };
  };
  const hold = () => {
    gate = new Promise<void>((r) => (openGate = r));
  };
  const key = () => `key-${newUid()}`;

  it('without the header every call runs', async () => {
    const a = await send(CREATE, { pupUid: 'p1' });
    const b = await send(CREATE, { pupUid: 'p1' });
    expect(a.body.thingUid).not.toBe(b.body.thingUid);
    expect(calls).toBe(2);
  });

  it('a repeat with the same key and body returns the first answer without running again', async () => {
    const k = key();
    const a = await send(CREATE, { pupUid: 'p1', count: 2 }, k);
    expect(a.status).toBe(200);
    expect(a.body).toMatchObject({ success: true, error: null, message: null, call: 1 });
    const b = await send(CREATE, { pupUid: 'p1', count: 2 }, k);
    expect(b.status).toBe(200);
    expect(b.raw).toBe(a.raw);
    expect(b.headers['idempotent-replayed']).toBe('true');
    expect(b.headers['content-type']).toMatch(/^application\/json/);
    expect(a.headers['idempotent-replayed']).toBeUndefined();
    expect(calls).toBe(1);
  });

  it('the body is compared normalized: key order and key letter case do not matter', async () => {
    const k = key();
    const a = await send(CREATE, { pupUid: 'p1', count: 3, details: { referenceNo: 'R' } }, k);
    const b = await send(CREATE, '{"Details":{"ReferenceNo":"R"},"Count":3,"PupUid":"p1"}', k);
    expect(b.raw).toBe(a.raw);
    expect(calls).toBe(1);
  });

  it('the same key with a different body is refused with IdempotencyKeyReused (400)', async () => {
    const k = key();
    await send(CREATE, { pupUid: 'p1' }, k);
    const b = await send(CREATE, { pupUid: 'p2' }, k);
    expect(b.status).toBe(400);
    expect(b.body).toEqual({ success: false, error: 'IdempotencyKeyReused', message: expect.stringContaining('different request') });
    expect(calls).toBe(1);
  });

  it('keys are per tenant', async () => {
    const k = key();
    const a = await send(CREATE, { pupUid: 'p1' }, k, 'tenant-a');
    const b = await send(CREATE, { pupUid: 'p1' }, k, 'tenant-b');
    expect(b.body.thingUid).not.toBe(a.body.thingUid);
    expect(calls).toBe(2);
  });

  it.each([
    ['x'.repeat(256), 'too long'],
    ['', 'empty'],
    ['   ', 'blank'],
    ['caf\u00e9', 'not ASCII'],
  ])('an invalid key (%s: %s) is refused with InvalidRequest', async (k) => {
    const res = await app.inject({
      method: 'POST',
      url: CREATE,
      payload: JSON.stringify({ pupUid: 'p1' }),
      headers: { 'content-type': 'application/json', authorization: `Bearer ${await t.token()}`, 'idempotency-key': k },
    });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toMatchObject({ success: false, error: 'InvalidRequest', message: expect.stringContaining('Idempotency-Key') });
    expect(calls).toBe(0);
  });

  it('a key of 255 printable characters is accepted', async () => {
    const k = '!~ a'.repeat(63) + 'abc';
    expect(k).toHaveLength(255);
    const a = await send(CREATE, { pupUid: 'p1' }, k);
    const b = await send(CREATE, { pupUid: 'p1' }, k);
    expect(a.status).toBe(200);
    expect(b.raw).toBe(a.raw);
    expect(calls).toBe(1);
  });

  it('a failed command (domain error) is a final answer: replayed, not run again', async () => {
    const k = key();
    const a = await send(CREATE, { pupUid: 'p1', fail: 'domain' }, k);
    expect(a.status).toBe(400);
    expect(a.body).toMatchObject({ success: false, error: 'NoLockerAvailable' });
    const b = await send(CREATE, { pupUid: 'p1', fail: 'domain' }, k);
    expect(b.status).toBe(400);
    expect(b.raw).toBe(a.raw);
    expect(calls).toBe(1);
  });

  it('a server fault (500) is not stored: the retry runs again', async () => {
    const k = key();
    const a = await send(CREATE, { pupUid: 'p1', fail: 'crash' }, k);
    expect(a.status).toBe(500);
    expect(a.body).toMatchObject({ success: false, error: 'InternalError' });
    const b = await send(CREATE, { pupUid: 'p1', fail: 'crash' }, k);
    expect(b.status).toBe(500);
    expect(calls).toBe(2);
  });

  it('a request refused by validation does not use up the key', async () => {
    const k = key();
    const bad = await send(CREATE, { pupUid: 42 }, k);
    expect(bad.status).toBe(400);
    expect(bad.body.error).toBe('InvalidRequest');
    const good = await send(CREATE, { pupUid: 'p1' }, k);
    expect(good.status).toBe(200);
    expect(calls).toBe(1);
  });

  it('routes not marked idempotent ignore the header', async () => {
    const k = key();
    const a = await send(PLAIN, { pupUid: 'p1' }, k);
    const b = await send(PLAIN, { pupUid: 'p1' }, k);
    expect(a.body.thingUid).not.toBe(b.body.thingUid);
    expect(calls).toBe(2);
  });

  it('two concurrent requests with one key: one runs, the other waits and replays its answer', async () => {
    const k = key();
    hold();
    const first = send(CREATE, { pupUid: 'p1' }, k);
    await waitUntil(() => calls === 1);
    const waitsBefore = idempotencyStats.waits;
    const second = send(CREATE, { pupUid: 'p1' }, k);
    await waitUntil(() => idempotencyStats.waits > waitsBefore); // the second found the key pending and waits
    expect(calls).toBe(1);
    openGate();
    const [a, b] = await Promise.all([first, second]);
    expect(a.status).toBe(200);
    expect(b.raw).toBe(a.raw);
    expect(b.headers['idempotent-replayed']).toBe('true');
    expect(calls).toBe(1);
  });

  it('a concurrent repeat that waits longer than idempotency.waitMs gets 400 IdempotencyKeyInProgress with Retry-After', async () => {
    const saved = t.ctx.config.idempotency.waitMs;
    t.ctx.config.idempotency.waitMs = 50;
    try {
      const k = key();
      hold();
      const first = send(CREATE, { pupUid: 'p1' }, k);
      await waitUntil(() => calls === 1);
      const second = await send(CREATE, { pupUid: 'p1' }, k);
      expect(second.status).toBe(400);
      expect(second.body).toEqual({ success: false, error: 'IdempotencyKeyInProgress', message: expect.any(String) });
      expect(second.headers['retry-after']).toBe('1');
      openGate();
      expect((await first).status).toBe(200);
      const third = await send(CREATE, { pupUid: 'p1' }, k);
      expect(third.raw).toBe((await first).raw);
      expect(calls).toBe(1);
    } finally {
      t.ctx.config.idempotency.waitMs = saved;
    }
  });

  it('a reservation abandoned by a crashed process is taken over after idempotency.lockSeconds', async () => {
    const k = key();
    const tenant = (await t.ctx.db.kysely.selectFrom('tenants').select('uid').where('client_id', '=', 'tenant-a').executeTakeFirstOrThrow()).uid;
    const now = t.clock.now();
    // what a crashed first request leaves behind (same body hash as the request below)
    const { requestHash } = await import('../src/http/idempotency');
    await t.ctx.db.kysely
      .insertInto('idempotency_keys')
      .values({
        tenant_uid: tenant,
        idem_key: k,
        request_hash: requestHash('POST', CREATE, { pupUid: 'p1' }),
        status: 'pending',
        locked_until: toDbTime(new Date(now.getTime() + 60_000)),
        response_status: null,
        response_body: null,
        response_type: null,
        created_at: toDbTime(now),
        expires_at: toDbTime(new Date(now.getTime() + 86_400_000)),
      })
      .execute();
    const saved = t.ctx.config.idempotency.waitMs;
    t.ctx.config.idempotency.waitMs = 0;
    try {
      const busy = await send(CREATE, { pupUid: 'p1' }, k);
      expect([busy.status, busy.body.error, busy.headers['retry-after']]).toEqual([400, 'IdempotencyKeyInProgress', '1']);
      t.clock.advance(61_000);
      const res = await send(CREATE, { pupUid: 'p1' }, k);
      expect(res.status).toBe(200);
      expect(calls).toBe(1);
    } finally {
      t.ctx.config.idempotency.waitMs = saved;
    }
  });

  it('keys expire after idempotency.ttlHours (24 h): then the call runs again; the sweeper deletes them', async () => {
    const k = key();
    const a = await send(CREATE, { pupUid: 'p1' }, k);
    t.clock.advance(23 * 3_600_000);
    expect((await send(CREATE, { pupUid: 'p1' }, k)).raw).toBe(a.raw);
    t.clock.advance(3_600_000 + 1000);
    const b = await send(CREATE, { pupUid: 'p1' }, k);
    expect(b.body.thingUid).not.toBe(a.body.thingUid);
    expect(calls).toBe(2);
    const k2 = key();
    await send(CREATE, { pupUid: 'p9' }, k2);
    t.clock.advance(25 * 3_600_000);
    const swept = await new IdempotencySweeper(t.ctx).sweep();
    expect(swept).toBeGreaterThanOrEqual(2);
    const left = await t.ctx.db.kysely.selectFrom('idempotency_keys').select('idem_key').where('idem_key', 'in', [k, k2]).execute();
    expect(left).toEqual([]);
  });
});

async function waitUntil(cond: () => boolean, timeoutMs = 5000) {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 5));
  }
}
