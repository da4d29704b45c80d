// verifyCallback against real callbacks: the service (in process, listening on a free port, its
// delivery worker running) delivers a ShipmentStatusUpdate signed by its own signer to a real HTTP
// receiver; the helper accepts it as received and rejects every tampered variant (body, signature,
// timestamp, key, the API document's X-Hmac-Sha256 header, ApiKey mode's X-Api-Key) and a stale one.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestService, type TestService } from '../../central/test/support/harness';
import { CallbackReceiver, waitFor, type Received } from '../../central/test/support/receiver';
import { PUP_A1, S, TENANT_A } from '../../central/test/support/fixtures';
import { CALLBACK_WORKER_NAME } from '../../central/src/callbacks/worker';
import { authHeaders } from '../../central/src/callbacks/signing';
import { LockerClient, verifyCallback } from '../src/index';

describe('verifyCallback with callbacks the service signed and delivered', () => {
  let t: TestService;
  let rx: CallbackReceiver;
  let authKey: string;
  let got: Received;
  let shipmentUid: string;
  /** the receiver's clock: the service's (manual) clock, as a receiver in sync with it would have */
  const now = () => t.clock.now().getTime();

  beforeAll(async () => {
    t = await createTestService('sqlite', { config: { http: { host: '127.0.0.1', port: 0 }, callbacks: { allowPrivateNetworks: true, pollIntervalMs: 20 } } });
    const baseUrl = await t.svc.listen();
    rx = new CallbackReceiver();
    await rx.start();
    const client = new LockerClient({ baseUrl, clientId: TENANT_A.clientId, clientSecret: TENANT_A.clientSecret });
    const reg = await client.call('/v1/Platform/ConfigureCallback', { url: rx.url, authType: 'HMAC' });
    authKey = reg.authKey!;
    expect(authKey).toMatch(/^[0-9a-f]{64}$/);
    await t.ctx.workers.find((w) => w.name === CALLBACK_WORKER_NAME)!.start();
    const user = await client.call('/v1/Account/CreateOrGetAccount', { emailAddress: 'cb@example.test', firstName: 'Cee', lastName: 'Bee', pickUpPointUid: PUP_A1 });
    const created = await client.call('/v1/Logistics/CreateLocalShipment', { ToUserUid: user.userUid!, PupUid: PUP_A1, Dimension: S, AllowLargerLockers: true, AllowOverflowLockers: false, ReferenceNo: 'CB-1' });
    shipmentUid = created.shipmentUid;
    const first = () => rx.requests.find((r) => r.json?.message?.shipmentUid === shipmentUid);
    await waitFor(() => !!first(), 'the first status callback');
    got = first()!;
  });
  afterAll(async () => {
    await rx?.close();
    await t?.close();
  });

  it('accepts the callback as delivered (raw body and headers as received) and returns its message', () => {
    expect(got.headers['x-signature']).toMatch(/^t=\d+,v1=[0-9a-f]{64}$/);
    const r = verifyCallback({ headers: got.headers, rawBody: got.raw, authKey, now });
    expect(r).toMatchObject({ ok: true, body: { messageType: 'ShipmentStatusUpdate', message: { shipmentUid, sequence: 1, referenceNo: 'CB-1' } } });
    // bytes and a fetch Headers work as well
    const h = new Headers(Object.entries(got.headers).map(([k, v]): [string, string] => [k, String(v)]));
    expect(verifyCallback({ headers: h, rawBody: new TextEncoder().encode(got.raw), authKey, now }).ok).toBe(true);
  });

  it('rejects a tampered body, signature, key or header', () => {
    const tampered = got.raw.replace('"CB-1"', '"CB-2"');
    expect(tampered).not.toBe(got.raw);
    expect(verifyCallback({ headers: got.headers, rawBody: tampered, authKey, now })).toEqual({ ok: false, reason: 'bad-signature' });
    // re-serialized JSON (same content, other bytes) is not the signed body either
    expect(verifyCallback({ headers: got.headers, rawBody: JSON.stringify(got.json, null, 1), authKey, now })).toEqual({ ok: false, reason: 'bad-signature' });
    const sig = String(got.headers['x-signature']);
    const flipped = sig.slice(0, -1) + (sig.endsWith('0') ? '1' : '0');
    expect(verifyCallback({ headers: { ...got.headers, 'x-signature': flipped }, rawBody: got.raw, authKey, now })).toEqual({ ok: false, reason: 'bad-signature' });
    // the timestamp is signed: moving it (within the window) breaks the signature
    const t0 = Number(/t=(\d+)/.exec(sig)![1]);
    expect(verifyCallback({ headers: { ...got.headers, 'x-signature': sig.replace(`t=${t0}`, `t=${t0 + 1}`) }, rawBody: got.raw, authKey, now })).toEqual({ ok: false, reason: 'bad-signature' });
    expect(verifyCallback({ headers: got.headers, rawBody: got.raw, authKey: authKey.replace(/.$/, 'x'), now })).toEqual({ ok: false, reason: 'bad-signature' });
    expect(verifyCallback({ headers: { ...got.headers, 'x-hmac-sha256': 'ab'.repeat(32) }, rawBody: got.raw, authKey, now })).toEqual({ ok: false, reason: 'bad-hmac-header' });
    const { 'x-signature': _drop, ...unsigned } = got.headers;
    expect(verifyCallback({ headers: unsigned, rawBody: got.raw, authKey, now })).toEqual({ ok: false, reason: 'missing-signature' });
    expect(verifyCallback({ headers: { ...got.headers, 'x-signature': 'v1=abc' }, rawBody: got.raw, authKey, now })).toEqual({ ok: false, reason: 'malformed-signature' });
  });

  it('rejects a stale or future timestamp (a replay) outside the tolerance, accepts within it', () => {
    const at = (offsetSeconds: number) => () => now() + offsetSeconds * 1000;
    expect(verifyCallback({ headers: got.headers, rawBody: got.raw, authKey, now: at(299) }).ok).toBe(true);
    expect(verifyCallback({ headers: got.headers, rawBody: got.raw, authKey, now: at(301) })).toEqual({ ok: false, reason: 'stale-timestamp' });
    expect(verifyCallback({ headers: got.headers, rawBody: got.raw, authKey, now: at(-301) })).toEqual({ ok: false, reason: 'stale-timestamp' });
    expect(verifyCallback({ headers: got.headers, rawBody: got.raw, authKey, now: at(3600), toleranceSeconds: 7200 }).ok).toBe(true);
  });

  it('ApiKey mode (the service signer): accepts the signed message, rejects a wrong X-Api-Key', () => {
    const timestamp = Math.floor(now() / 1000);
    const headers = authHeaders({ authType: 'ApiKey', authKey, shipmentUid, body: got.raw, timestamp });
    expect(Object.keys(headers).sort()).toEqual(['x-api-key', 'x-signature']);
    expect(verifyCallback({ headers, rawBody: got.raw, authKey, now }).ok).toBe(true);
    expect(verifyCallback({ headers: { ...headers, 'x-api-key': `${authKey}0` }, rawBody: got.raw, authKey, now })).toEqual({ ok: false, reason: 'bad-api-key' });
  });
});
