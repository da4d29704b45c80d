// End to end: shipments made and moved through the API (CreateLocalShipment, SimulateLockerAccess,
// CancelShipment) reach a real HTTP receiver as signed ShipmentStatusUpdate callbacks, in order;
// Idempotency-Key on the real create and cancel calls. Both engines.
import crypto from 'node:crypto';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { CallbackReceiver, waitFor } from './support/receiver';
import { CALLBACK_WORKER_NAME } from '../src/callbacks/worker';
import { newUid, toDbTime } from '../src/ids';
import { PUP_A1, S } from './support/fixtures';

async function ok(p: Promise<{ status: number; body: any }>): Promise<any> {
  const r = await p;
  if (r.status !== 200 || r.body.success !== true) throw new Error(`expected success, got ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
}

async function addUser(t: TestService): Promise<string> {
  const uid = newUid();
  const now = toDbTime(t.clock.now());
  const mail = `cb-${uid.slice(0, 10)}@example.test`;
  await t.ctx.db.kysely
    .insertInto('accounts')
    .values({ uid, user_name: mail, user_name_key: mail, email_address: mail, email_key: mail, first_name: 'C', last_name: 'B', main_pup_uid: PUP_A1, created_at: now, updated_at: now })
    .execute();
  await t.ctx.db.kysely.insertInto('account_pups').values({ account_uid: uid, pup_uid: PUP_A1 }).execute();
  return uid;
}

describeEngines('callbacks end to end', (engine) => {
  let t: TestService;
  let rx: CallbackReceiver;
  let authKey: string;

  beforeAll(async () => {
    t = await createTestService(engine, { config: { callbacks: { allowPrivateNetworks: true, pollIntervalMs: 20 } } });
    rx = new CallbackReceiver();
    await rx.start();
    authKey = (await ok(t.post('/v1/Platform/ConfigureCallback', { url: rx.url, authType: 'HMAC' }))).authKey;
    await t.ctx.workers.find((w) => w.name === CALLBACK_WORKER_NAME)!.start();
  });
  afterEach(() => {
    rx.requests.length = 0;
  });
  afterAll(async () => {
    await rx?.close();
    await t?.close();
  });

  const create = (to: string, key?: string, over: Record<string, unknown> = {}) =>
    t.app
      .inject({
        method: 'POST',
        url: '/v1/Logistics/CreateLocalShipment',
        payload: JSON.stringify({ ToUserUid: to, PupUid: PUP_A1, Dimension: S, AllowLargerLockers: true, AllowOverflowLockers: false, ReferenceNo: 'ORDER-1', ...over }),
        headers: { 'content-type': 'application/json', authorization: `Bearer ${tokenA}`, ...(key ? { 'idempotency-key': key } : {}) },
      })
      .then((r) => ({ status: r.statusCode, body: r.json(), raw: r.body, headers: r.headers }));
  let tokenA = '';
  const pins = async (shipmentUid: string) => {
    const items = (await ok(t.post('/v1/Logistics/GetShipmentAccessConfig', { shipmentUid }))).items as { usage: string; type: string; value: string }[];
    return { drop: items.find((i) => i.usage === 'DropOff' && i.type === 'Code')?.value, pick: items.find((i) => i.usage === 'PickUp' && i.type === 'Code')?.value };
  };
  const received = (ship: string) => rx.delivered.filter((b) => b.message.shipmentUid === ship);

  it('create, drop-off, pick-up: the receiver gets each state in order, signed, with sequence 1..n', async () => {
    tokenA = await t.token();
    const user = await addUser(t);
    const c = await create(user);
    expect(c.status).toBe(200);
    const ship = c.body.shipmentUid as string;
    const p = await pins(ship);
    await ok(t.post('/v1/Logistics/SimulateLockerAccess', { pupUid: c.body.pupUid, lockerName: c.body.lockerName, pinCode: p.drop }));
    await ok(t.post('/v1/Logistics/SimulateLockerAccess', { pupUid: c.body.pupUid, lockerName: c.body.lockerName, pinCode: p.pick }));
    await waitFor(() => received(ship).length >= 3, 'three status updates');
    const msgs = received(ship).map((b) => b.message);
    expect(msgs.map((m) => [m.stateCode, m.sequence])).toEqual([
      ['ReadyForDropoff', 1],
      ['ReadyForPickup', 2],
      ['PickedUp', 3],
    ]);
    expect(msgs[0]).toMatchObject({ shipmentType: 'LocalPupShipment', referenceNo: 'ORDER-1', pupUid: PUP_A1, toUserUid: user, stateStart: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?$/) });
    for (const r of rx.requests.filter((x) => x.json?.message?.shipmentUid === ship)) {
      const [tPart, vPart] = String(r.headers['x-signature']).split(',');
      const ts = tPart!.slice(2);
      expect(vPart!.slice(3)).toBe(crypto.createHmac('sha256', authKey).update(`${ts}.${r.raw}`).digest('hex'));
      expect(r.headers['x-hmac-sha256']).toBe(crypto.createHmac('sha256', authKey).update(ship).digest('hex'));
      expect(r.headers['x-event-id']).toBe(r.json.message.eventId);
    }
  });

  it('CancelShipment emits Cancelled after ReadyForDropoff', async () => {
    const user = await addUser(t);
    const ship = (await ok(create(user))).shipmentUid as string;
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: ship }));
    await waitFor(() => received(ship).length >= 2, 'two status updates');
    expect(received(ship).map((b) => b.message.stateCode)).toEqual(['ReadyForDropoff', 'Cancelled']);
  });

  it('Idempotency-Key on CreateLocalShipment: the repeat returns the same shipment and creates (and announces) nothing new', async () => {
    const user = await addUser(t);
    const key = `order-${newUid()}`;
    const totals = async () => {
      const s = await t.ctx.db.kysely.selectFrom('shipments').select((eb) => eb.fn.countAll().as('n')).executeTakeFirstOrThrow();
      const o = await t.ctx.db.kysely.selectFrom('callback_outbox').select((eb) => eb.fn.countAll().as('n')).executeTakeFirstOrThrow();
      const l = await t.ctx.db.kysely.selectFrom('lockers').select((eb) => eb.fn.countAll().as('n')).where('booked_shipment_uid', 'is not', null).executeTakeFirstOrThrow();
      return { shipments: Number(s.n), outbox: Number(o.n), bookedLockers: Number(l.n) };
    };
    const a = await create(user, key);
    const afterFirst = await totals();
    const b = await create(user, key);
    expect(a.status).toBe(200);
    expect(b.raw).toBe(a.raw);
    expect(b.headers['idempotent-replayed']).toBe('true');
    // nothing new anywhere: no second shipment, no second locker, no second announcement
    expect(await totals()).toEqual(afterFirst);
    const count = await t.ctx.db.kysely.selectFrom('callback_outbox').select((eb) => eb.fn.countAll().as('n')).where('shipment_uid', '=', a.body.shipmentUid).executeTakeFirstOrThrow();
    expect(Number(count.n)).toBe(1);
    const other = await create(user, key, { ReferenceNo: 'ORDER-2' });
    expect(other.status).toBe(400);
    expect(other.body.error).toBe('IdempotencyKeyReused');
  });

  it('Idempotency-Key on CancelShipment: the repeat answers as the first and announces Cancelled once', async () => {
    const user = await addUser(t);
    const ship = (await ok(create(user))).shipmentUid as string;
    const cancel = () =>
      t.app.inject({ method: 'POST', url: '/v1/Logistics/CancelShipment', payload: JSON.stringify({ shipmentUid: ship }), headers: { 'content-type': 'application/json', authorization: `Bearer ${tokenA}`, 'idempotency-key': `cancel-${ship}` } });
    const a = await cancel();
    const b = await cancel();
    expect(a.statusCode).toBe(200);
    expect(b.body).toBe(a.body);
    expect(b.headers['idempotent-replayed']).toBe('true');
    const rows = await t.ctx.db.kysely.selectFrom('callback_outbox').select('payload').where('shipment_uid', '=', ship).execute();
    expect(rows.map((r) => JSON.parse(r.payload).message.stateCode).sort()).toEqual(['Cancelled', 'ReadyForDropoff']);
  });
});
