// Managing shipments: details, objects and new access codes, receiver, cancel, unlock (all five
// error codes through a FakeTerminalGateway; UnlockFailed without a terminal). Both engines.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { PUP_A1, S, UNKNOWN_UID } from './support/fixtures';
import { FakeTerminalGateway } from '../src/terminals/gateway';
import { addUser, booking, codes, dropOff, fails, lockerHolder, lockerOf, ok, pickUp, shipment, simulate, stateOf } from './shipments-helpers';

describeEngines('shipments: managing', (engine) => {
  let t: TestService;
  let term: FakeTerminalGateway;
  let user: string;
  let user2: string;
  beforeAll(async () => {
    term = new FakeTerminalGateway();
    t = await createTestService(engine, { terminals: term });
    user = await addUser(t, PUP_A1);
    user2 = await addUser(t, PUP_A1);
  });
  afterAll(async () => t?.close());

  const create = async (over: Record<string, unknown> = {}) => (await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking(), ...over }))).shipmentUid as string;
  const cancel = (uid: string) => ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: uid }));
  const obj = { referenceNo: 'O-1', description: 'drill', weight: 1200, count: 2, dimension: { width: 10, height: 10, length: 30 } };

  it('SetShipmentDetails overrides the three values (absent ones become empty)', async () => {
    const uid = await create({ ReferenceNo: 'A', ReferenceCaseNo: 'B', Description: 'C' });
    await ok(t.post('/v1/Logistics/SetShipmentDetails', { shipmentUid: uid, Description: 'new', ReferenceNo: 'R2' }));
    const s = await shipment(t, uid);
    expect(s).toMatchObject({ description: 'new', referenceNo: 'R2' });
    expect(s).not.toHaveProperty('referenceCaseNo');
    await fails(t.post('/v1/Logistics/SetShipmentDetails', { shipmentUid: UNKNOWN_UID, Description: 'x' }), 'InvalidShipment');
    await cancel(uid);
  });

  it('AddShipmentObject / GetShipmentObjects / RemoveShipmentObject', async () => {
    const uid = await create();
    const a = await ok(t.post('/v1/Logistics/AddShipmentObject', { shipmentUid: uid, details: obj }));
    expect(a).toMatchObject({ shipmentUid: uid, shipmentObjectUid: expect.stringMatching(/^[0-9a-f]{32}$/) });
    const b = await ok(t.post('/v1/Logistics/AddShipmentObject', { shipmentUid: uid, details: { ...obj, referenceNo: 'O-2', objectTypeUid: 'type-x' } }));
    const list = await ok(t.post('/v1/Logistics/GetShipmentObjects', { shipmentUid: uid }));
    expect(list).toMatchObject({ shipmentUid: uid, totalItems: 2, totalPages: 1, pageNo: 1 });
    expect(list.items[0]).toEqual({ shipmentObjectUid: a.shipmentObjectUid, referenceNo: 'O-1', description: 'drill', weight: 1200, count: 2, dimension: obj.dimension });
    expect(list.items[1]).toMatchObject({ shipmentObjectUid: b.shipmentObjectUid, objectTypeUid: 'type-x' });
    await fails(t.post('/v1/Logistics/AddShipmentObject', { shipmentUid: uid, details: { ...obj, weight: 1.5 } }), 'InvalidRequest');
    // stored as 32-bit integers on both engines: larger is a clear InvalidRequest, not a 500
    for (const big of [{ weight: 2 ** 31 }, { count: 2 ** 31 }, { weight: Number.MAX_SAFE_INTEGER }]) {
      const r = await fails(t.post('/v1/Logistics/AddShipmentObject', { shipmentUid: uid, details: { ...obj, ...big } }), 'InvalidRequest');
      expect(r.message).toMatch(/weight|count/);
    }
    const maxed = await ok(t.post('/v1/Logistics/AddShipmentObject', { shipmentUid: uid, details: { ...obj, weight: 2 ** 31 - 1, count: 2 ** 31 - 1 } }));
    await ok(t.post('/v1/Logistics/RemoveShipmentObject', { shipmentUid: uid, shipmentObjectUid: maxed.shipmentObjectUid }));
    await fails(t.post('/v1/Logistics/AddShipmentObject', { shipmentUid: uid, details: { ...obj, dimension: { width: 0, height: 1, length: 1 } } }), 'InvalidRequest');
    const r = await ok(t.post('/v1/Logistics/RemoveShipmentObject', { shipmentUid: uid, shipmentObjectUid: a.shipmentObjectUid }));
    expect(r).toMatchObject({ shipmentUid: uid, shipmentObjectUid: a.shipmentObjectUid });
    await fails(t.post('/v1/Logistics/RemoveShipmentObject', { shipmentUid: uid, shipmentObjectUid: a.shipmentObjectUid }), 'InvalidRequest');
    expect((await ok(t.post('/v1/Logistics/GetShipmentObjects', { shipmentUid: uid }))).totalItems).toBe(1);
    await cancel(uid);
    await fails(t.post('/v1/Logistics/AddShipmentObject', { shipmentUid: uid, details: obj }), 'InvalidShipmentState');
  });

  it('changePickUpAccess / changeDropOffAccess make new codes; the old ones stop working', async () => {
    const uid = await create();
    const before = await codes(t, uid);
    await ok(t.post('/v1/Logistics/AddShipmentObject', { shipmentUid: uid, details: obj, changePickUpAccess: true, changeDropOffAccess: true }));
    const after = await codes(t, uid);
    expect(after.dropPin).toMatch(/^\d{6}$/);
    expect(after.dropPin).not.toBe(before.dropPin);
    expect(after.pickPin).not.toBe(before.pickPin);
    expect(after.dropQr).not.toBe(before.dropQr);
    const s = await shipment(t, uid);
    await fails(simulate(t, PUP_A1, s.bookedLockerName, before.dropPin!), 'InvalidAccessCode');
    await ok(simulate(t, PUP_A1, s.bookedLockerName, after.dropPin!));
    // after the drop-off no drop-off code can ever be used again: a clear error, nothing added
    const n = (await ok(t.post('/v1/Logistics/GetShipmentObjects', { shipmentUid: uid }))).totalItems;
    const r = await fails(t.post('/v1/Logistics/AddShipmentObject', { shipmentUid: uid, details: obj, changeDropOffAccess: true }), 'InvalidShipmentState');
    expect(r.message).toMatch(/changeDropOffAccess/);
    expect((await ok(t.post('/v1/Logistics/GetShipmentObjects', { shipmentUid: uid }))).totalItems).toBe(n);
    expect((await codes(t, uid)).dropPin).toBeUndefined();
    await pickUp(t, uid);
  });

  it('changeDropOffAccess on a keep-booked collect-only in ReadyForPickup: the next drop-off needs the new code', async () => {
    const k = (await ok(t.post('/v1/Logistics/CreateCollectOnlyShipmentAsCollectByUser', { ...booking(), ToUserUid: user, KeepBookedAfterPickUp: true }))).shipmentUids[0] as string;
    const s = await shipment(t, k);
    await dropOff(t, k);
    expect(await stateOf(t, k)).toBe('ReadyForPickup');
    const before = await codes(t, k);
    expect(before.dropPin).toMatch(/^\d{6}$/); // kept for the next round (rule 9)
    await ok(t.post('/v1/Logistics/AddShipmentObject', { shipmentUid: k, details: obj, changeDropOffAccess: true }));
    const after = await codes(t, k);
    expect(after.dropPin).toMatch(/^\d{6}$/);
    expect(after.dropPin).not.toBe(before.dropPin);
    expect(after.dropQr).not.toBe(before.dropQr);
    expect([after.pickPin, after.pickQr]).toEqual([before.pickPin, before.pickQr]);
    await pickUp(t, k);
    expect(await stateOf(t, k)).toBe('ReadyForDropoff');
    await fails(simulate(t, PUP_A1, s.bookedLockerName, before.dropPin!), 'InvalidAccessCode');
    await fails(simulate(t, PUP_A1, s.bookedLockerName, before.dropQr!), 'InvalidAccessCode');
    expect(await stateOf(t, k)).toBe('ReadyForDropoff');
    await ok(simulate(t, PUP_A1, s.bookedLockerName, after.dropPin!));
    expect(await stateOf(t, k)).toBe('ReadyForPickup');
    await cancel(k);
  });

  it("a new pick-up code of a swapped shipment is also the swapping shipment's new drop-off code", async () => {
    const a = await create();
    const b = await create({ SwapsShipmentUid: a, FromUserUid: user, ToUserUid: null });
    await ok(t.post('/v1/Logistics/AddShipmentObject', { shipmentUid: a, details: obj, changePickUpAccess: true }));
    expect((await codes(t, b)).dropPin).toBe((await codes(t, a)).pickPin);
    await ok(t.post('/v1/Logistics/AddShipmentObject', { shipmentUid: b, details: obj, changeDropOffAccess: true }));
    const ca = await codes(t, a);
    const cb = await codes(t, b);
    expect(cb.dropPin).toBe(ca.pickPin);
    expect(cb.dropQr).toBe(ca.pickQr);
    await cancel(b);
    await cancel(a);
  });

  describe('SetShipmentReceiver', () => {
    it('sets a receiver with caseReferenceNew, makes a new LinkCode (newest first)', async () => {
      const uid = await create({ ToUserUid: null, FromUserUid: user, IsReceiverDelayed: true, ReferenceCaseNo: 'OLD' });
      const l0 = (await codes(t, uid)).links;
      await ok(t.post('/v1/Logistics/SetShipmentReceiver', { shipmentUid: uid, toUserUid: user2, caseReferenceNew: 'NEW' }));
      expect(await shipment(t, uid)).toMatchObject({ toUserUid: user2, referenceCaseNo: 'NEW', stateCode: 'ReadyForDropoff' });
      const l1 = (await ok(t.post('/v1/Logistics/GetShipmentAccessConfig', { shipmentUid: uid, usage: 'LinkCode' }))).items;
      expect(l1).toHaveLength(2);
      expect(l1.every((i: any) => i.usage === 'LinkCode' && i.type === 'Qr')).toBe(true);
      expect(l1[1].value).toBe(l0[0]);
      expect(l1[0].value).not.toBe(l0[0]);
      await cancel(uid);
    });

    it('removeReceiver ignores toUserUid and caseReferenceNew', async () => {
      const uid = await create({ ReferenceCaseNo: 'KEEP' });
      await ok(t.post('/v1/Logistics/SetShipmentReceiver', { shipmentUid: uid, toUserUid: user2, caseReferenceNew: 'NO', removeReceiver: true }));
      const s = await shipment(t, uid);
      expect(s).not.toHaveProperty('toUserUid');
      expect(s.referenceCaseNo).toBe('KEEP');
      // removing again: no receiver
      await fails(t.post('/v1/Logistics/SetShipmentReceiver', { shipmentUid: uid, removeReceiver: true }), 'InvalidShipmentState');
      await cancel(uid);
    });

    it('removeReceiver ignores a toUserUid that would be invalid ("" or 65 characters); without it that is InvalidRequest', async () => {
      for (const bad of ['', 'x'.repeat(65)]) {
        const uid = await create();
        const r = await fails(t.post('/v1/Logistics/SetShipmentReceiver', { shipmentUid: uid, toUserUid: bad }), 'InvalidRequest');
        expect(r.message).toMatch(/toUserUid/);
        expect((await shipment(t, uid)).toUserUid).toBe(user);
        await ok(t.post('/v1/Logistics/SetShipmentReceiver', { shipmentUid: uid, toUserUid: bad, removeReceiver: true }));
        expect(await shipment(t, uid)).not.toHaveProperty('toUserUid');
        // key case does not matter (ToUserUid, RemoveReceiver)
        await fails(t.post('/v1/Logistics/SetShipmentReceiver', { ShipmentUid: uid, ToUserUid: bad, RemoveReceiver: false }), 'InvalidRequest');
        await cancel(uid);
      }
      // the documented type still holds: a string or null
      const uid = await create();
      await fails(t.post('/v1/Logistics/SetShipmentReceiver', { shipmentUid: uid, toUserUid: 5, removeReceiver: true }), 'InvalidRequest');
      await ok(t.post('/v1/Logistics/SetShipmentReceiver', { shipmentUid: uid, toUserUid: null, removeReceiver: true }));
      await cancel(uid);
    });

    it('InvalidUserUid for an unmanageable user, InvalidRequest without toUserUid, InvalidShipment when unknown', async () => {
      const uid = await create({ ToUserUid: null, FromUserUid: user, IsReceiverDelayed: true });
      await fails(t.post('/v1/Logistics/SetShipmentReceiver', { shipmentUid: uid, toUserUid: UNKNOWN_UID }), 'InvalidUserUid');
      await fails(t.post('/v1/Logistics/SetShipmentReceiver', { shipmentUid: uid }), 'InvalidRequest');
      await fails(t.post('/v1/Logistics/SetShipmentReceiver', { shipmentUid: UNKNOWN_UID, toUserUid: user }), 'InvalidShipment');
      await cancel(uid);
      await fails(t.post('/v1/Logistics/SetShipmentReceiver', { shipmentUid: uid, toUserUid: user }), 'InvalidShipmentState');
    });
  });

  it('CancelShipment releases the locker; cancelling twice is InvalidShipmentState', async () => {
    const uid = await create();
    const locker = await lockerOf(t, uid);
    await cancel(uid);
    expect(await stateOf(t, uid)).toBe('Cancelled');
    expect(await lockerHolder(t, locker!)).toBeNull();
    await fails(t.post('/v1/Logistics/CancelShipment', { shipmentUid: uid }), 'InvalidShipmentState');
    await fails(t.post('/v1/Logistics/CancelShipment', { shipmentUid: UNKNOWN_UID }), 'InvalidShipment');
    await fails(t.post('/v1/Logistics/CancelShipment', {}), 'InvalidRequest');
  });

  it('cancelling a swapped shipment hands its locker to the swap, which now needs a drop-off of its own', async () => {
    const a = await create();
    const b = await create({ SwapsShipmentUid: a, FromUserUid: user, ToUserUid: user2 });
    const locker = await lockerOf(t, a);
    const shared = (await codes(t, b)).dropPin;
    await cancel(a);
    expect(await stateOf(t, b)).toBe('ReadyForDropoff');
    expect(await lockerHolder(t, locker!)).toBe(b);
    const cb = await codes(t, b);
    expect(cb.dropPin).toMatch(/^\d{6}$/);
    expect(cb.dropPin).not.toBe(shared);
    await dropOff(t, b);
    expect(await stateOf(t, b)).toBe('ReadyForPickup');
    await cancel(b);
    expect(await lockerHolder(t, locker!)).toBeNull();
  });

  describe('chains: copied codes follow their source', () => {
    const flow = async (name: string, body: Record<string, unknown>) => (await ok(t.post(`/v1/Logistics/${name}`, body))).shipmentUids as string[];
    const stock = async () => {
      const [s] = await flow('CreateLocalShipmentAsStock', booking());
      await dropOff(t, s!);
      return s!;
    };

    it("cancelling the issued stock renews the subsequent intake's drop-off codes; the circular stock's copies follow", async () => {
      const s = await stock();
      const [, intake, circ] = await flow('CreateLocalShipmentAsIssueFromStockAndSubsequentIntakeAndCircularStock', { PriorShipmentUid: s, ToUserUid: user });
      const old = await codes(t, circ!);
      expect(old.dropPin).toBe((await codes(t, intake!)).dropPin);
      await cancel(s);
      expect(await stateOf(t, intake!)).toBe('ReadyForDropoff');
      const ci = await codes(t, intake!);
      const cc = await codes(t, circ!);
      expect(ci.dropPin).not.toBe(old.dropPin);
      expect([cc.dropPin, cc.dropQr]).toEqual([ci.dropPin, ci.dropQr]);
      expect(cc.all.filter((c) => c.usage === 'DropOff')).toHaveLength(2); // no stale copy left
      await fails(t.post('/v1/Logistics/UnlockShipmentLocker', { shipmentUid: circ, pinCode: old.dropPin }), 'InvalidAccessCode');
      await ok(t.post('/v1/Logistics/UnlockShipmentLocker', { shipmentUid: circ, pinCode: ci.dropPin }));
      // the return with the new code still hands the item to the circular stock (rule 8)
      await dropOff(t, intake!);
      expect(await stateOf(t, circ!)).toBe('ReadyForPickup');
      await cancel(circ!);
    });
  });

  it('cancelling the middle swap of A <- B <- C: C now swaps A (links, codes, rule 7)', async () => {
    const a = await create();
    const b = await create({ SwapsShipmentUid: a, FromUserUid: user, ToUserUid: user2 });
    const c = await create({ SwapsShipmentUid: b, FromUserUid: user2, ToUserUid: user });
    expect((await shipment(t, c)).swapsShipmentUid).toBe(b);
    await cancel(b);
    expect(await shipment(t, c)).toMatchObject({ stateCode: 'LockerAssigned', swapsShipmentUid: a });
    expect(await ok(t.post('/v1/Logistics/GetShipmentSwaps', { shipmentUid: c, pageNo: 1, pageSize: 10 }))).toMatchObject({ swapsShipmentUid: a, swapWithShipments: [], totalItems: 0 });
    // the cancelled B stays listed as a past swap of A; C is A's swap now
    expect(await ok(t.post('/v1/Logistics/GetShipmentSwaps', { shipmentUid: a, pageNo: 1, pageSize: 10 }))).toMatchObject({ swapsShipmentUid: null, swapWithShipments: [b, c], totalItems: 2 });
    expect(await ok(t.post('/v1/Logistics/GetShipmentSwaps', { shipmentUid: b, pageNo: 1, pageSize: 10 }))).toMatchObject({ swapsShipmentUid: a, swapWithShipments: [], totalItems: 0 });
    const ca = await codes(t, a);
    const cc = await codes(t, c);
    expect([cc.dropPin, cc.dropQr]).toEqual([ca.pickPin, ca.pickQr]);
    await dropOff(t, a);
    await pickUp(t, a); // rule 7: C's drop-off is assumed
    expect(await stateOf(t, c)).toBe('ReadyForPickup');
    await pickUp(t, c);
  });

  it("a waiter moving up the chain re-copies its new drop-off codes to the circular stock waiting on it", async () => {
    // intake J <- stock S (swap, AsStockAfterSwapIntake) <- intake I (subsequent) <- circular stock C
    const [j] = (await ok(t.post('/v1/Logistics/CreateLocalShipmentAsIntake', { ...booking(), FromUserUid: user }))).shipmentUids as string[];
    await dropOff(t, j!);
    const [st] = (await ok(t.post('/v1/Logistics/CreateLocalShipmentAsStockAfterSwapIntake', { PriorShipmentUid: j, Dimension: booking().Dimension }))).shipmentUids as string[];
    const [, i, c] = (await ok(t.post('/v1/Logistics/CreateLocalShipmentAsIssueFromStockAndSubsequentIntakeAndCircularStock', { PriorShipmentUid: st, ToUserUid: user }))).shipmentUids as string[];
    const old = await codes(t, c!);
    await cancel(st!); // I now waits on J, as S did (a swap), so its drop-off codes become J's pick-up codes
    expect(await shipment(t, i!)).toMatchObject({ stateCode: 'LockerAssigned', swapsShipmentUid: j });
    const cj = await codes(t, j!);
    const ci = await codes(t, i!);
    const cc = await codes(t, c!);
    expect([ci.dropPin, ci.dropQr]).toEqual([cj.pickPin, cj.pickQr]);
    expect([cc.dropPin, cc.dropQr]).toEqual([ci.dropPin, ci.dropQr]);
    expect(cc.dropPin).not.toBe(old.dropPin);
    await fails(t.post('/v1/Logistics/UnlockShipmentLocker', { shipmentUid: c, pinCode: old.dropPin }), 'InvalidAccessCode');
    for (const x of [c!, i!, j!]) await cancel(x);
  });

  describe('UnlockShipmentLocker', () => {
    const unlock = (body: Record<string, unknown>) => t.post('/v1/Logistics/UnlockShipmentLocker', body);

    it('unlocks through the terminal gateway for the matching goal and code', async () => {
      const uid = await create();
      const c = await codes(t, uid);
      term.unlocks.length = 0;
      await ok(unlock({ shipmentUid: uid, unlockGoal: 'DropOff', pinCode: c.dropPin }));
      await ok(unlock({ shipmentUid: uid, unlockGoal: null, pinCode: '' }));
      await ok(unlock({ shipmentUid: uid }));
      expect(term.unlocks).toHaveLength(3);
      expect(term.unlocks[0]).toMatchObject({ pupUid: PUP_A1, lockerUid: await lockerOf(t, uid), bus: 'bus0', boardAddress: 0, lockNumber: expect.any(Number), shipmentUid: uid, reason: 'api' });
      // unlocking changes no state: only the door event does
      expect(await stateOf(t, uid)).toBe('ReadyForDropoff');
      await dropOff(t, uid);
      await ok(unlock({ shipmentUid: uid, unlockGoal: 'PickUp', pinCode: c.pickQr }));
      await cancel(uid);
    });

    it('InvalidShipment: unknown shipment', async () => {
      await fails(unlock({ shipmentUid: UNKNOWN_UID }), 'InvalidShipment');
    });

    it('InvalidShipmentState: an inactive shipment (no locker any more), whatever the goal', async () => {
      const uid = await create();
      await cancel(uid);
      await fails(unlock({ shipmentUid: uid }), 'InvalidShipmentState');
      await fails(unlock({ shipmentUid: uid, unlockGoal: 'PickUp' }), 'InvalidShipmentState');
    });

    it('UnlockNotAllowed: the goal does not match the state (rule 4)', async () => {
      const uid = await create();
      await fails(unlock({ shipmentUid: uid, unlockGoal: 'PickUp' }), 'UnlockNotAllowed');
      await dropOff(t, uid);
      await fails(unlock({ shipmentUid: uid, unlockGoal: 'DropOff' }), 'UnlockNotAllowed');
      await ok(unlock({ shipmentUid: uid, unlockGoal: 'PickUp' }));
      await cancel(uid);
    });

    it('InvalidAccessCode: a wrong pinCode; the drop-off code does not serve a pick-up; throttled after 5 failures', async () => {
      const uid = await create();
      const c = await codes(t, uid);
      await fails(unlock({ shipmentUid: uid, unlockGoal: 'DropOff', pinCode: c.pickPin }), 'InvalidAccessCode');
      for (let i = 0; i < 4; i++) await fails(unlock({ shipmentUid: uid, pinCode: '99999' + i }), 'InvalidAccessCode');
      // 5 failures within 15 minutes: even the right code is refused without checking
      const r = await fails(unlock({ shipmentUid: uid, unlockGoal: 'DropOff', pinCode: c.dropPin }), 'InvalidAccessCode');
      expect(r.message).toMatch(/too many/);
      t.clock.advance(16 * 60_000);
      await ok(unlock({ shipmentUid: uid, unlockGoal: 'DropOff', pinCode: c.dropPin }));
      await cancel(uid);
    });

    it('UnlockFailed: the terminal reports a failure', async () => {
      const uid = await create();
      term.result = { ok: false, code: 'HARDWARE_FAULT', message: 'lock did not open' };
      try {
        await fails(unlock({ shipmentUid: uid }), 'UnlockFailed');
      } finally {
        term.result = { ok: true };
      }
      await cancel(uid);
    });
  });
});

describeEngines('UnlockShipmentLocker without a connected terminal', (engine) => {
  let t: TestService;
  beforeAll(async () => {
    t = await createTestService(engine);
  });
  afterAll(async () => t?.close());
  it('answers UnlockFailed', async () => {
    const b = await ok(t.post('/v1/Logistics/CreateCollectOnlyShipment', { ...booking(), KeepBookedAfterPickUp: false }));
    await fails(t.post('/v1/Logistics/UnlockShipmentLocker', { shipmentUid: b.shipmentUid, unlockGoal: 'DropOff' }), 'UnlockFailed');
    void S;
  });
});
