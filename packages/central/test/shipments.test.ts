// CreateLocalShipment / CreateCollectOnlyShipment field rules, SimulateLockerAccess, audit trail,
// outbox events, tenant isolation. Both storage engines.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { L, M, PUP_A1, PUP_A2, PUP_B1, S, UNKNOWN_UID } from './support/fixtures';
import { addUser, booking, codes, dropOff, fails, lockerHolder, lockerOf, ok, pickUp, shipment, simulate, stateOf, transitions } from './shipments-helpers';

describeEngines('shipments: create, simulate, audit', (engine) => {
  let t: TestService;
  let user1: string;
  let user2: string;
  let userB: string;
  let dispatcher: string;
  beforeAll(async () => {
    t = await createTestService(engine);
    user1 = await addUser(t, PUP_A1);
    user2 = await addUser(t, PUP_A1);
    userB = await addUser(t, PUP_B1);
    const p = await t.app.principals.get((await t.ctx.db.kysely.selectFrom('tenants').select('uid').where('client_id', '=', 'tenant-a').executeTakeFirstOrThrow()).uid);
    dispatcher = p!.mainAccountUid;
  });
  afterAll(async () => t?.close());

  const create = (body: Record<string, unknown>) => t.post('/v1/Logistics/CreateLocalShipment', body);
  const cancel = (uid: string) => ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: uid }));

  it('creates a local shipment: single-shipment shape, ReadyForDropoff, smallest fitting locker', async () => {
    const b = await ok(create({ FromUserUid: user1, ToUserUid: user2, ...booking(), ReferenceNo: 'R1', Description: 'box' }));
    expect(b).toEqual({ success: true, error: null, message: null, shipmentUid: expect.stringMatching(/^[0-9a-f]{32}$/), pupUid: PUP_A1, lockerName: 'A1-01' });
    const s = await shipment(t, b.shipmentUid);
    expect(s).toMatchObject({ typeCode: 'LocalPupShipment', stateCode: 'ReadyForDropoff', fromUserUid: user1, toUserUid: user2, referenceNo: 'R1', description: 'box', bookedPupUid: PUP_A1, bookedPupName: 'Alpha Station', bookedLockerName: 'A1-01', swapsShipmentUid: null });
    expect(s).not.toHaveProperty('referenceCaseNo');
    expect(s.dateCreated).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}$/);
    await cancel(b.shipmentUid);
  });

  it('fills the missing side with the Dispatcher Main Account', async () => {
    const a = await ok(create({ ToUserUid: user1, ...booking() }));
    expect(await shipment(t, a.shipmentUid)).toMatchObject({ fromUserUid: dispatcher, toUserUid: user1 });
    const b = await ok(create({ FromUserUid: user1, ...booking() }));
    expect(await shipment(t, b.shipmentUid)).toMatchObject({ fromUserUid: user1, toUserUid: dispatcher });
    await cancel(a.shipmentUid);
    await cancel(b.shipmentUid);
  });

  it('requires one of FromUserUid/ToUserUid', async () => {
    await fails(create({ ...booking() }), 'InvalidRequest');
    await fails(create({ ...booking(), IsReceiverDelayed: true }), 'InvalidRequest');
  });

  it('delayed receiver: ToUserUid must not be set; the shipment has no To user until SetShipmentReceiver', async () => {
    await fails(create({ FromUserUid: user1, ToUserUid: user2, IsReceiverDelayed: true, ...booking() }), 'InvalidRequest');
    const b = await ok(create({ FromUserUid: user1, IsReceiverDelayed: true, ...booking() }));
    const s = await shipment(t, b.shipmentUid);
    expect(s.fromUserUid).toBe(user1);
    expect(s).not.toHaveProperty('toUserUid');
    expect(s).not.toHaveProperty('toUserName');
    // dropped off without a receiver -> WaitForReceiver; setting one -> ReadyForPickup
    await dropOff(t, b.shipmentUid);
    expect(await stateOf(t, b.shipmentUid)).toBe('WaitForReceiver');
    await ok(t.post('/v1/Logistics/SetShipmentReceiver', { shipmentUid: b.shipmentUid, toUserUid: user2 }));
    expect(await stateOf(t, b.shipmentUid)).toBe('ReadyForPickup');
    await pickUp(t, b.shipmentUid);
    expect(await stateOf(t, b.shipmentUid)).toBe('PickedUp');
  });

  it('rejects user uids the tenant cannot manage with InvalidUserUid', async () => {
    await fails(create({ FromUserUid: userB, ...booking() }), 'InvalidUserUid');
    await fails(create({ ToUserUid: UNKNOWN_UID, ...booking() }), 'InvalidUserUid');
  });

  it('rejects a PUP of another tenant (InvalidPupUid) and dimensions below 1 cm (InvalidRequest naming the field)', async () => {
    await fails(create({ ToUserUid: user1, ...booking({ PupUid: PUP_B1 }) }), 'InvalidPupUid');
    const r = await fails(create({ ToUserUid: user1, ...booking({ Dimension: { width: 0.5, height: 10, length: 10 } }) }), 'InvalidRequest');
    expect(r.message).toMatch(/Dimension\.width/);
    await fails(create({ ToUserUid: user1, ...booking({ AllowLargerLockers: undefined }) }), 'InvalidRequest');
  });

  it('accepts camelCase keys as well (pupUid)', async () => {
    const b = await ok(create({ toUserUid: user1, pupUid: PUP_A1, dimension: S, allowLargerLockers: true, allowOverflowLockers: false }));
    await cancel(b.shipmentUid);
  });

  it('creates a collect-only shipment by user and by dispatcher', async () => {
    const u = await ok(t.post('/v1/Logistics/CreateCollectOnlyShipment', { ...booking(), KeepBookedAfterPickUp: false, ToUserUid: user1, Details: { ReferenceNo: 'C1' } }));
    expect(await shipment(t, u.shipmentUid)).toMatchObject({ typeCode: 'CollectOnlyShipment', toUserUid: user1, referenceNo: 'C1', stateCode: 'ReadyForDropoff' });
    const d = await ok(t.post('/v1/Logistics/CreateCollectOnlyShipment', { ...booking(), KeepBookedAfterPickUp: false }));
    const s = await shipment(t, d.shipmentUid);
    expect(s.toUserUid).toBe(dispatcher);
    expect(s).not.toHaveProperty('fromUserUid');
    await fails(t.post('/v1/Logistics/CreateCollectOnlyShipment', { ...booking() }), 'InvalidRequest'); // KeepBookedAfterPickUp required
    await cancel(u.shipmentUid);
    await cancel(d.shipmentUid);
  });

  it('access codes: 6-digit PINs and >=128-bit Qr for drop-off and pick-up, one LinkCode, all distinct', async () => {
    const b = await ok(create({ ToUserUid: user1, ...booking() }));
    const c = await codes(t, b.shipmentUid);
    expect(c.dropPin).toMatch(/^\d{6}$/);
    expect(c.pickPin).toMatch(/^\d{6}$/);
    expect(c.dropPin).not.toBe(c.pickPin);
    expect(Buffer.from(c.dropQr!, 'base64url').length).toBeGreaterThanOrEqual(16);
    expect(Buffer.from(c.pickQr!, 'base64url').length).toBeGreaterThanOrEqual(16);
    expect(c.links).toHaveLength(1);
    const only = await ok(t.post('/v1/Logistics/GetShipmentAccessConfig', { shipmentUid: b.shipmentUid, usage: 'PickUp' }));
    expect(only.items.map((i: any) => `${i.usage}/${i.type}`)).toEqual(['PickUp/Code', 'PickUp/Qr']);
    await cancel(b.shipmentUid);
    // after cancel no drop-off / pick-up code is valid any more
    const after = await codes(t, b.shipmentUid);
    expect(after.dropPin).toBeUndefined();
    expect(after.pickPin).toBeUndefined();
  });

  it('PINs are unique among the valid codes of a PUP (the partial unique index refuses a duplicate)', async () => {
    const a = await ok(create({ ToUserUid: user1, ...booking() }));
    const c = await codes(t, a.shipmentUid);
    const row = await t.ctx.db.kysely.selectFrom('access_codes').selectAll().where('shipment_uid', '=', a.shipmentUid).where('usage', '=', 'PickUp').where('type', '=', 'Code').executeTakeFirstOrThrow();
    await expect(t.ctx.db.kysely.insertInto('access_codes').values({ ...row, uid: 'dup0000000000000000000000000000a', value: c.dropPin! }).execute()).rejects.toThrow();
    await cancel(a.shipmentUid);
  });

  it('SimulateLockerAccess: drop-off then pick-up, locker released, audit trail with causes, Qr works too', async () => {
    const b = await ok(create({ FromUserUid: user1, ToUserUid: user2, ...booking() }));
    const locker = await lockerOf(t, b.shipmentUid);
    expect(await lockerHolder(t, locker!)).toBe(b.shipmentUid);
    const c = await codes(t, b.shipmentUid);
    // the pick-up code does nothing before the drop-off
    await fails(simulate(t, PUP_A1, b.lockerName, c.pickPin!), 'InvalidShipmentState');
    await fails(simulate(t, PUP_A1, b.lockerName, '000000x'), 'InvalidAccessCode');
    await fails(simulate(t, PUP_A1, 'A1-02', c.dropPin!), 'InvalidAccessCode'); // wrong locker
    await fails(simulate(t, PUP_B1, 'B1-01', c.dropPin!), 'InvalidPupUid');
    await ok(simulate(t, PUP_A1, b.lockerName, c.dropQr!));
    expect(await stateOf(t, b.shipmentUid)).toBe('ReadyForPickup');
    await fails(simulate(t, PUP_A1, b.lockerName, c.dropPin!), 'InvalidAccessCode'); // used up
    t.clock.advance(60_000);
    await ok(simulate(t, PUP_A1, b.lockerName, c.pickPin!));
    const s = await shipment(t, b.shipmentUid);
    expect(s.stateCode).toBe('PickedUp');
    expect(s.bookedLockerName).toBeNull();
    expect(await lockerHolder(t, locker!)).toBeNull();
    const tr = await transitions(t, b.shipmentUid);
    expect(tr.map((x) => [x.from_state, x.to_state, x.cause, x.detail])).toEqual([
      [null, 'ReadyForDropoff', 'api', 'CreateLocalShipment'],
      ['ReadyForDropoff', 'ReadyForPickup', 'simulate', `SimulateLockerAccess ${b.lockerName}`],
      ['ReadyForPickup', 'PickedUp', 'simulate', `SimulateLockerAccess ${b.lockerName}`],
    ]);
    expect(tr[2]!.at > tr[1]!.at).toBe(true);
    const h = await ok(t.post('/v1/Logistics/GetShipmentHistory', { shipmentUid: b.shipmentUid }));
    expect(h.items.map((x: any) => x.toState)).toEqual(['ReadyForDropoff', 'ReadyForPickup', 'PickedUp']);
  });

  it('queues one ShipmentStatusUpdate per state entered, numbered by a per-shipment sequence', async () => {
    const b = await ok(create({ FromUserUid: user1, ToUserUid: user2, ...booking() }));
    await dropOff(t, b.shipmentUid);
    const rows = await t.ctx.db.kysely.selectFrom('callback_outbox').select(['sequence', 'payload']).where('shipment_uid', '=', b.shipmentUid).orderBy('sequence').execute();
    expect(rows.map((r) => Number(r.sequence))).toEqual([1, 2]);
    expect(rows.map((r) => JSON.parse(r.payload).message.stateCode)).toEqual(['ReadyForDropoff', 'ReadyForPickup']);
    await cancel(b.shipmentUid);
  });

  it('SimulateLockerAccess is unknown (404 NotFound) on production', async () => {
    const p = await createTestService(engine, { config: { environment: 'production' } });
    try {
      const r = await p.post('/v1/Logistics/SimulateLockerAccess', { pupUid: PUP_A1, lockerName: 'A1-01', pinCode: '123456' });
      expect(r.status).toBe(404);
      expect(r.body.error).toBe('NotFound');
    } finally {
      await p.close();
    }
  });

  describe('tenant isolation', () => {
    it("another tenant's shipment behaves as unknown everywhere", async () => {
      const b = await ok(create({ ToUserUid: user1, ...booking() }));
      const tb = await t.token('tenant-b');
      const uid = b.shipmentUid;
      const list = await ok(t.post('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 10, shipmentUid: uid }, tb));
      expect(list.items).toEqual([]);
      expect(list.totalItems).toBe(0);
      const all = await ok(t.post('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 500, activeShipments: true }, tb));
      expect(all.items.map((i: any) => i.shipmentUid)).not.toContain(uid);
      for (const [path, body] of [
        ['CancelShipment', { shipmentUid: uid }],
        ['SetShipmentDetails', { shipmentUid: uid, Description: 'x' }],
        ['SetShipmentReceiver', { shipmentUid: uid, removeReceiver: true }],
        ['AddShipmentObject', { shipmentUid: uid, details: { weight: 1, count: 1, dimension: S } }],
        ['RemoveShipmentObject', { shipmentUid: uid, shipmentObjectUid: UNKNOWN_UID }],
        ['UnlockShipmentLocker', { shipmentUid: uid }],
        ['GetShipmentObjects', { shipmentUid: uid }],
        ['GetShipmentSwaps', { shipmentUid: uid, pageNo: 1, pageSize: 10 }],
        ['GetShipmentAccessConfig', { shipmentUid: uid }],
        ['GetShipmentHistory', { shipmentUid: uid }],
        ['CreateLocalShipment', { ToUserUid: userB, PupUid: PUP_B1, Dimension: S, AllowLargerLockers: true, AllowOverflowLockers: false, SwapsShipmentUid: uid, IsReceiverDelayed: false }],
      ] as const) {
        await fails(t.post(`/v1/Logistics/${path}`, body, tb), 'InvalidShipment');
      }
      // and a drop-off code of tenant A does nothing for tenant B (its own PUP has no such code)
      const c = await codes(t, uid);
      await fails(simulate(t, PUP_A1, b.lockerName, c.dropPin!, tb), 'InvalidPupUid');
      expect(await stateOf(t, uid)).toBe('ReadyForDropoff');
      await cancel(uid);
    });
  });

  it('M and L packages get M and L lockers; XL-only fits the size-less locker', async () => {
    const m = await ok(create({ ToUserUid: user1, ...booking({ Dimension: M }) }));
    expect(m.lockerName).toBe('A1-03');
    const l = await ok(create({ ToUserUid: user1, ...booking({ Dimension: L }) }));
    expect(l.lockerName).toBe('A1-05');
    const xl = await ok(create({ ToUserUid: user1, ...booking({ Dimension: { width: 55, height: 55, length: 55 } }) }));
    expect(xl.lockerName).toBe('A1-07');
    for (const x of [m, l, xl]) await cancel(x.shipmentUid);
    void PUP_A2;
  });
});
