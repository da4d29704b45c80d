// The typed client against the real central service, in process and listening on a free port
// (SQLite, the test site of packages/central/test/support): over real HTTP it gets a token, creates
// an account and a shipment with an Idempotency-Key (the repeat returns the same shipment, one
// booking), reads it, surfaces an envelope error with its code, and renews its token before expiry
// and after a 401. Then, with a fake fetch: the 401 retry happens once only, and retries of one
// logical call reuse its Idempotency-Key.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestService, type TestService } from '../../central/test/support/harness';
import { PUP_A1, S, TENANT_A } from '../../central/test/support/fixtures';
import { LockerApiError, LockerClient, isIdempotentPath } from '../src/index';

const TOKEN_TTL = 120;

describe('LockerClient against the real service', () => {
  let t: TestService;
  let baseUrl: string;
  /** the client's clock (ms), moved by the tests independently of the service's ManualClock */
  let clientNow = Date.parse('2026-03-01T10:00:00.000Z');
  /** every request the client sent: path, method and the headers that matter here */
  const sent: { path: string; key: string | null; auth: string | null }[] = [];
  let client: LockerClient;
  let userUid = '';

  const countingFetch = (req: Request) => {
    sent.push({ path: new URL(req.url).pathname, key: req.headers.get('idempotency-key'), auth: req.headers.get('authorization') });
    return fetch(req);
  };

  beforeAll(async () => {
    t = await createTestService('sqlite', { config: { http: { host: '127.0.0.1', port: 0 }, auth: { tokenLifetimeSeconds: TOKEN_TTL } } });
    baseUrl = await t.svc.listen();
    client = new LockerClient({ baseUrl, clientId: TENANT_A.clientId, clientSecret: TENANT_A.clientSecret, fetch: countingFetch, now: () => clientNow });
  });
  afterAll(async () => {
    await t?.close();
  });

  it('gets a token with the client credentials and uses it', async () => {
    const pups = await client.call('/v1/PickupPoints/GetPickUpPoints', { pageNo: 1, pageSize: 10 });
    expect(pups.success).toBe(true);
    expect(pups.items.map((p) => p.pupUid)).toContain(PUP_A1);
    expect(client.tokensIssued).toBe(1);
    expect(sent[0]!.path).toBe('/connect/token');
    expect(sent[1]!.auth).toMatch(/^Bearer v1\./);
    expect(t.ctx.tokens.verify(sent[1]!.auth!.slice(7))).not.toBeNull();
  });

  it('creates an account (CreateOrGetAccount)', async () => {
    const acc = await client.call('/v1/Account/CreateOrGetAccount', { emailAddress: 'ann@example.test', firstName: 'Ann', lastName: 'Example', pickUpPointUid: PUP_A1 });
    expect(acc.userUid).toMatch(/^[0-9a-f]{32}$/);
    userUid = acc.userUid!;
    // a call that is not a create carries no Idempotency-Key
    expect(sent.at(-1)).toMatchObject({ path: '/v1/Account/CreateOrGetAccount', key: null });
  });

  it('creates a shipment with an Idempotency-Key; repeating the call with that key returns the same shipment and books once', async () => {
    const body = { ToUserUid: userUid, PupUid: PUP_A1, Dimension: S, AllowLargerLockers: true, AllowOverflowLockers: false, ReferenceNo: 'CLIENT-1' };
    const first = await client.call('/v1/Logistics/CreateLocalShipment', body);
    const auto = sent.at(-1)!;
    expect(auto.path).toBe('/v1/Logistics/CreateLocalShipment');
    expect(auto.key).toMatch(/^[0-9a-f-]{36}$/); // a fresh UUID, sent without being asked

    const key = 'order-CLIENT-2';
    const a = await client.call('/v1/Logistics/CreateLocalShipment', { ...body, ReferenceNo: 'CLIENT-2' }, { idempotencyKey: key });
    const b = await client.call('/v1/Logistics/CreateLocalShipment', { ...body, ReferenceNo: 'CLIENT-2' }, { idempotencyKey: key });
    expect(sent.slice(-2).map((s) => s.key)).toEqual([key, key]);
    expect(b.shipmentUid).toBe(a.shipmentUid);
    expect(b.lockerName).toBe(a.lockerName);
    expect(a.shipmentUid).not.toBe(first.shipmentUid);
    // one booking for the two calls: the service holds exactly one shipment with that reference
    const listed = await client.call('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 100, activeShipments: true });
    expect(listed.items.filter((s) => s.referenceNo === 'CLIENT-2').map((s) => s.shipmentUid)).toEqual([a.shipmentUid]);

    // the same key with another request: the service's IdempotencyKeyReused, as a typed error
    const err = await client.call('/v1/Logistics/CreateLocalShipment', { ...body, ReferenceNo: 'CLIENT-3' }, { idempotencyKey: key }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LockerApiError);
    expect((err as LockerApiError).code).toBe('IdempotencyKeyReused');
  });

  it('reads the shipment (GetShipments, GetShipmentAccessConfig)', async () => {
    const created = await client.call('/v1/Logistics/CreateLocalShipment', { ToUserUid: userUid, PupUid: PUP_A1, Dimension: S, AllowLargerLockers: true, AllowOverflowLockers: false, ReferenceNo: 'CLIENT-READ' });
    const got = await client.call('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 1, shipmentUid: created.shipmentUid });
    expect(got.totalItems).toBe(1);
    expect(got.items[0]).toMatchObject({ shipmentUid: created.shipmentUid, stateCode: 'ReadyForDropoff', referenceNo: 'CLIENT-READ' });
    const codes = await client.call('/v1/Logistics/GetShipmentAccessConfig', { shipmentUid: created.shipmentUid });
    expect(codes.items.some((i) => i.usage === 'DropOff' && i.type === 'Code')).toBe(true);
  });

  it('an envelope error surfaces as LockerApiError with its code, status, message and request id', async () => {
    const err = await client.call('/v1/Logistics/GetShipmentAccessConfig', { shipmentUid: 'ffff0000000000000000000000000000' }, { requestId: 'client-test-1' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LockerApiError);
    const e = err as LockerApiError;
    expect(e.code).toBe('InvalidShipment');
    expect(e.is('InvalidShipment')).toBe(true);
    expect(e.status).toBe(400);
    expect(e.message.length).toBeGreaterThan(0);
    expect(e.requestId).toBe('client-test-1');

    const invalid = await client.call('/v1/PickupPoints/GetLockers', { pupUid: PUP_A1, pageNo: 1, pageSize: 501 }).catch((x: unknown) => x);
    expect(invalid).toMatchObject({ code: 'InvalidRequest', status: 400 });
    expect((invalid as Error).message).toMatch(/pageSize/);

    // token errors too: a wrong secret is the OAuth code invalid_client
    const wrong = new LockerClient({ baseUrl, clientId: TENANT_A.clientId, clientSecret: 'not-the-secret' });
    await expect(wrong.call('/v1/PickupPoints/GetPickUpPoints', { pageNo: 1, pageSize: 1 })).rejects.toMatchObject({ code: 'invalid_client', status: 401 });
  });

  it('renews the token before it expires (client clock)', async () => {
    const before = client.tokensIssued;
    await client.call('/v1/PickupPoints/GetPickUpPoints', { pageNo: 1, pageSize: 1 });
    expect(client.tokensIssued).toBe(before); // still fresh
    const oldToken = await client.token();
    // 100 s of 120: within the renewal margin (60 s, at most half the lifetime), not yet expired
    clientNow += 100_000;
    t.clock.advance(100_000);
    await client.call('/v1/PickupPoints/GetPickUpPoints', { pageNo: 1, pageSize: 1 });
    expect(client.tokensIssued).toBe(before + 1);
    const tokenPath = sent.at(-2)!;
    expect(tokenPath.path).toBe('/connect/token');
    expect(sent.at(-1)!.auth).not.toBe(`Bearer ${oldToken}`);
    // the old one was still valid when it was replaced: no 401 was needed
    expect(t.ctx.tokens.verify(oldToken)).not.toBeNull();
  });

  it('renews the token once on a 401 (expired on the service, fresh on the client clock) and repeats the call', async () => {
    const token = await client.token();
    const before = client.tokensIssued;
    t.clock.advance((TOKEN_TTL + 1) * 1000); // the service's clock: the token expired; the client does not know
    expect(t.ctx.tokens.verify(token)).toBeNull();
    const n = sent.length;
    const shipments = await client.call('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 1, activeShipments: true });
    expect(shipments.success).toBe(true);
    expect(client.tokensIssued).toBe(before + 1);
    // the call (401), the token, the call again (200)
    expect(sent.slice(n).map((s) => s.path)).toEqual(['/v1/Logistics/GetShipments', '/connect/token', '/v1/Logistics/GetShipments']);
    expect(sent[n]!.auth).toBe(`Bearer ${token}`);
    expect(sent[n + 2]!.auth).not.toBe(`Bearer ${token}`);
  });

  it('the raw openapi-fetch client gets the same tokens and keys ({ data, error, response })', async () => {
    const r = await client.raw.POST('/v1/Logistics/CreateLocalShipment', { body: { ToUserUid: userUid, PupUid: PUP_A1, Dimension: S, AllowLargerLockers: true, AllowOverflowLockers: false } });
    expect(r.response.status).toBe(200);
    expect(r.data?.shipmentUid).toMatch(/^[0-9a-f]{32}$/);
    expect(sent.at(-1)!.key).toMatch(/^[0-9a-f-]{36}$/);
    const bad = await client.raw.POST('/v1/Logistics/GetShipmentAccessConfig', { body: { shipmentUid: 'ffff0000000000000000000000000000' } });
    expect(bad.error).toMatchObject({ success: false, error: 'InvalidShipment' });
  });
});

describe('LockerClient retries (fake service)', () => {
  const json = (status: number, body: unknown, headers: Record<string, string> = {}) => new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json', ...headers } });
  const tokenAnswer = () => json(200, { access_token: `tok-${Math.random()}`, token_type: 'Bearer', expires_in: 3600, scope: 'integration_api', success: true, error: null, message: null });
  const unauthorized = () => json(401, { success: false, error: 'Unauthorized', message: 'missing, invalid or expired access token' });

  it('a second 401 after renewing is final: one renewal, no loop, the Unauthorized code', async () => {
    const calls: string[] = [];
    const client = new LockerClient({
      baseUrl: 'http://locker.test',
      clientId: 'c',
      clientSecret: 's',
      fetch: async (req) => {
        const p = new URL(req.url).pathname;
        calls.push(p);
        return p === '/connect/token' ? tokenAnswer() : unauthorized();
      },
    });
    await expect(client.call('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 1 })).rejects.toMatchObject({ code: 'Unauthorized', status: 401 });
    expect(calls).toEqual(['/connect/token', '/v1/Logistics/GetShipments', '/connect/token', '/v1/Logistics/GetShipments']);
  });

  it('retries of one create (lost connection, 503, IdempotencyKeyInProgress, 401) all carry the same Idempotency-Key; the next call gets a new one', async () => {
    const keys: (string | null)[] = [];
    const bodies: string[] = [];
    const script = ['network', 503, 'inprogress', 401, 200];
    let i = 0;
    const client = new LockerClient({
      baseUrl: 'http://locker.test/prefix',
      clientId: 'c',
      clientSecret: 's',
      maxRetries: 3,
      sleep: async () => undefined,
      fetch: async (req) => {
        if (new URL(req.url).pathname.endsWith('/connect/token')) return tokenAnswer();
        keys.push(req.headers.get('idempotency-key'));
        bodies.push(await req.text());
        const step = script[i++ % script.length];
        if (step === 'network') throw new TypeError('fetch failed');
        if (step === 503) return json(503, { success: false, error: 'InternalError', message: 'shutting down' });
        if (step === 'inprogress') return json(400, { success: false, error: 'IdempotencyKeyInProgress', message: 'wait' }, { 'retry-after': '1' });
        if (step === 401) return unauthorized();
        return json(200, { success: true, error: null, message: null, shipmentUid: 'a'.repeat(32), pupUid: 'b'.repeat(32), lockerName: 'A1-01' });
      },
    });
    const body = { ToUserUid: 'u', PupUid: 'p', Dimension: S, AllowLargerLockers: true, AllowOverflowLockers: false };
    const r = await client.call('/v1/Logistics/CreateLocalShipment', body);
    expect(r.shipmentUid).toBe('a'.repeat(32));
    expect(keys).toHaveLength(5);
    expect(new Set(keys).size).toBe(1);
    expect(keys[0]).toMatch(/^[0-9a-f-]{36}$/);
    expect(new Set(bodies)).toEqual(new Set([JSON.stringify(body)])); // the same bytes every time
    i = script.length - 1; // answer 200 at once
    await client.call('/v1/Logistics/CreateLocalShipment', body);
    expect(keys[5]).not.toBe(keys[0]);
  });

  it('a call without a key is not retried after a lost connection (it may have run)', async () => {
    let n = 0;
    const client = new LockerClient({
      baseUrl: 'http://locker.test',
      clientId: 'c',
      clientSecret: 's',
      sleep: async () => undefined,
      fetch: async (req) => {
        if (new URL(req.url).pathname === '/connect/token') return tokenAnswer();
        n++;
        throw new TypeError('fetch failed');
      },
    });
    await expect(client.call('/v1/Account/SetAccountDetails', { userUid: 'u', firstName: 'A' } as never)).rejects.toThrow('fetch failed');
    expect(n).toBe(1);
  });

  it('an answer without the envelope (a proxy page) is UnexpectedResponse', async () => {
    const client = new LockerClient({
      baseUrl: 'http://locker.test',
      clientId: 'c',
      clientSecret: 's',
      fetch: async (req) => (new URL(req.url).pathname === '/connect/token' ? tokenAnswer() : new Response('<html>Bad gateway</html>', { status: 502, headers: { 'content-type': 'text/html' } })),
    });
    await expect(client.call('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 1 })).rejects.toMatchObject({ code: 'UnexpectedResponse', status: 502 });
  });

  it('isIdempotentPath: the create and cancel calls, behind a prefix too; not the reads or CreateOrGetAccount', () => {
    expect(isIdempotentPath('/v1/Logistics/CreateLocalShipment')).toBe(true);
    expect(isIdempotentPath('/api/v1/Logistics/CreateCollectOnlyShipmentAsCollectByUser')).toBe(true);
    expect(isIdempotentPath('/v1/Logistics/CancelShipment')).toBe(true);
    expect(isIdempotentPath('/v1/Account/CreateAccount')).toBe(true);
    expect(isIdempotentPath('/v1/Account/CreateOrGetAccount')).toBe(false);
    expect(isIdempotentPath('/v1/Logistics/GetShipments')).toBe(false);
  });
});
