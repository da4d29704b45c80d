// Every flow endpoint end to end through inject() and SimulateLockerAccess: the shipments each
// creates (in order), drop-off, receiver, pick-up, and the chained shipments moving as the rules
// say (swap: rule 7, circular stock: rule 8, keep-booked collect-only: rule 9). Both engines.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { PUP_A1, S } from './support/fixtures';
import { addUser, booking, codes, dropOff, fails, lockerHolder, lockerOf, ok, pickUp, shipment, stateOf, transitions } from './shipments-helpers';

describeEngines('flows', (engine) => {
  let t: TestService;
  let user: string;
  let dispatcher: string;
  beforeAll(async () => {
    t = await createTestService(engine);
    user = await addUser(t, PUP_A1);
    const ten = await t.ctx.db.kysely.selectFrom('tenants').select('main_account_uid').where('client_id', '=', 'tenant-a').executeTakeFirstOrThrow();
    dispatcher = ten.main_account_uid;
  });
  afterAll(async () => t?.close());

  const flow = async (name: string, body: Record<string, unknown>, n: number): Promise<string[]> => {
    const b = await ok(t.post(`/v1/Logistics/${name}`, body));
    expect(Object.keys(b).sort()).toEqual(['error', 'message', 'shipmentUids', 'success']);
    expect(b.shipmentUids).toHaveLength(n);
    return b.shipmentUids;
  };
  const stock = async (details?: Record<string, unknown>) => {
    const [s] = await flow('CreateLocalShipmentAsStock', { ...booking(), Details: details }, 1);
    await dropOff(t, s!);
    expect(await stateOf(t, s!)).toBe('WaitForReceiver');
    return s!;
  };

  it('AsIssue: dispatcher -> user, a receive shipment', async () => {
    const [issue] = await flow('CreateLocalShipmentAsIssue', { ...booking(), ToUserUid: user, Details: { ReferenceNo: 'I-1' } }, 1);
    expect(await shipment(t, issue!)).toMatchObject({ typeCode: 'ReceivePupShipment', fromUserUid: dispatcher, toUserUid: user, referenceNo: 'I-1', stateCode: 'ReadyForDropoff' });
    await dropOff(t, issue!);
    expect(await stateOf(t, issue!)).toBe('ReadyForPickup');
    await pickUp(t, issue!);
    expect(await stateOf(t, issue!)).toBe('PickedUp');
  });

  it('AsIssueAndSwapIntake: issue, then the intake swapping it in the same locker (rule 7)', async () => {
    const [issue, intake] = await flow('CreateLocalShipmentAsIssueAndSwapIntake', { ...booking(), ToUserUid: user, Details: { ReferenceNo: 'I-2' }, Return: { ReferenceNo: 'R-2', Description: 'return' } }, 2);
    const si = await shipment(t, issue!);
    const sr = await shipment(t, intake!);
    expect(si).toMatchObject({ typeCode: 'ReceivePupShipment', stateCode: 'ReadyForDropoff', fromUserUid: dispatcher, toUserUid: user, swapsShipmentUid: null });
    expect(sr).toMatchObject({ typeCode: 'DispatchPupShipment', stateCode: 'LockerAssigned', fromUserUid: user, toUserUid: dispatcher, referenceNo: 'R-2', description: 'return', swapsShipmentUid: issue, bookedLockerName: si.bookedLockerName });
    // the swap's pick-up code of the swapped shipment equals the new shipment's delivery code
    const ci = await codes(t, issue!);
    const cr = await codes(t, intake!);
    expect(cr.dropPin).toBe(ci.pickPin);
    expect(cr.dropQr).toBe(ci.pickQr);
    const swaps = await ok(t.post('/v1/Logistics/GetShipmentSwaps', { shipmentUid: issue, pageNo: 1, pageSize: 10 }));
    expect(swaps).toMatchObject({ shipmentUid: issue, swapsShipmentUid: null, swapWithShipments: [intake], totalItems: 1, totalPages: 1 });
    const back = await ok(t.post('/v1/Logistics/GetShipmentSwaps', { shipmentUid: intake, pageNo: 1, pageSize: 10 }));
    expect(back).toMatchObject({ swapsShipmentUid: issue, swapWithShipments: [], totalItems: 0 });

    await dropOff(t, issue!);
    expect(await stateOf(t, intake!)).toBe('LockerAssigned');
    const locker = await lockerOf(t, issue!);
    await pickUp(t, issue!); // the user takes the issue and leaves the return: one visit
    expect(await stateOf(t, issue!)).toBe('PickedUp');
    expect(await stateOf(t, intake!)).toBe('ReadyForPickup');
    expect(await lockerHolder(t, locker!)).toBe(intake);
    const tr = await transitions(t, intake!);
    expect(tr.at(-1)).toMatchObject({ from_state: 'LockerAssigned', to_state: 'ReadyForPickup', cause: 'simulate', detail: `swap: ${issue} picked up` });
    await pickUp(t, intake!); // the dispatcher collects the return
    expect(await stateOf(t, intake!)).toBe('PickedUp');
    expect(await lockerHolder(t, locker!)).toBeNull();
  });

  it('AsStock then AsIssueFromStock: stock waits without receiver, issuing sets it', async () => {
    const s = await stock({ ReferenceNo: 'S-1', ReferenceCaseNo: 'CASE-0' });
    const sh = await shipment(t, s);
    expect(sh).toMatchObject({ typeCode: 'ReceivePupShipment', fromUserUid: dispatcher, referenceNo: 'S-1' });
    expect(sh).not.toHaveProperty('toUserUid');
    const [again] = await flow('CreateLocalShipmentAsIssueFromStock', { PriorShipmentUid: s, ToUserUid: user, Issue: { ReferenceCaseNo: 'CASE-1' } }, 1);
    expect(again).toBe(s);
    expect(await shipment(t, s)).toMatchObject({ stateCode: 'ReadyForPickup', toUserUid: user, referenceCaseNo: 'CASE-1' });
    // issuing twice: it already has a receiver
    await fails(t.post('/v1/Logistics/CreateLocalShipmentAsIssueFromStock', { PriorShipmentUid: s, ToUserUid: user }), 'InvalidShipmentState');
    await pickUp(t, s);
    expect(await stateOf(t, s)).toBe('PickedUp');
  });

  it('AsIssueFromStock refuses a shipment that is not stock', async () => {
    const [issue] = await flow('CreateLocalShipmentAsIssue', { ...booking(), ToUserUid: user }, 1);
    await fails(t.post('/v1/Logistics/CreateLocalShipmentAsIssueFromStock', { PriorShipmentUid: issue, ToUserUid: user }), 'InvalidShipment');
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: issue }));
  });

  it('AsIssueFromStockAndSwapIntake: stock issued, intake swapping it', async () => {
    const s = await stock();
    const [s2, intake] = await flow('CreateLocalShipmentAsIssueFromStockAndSwapIntake', { PriorShipmentUid: s, ToUserUid: user, Return: { ReferenceNo: 'RET' } }, 2);
    expect(s2).toBe(s);
    expect(await shipment(t, s)).toMatchObject({ stateCode: 'ReadyForPickup', toUserUid: user });
    expect(await shipment(t, intake!)).toMatchObject({ typeCode: 'DispatchPupShipment', stateCode: 'LockerAssigned', fromUserUid: user, toUserUid: dispatcher, swapsShipmentUid: s, referenceNo: 'RET' });
    expect((await codes(t, intake!)).dropPin).toBe((await codes(t, s)).pickPin);
    await pickUp(t, s);
    expect(await stateOf(t, s)).toBe('PickedUp');
    expect(await stateOf(t, intake!)).toBe('ReadyForPickup');
    await pickUp(t, intake!);
  });

  it('AsIntake, then AsStockAfterSwapIntake: the dispatcher collects the return and leaves stock', async () => {
    const [intake] = await flow('CreateLocalShipmentAsIntake', { ...booking(), FromUserUid: user, Details: { ReferenceNo: 'IN-1' } }, 1);
    expect(await shipment(t, intake!)).toMatchObject({ typeCode: 'DispatchPupShipment', fromUserUid: user, toUserUid: dispatcher, stateCode: 'ReadyForDropoff' });
    await dropOff(t, intake!);
    expect(await stateOf(t, intake!)).toBe('ReadyForPickup');
    const [st] = await flow('CreateLocalShipmentAsStockAfterSwapIntake', { PriorShipmentUid: intake, Dimension: S, Details: { ReferenceNo: 'ST-1' } }, 1);
    expect(await shipment(t, st!)).toMatchObject({ typeCode: 'ReceivePupShipment', stateCode: 'LockerAssigned', swapsShipmentUid: intake, referenceNo: 'ST-1' });
    await pickUp(t, intake!);
    expect(await stateOf(t, intake!)).toBe('PickedUp');
    expect(await stateOf(t, st!)).toBe('WaitForReceiver'); // stock: drop-off assumed, no receiver
    expect(await lockerHolder(t, (await lockerOf(t, st!))!)).toBe(st);
    // a prior shipment that is not an intake is refused
    await fails(t.post('/v1/Logistics/CreateLocalShipmentAsStockAfterSwapIntake', { PriorShipmentUid: st, Dimension: S }), 'InvalidShipment');
    // a second swap on the same shipment is refused (it is no longer active anyway)
    await fails(t.post('/v1/Logistics/CreateLocalShipmentAsStockAfterSwapIntake', { PriorShipmentUid: intake, Dimension: S }), 'InvalidShipmentState');
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: st }));
  });

  it('AsIntakeAndCircularStock: when the intake is dropped off the stock is ready for pick-up (rule 8)', async () => {
    const [intake, circ] = await flow('CreateLocalShipmentAsIntakeAndCircularStock', { ...booking(), FromUserUid: user, Details: { ReferenceNo: 'LAPTOP-7' } }, 2);
    expect(await shipment(t, circ!)).toMatchObject({ typeCode: 'ReceivePupShipment', stateCode: 'LockerAssigned', referenceNo: 'LAPTOP-7', swapsShipmentUid: null });
    const locker = await lockerOf(t, intake!);
    expect(await lockerOf(t, circ!)).toBe(locker);
    await dropOff(t, intake!);
    expect(await stateOf(t, intake!)).toBe('PickedUp');
    expect(await stateOf(t, circ!)).toBe('ReadyForPickup');
    expect(await lockerHolder(t, locker!)).toBe(circ);
    const tr = await transitions(t, intake!);
    expect(tr.at(-1)).toMatchObject({ from_state: 'ReadyForDropoff', to_state: 'PickedUp' });
    // the stock can be issued while it waits in the locker, then picked up by the user
    await flow('CreateLocalShipmentAsIssueFromStock', { PriorShipmentUid: circ, ToUserUid: user }, 1);
    await pickUp(t, circ!);
    expect(await stateOf(t, circ!)).toBe('PickedUp');
    expect(await lockerHolder(t, locker!)).toBeNull();
  });

  it('AsIssueFromStockAndSubsequentIntakeAndCircularStock: issue, later intake in the same locker, circular stock', async () => {
    const s = await stock({ ReferenceNo: 'DRILL-1', Description: 'drill' });
    const [s2, intake, circ] = await flow('CreateLocalShipmentAsIssueFromStockAndSubsequentIntakeAndCircularStock', { PriorShipmentUid: s, ToUserUid: user }, 3);
    expect(s2).toBe(s);
    // no details given: the stock shipment's details are used
    expect(await shipment(t, intake!)).toMatchObject({ typeCode: 'DispatchPupShipment', stateCode: 'LockerAssigned', fromUserUid: user, toUserUid: dispatcher, referenceNo: 'DRILL-1', description: 'drill' });
    expect(await shipment(t, circ!)).toMatchObject({ stateCode: 'LockerAssigned', referenceNo: 'DRILL-1' });
    const locker = await lockerOf(t, s);
    await pickUp(t, s);
    expect(await stateOf(t, s)).toBe('PickedUp');
    expect(await stateOf(t, intake!)).toBe('ReadyForDropoff');
    expect(await lockerHolder(t, locker!)).toBe(intake);
    await dropOff(t, intake!); // the user returns the drill
    expect(await stateOf(t, intake!)).toBe('PickedUp');
    expect(await stateOf(t, circ!)).toBe('ReadyForPickup');
    expect(await lockerHolder(t, locker!)).toBe(circ);
    await pickUp(t, circ!);
    expect(await lockerHolder(t, locker!)).toBeNull();
  });

  it('CollectByDispatcher / CollectByUser without KeepBookedAfterPickUp: one collection', async () => {
    const [d] = await flow('CreateCollectOnlyShipmentAsCollectByDispatcher', { ...booking(), KeepBookedAfterPickUp: false }, 1);
    expect(await shipment(t, d!)).toMatchObject({ typeCode: 'CollectOnlyShipment', toUserUid: dispatcher });
    const [u] = await flow('CreateCollectOnlyShipmentAsCollectByUser', { ...booking(), ToUserUid: user, KeepBookedAfterPickUp: false }, 1);
    expect(await shipment(t, u!)).toMatchObject({ typeCode: 'CollectOnlyShipment', toUserUid: user });
    for (const x of [d!, u!]) {
      await dropOff(t, x);
      await pickUp(t, x);
      expect(await stateOf(t, x)).toBe('PickedUp');
      expect(await lockerHolder(t, (await lockerOf(t, x))!)).toBeNull();
    }
  });

  it('CollectByUser with KeepBookedAfterPickUp: an infinite booking of the locker (rule 9)', async () => {
    const [k] = await flow('CreateCollectOnlyShipmentAsCollectByUser', { ...booking(), ToUserUid: user, KeepBookedAfterPickUp: true }, 1);
    const locker = await lockerOf(t, k!);
    const c0 = await codes(t, k!);
    for (let round = 0; round < 3; round++) {
      await dropOff(t, k!);
      expect(await stateOf(t, k!)).toBe('ReadyForPickup');
      await pickUp(t, k!);
      expect(await stateOf(t, k!)).toBe('ReadyForDropoff');
      expect(await lockerHolder(t, locker!)).toBe(k);
    }
    const c1 = await codes(t, k!);
    expect([c1.dropPin, c1.pickPin]).toEqual([c0.dropPin, c0.pickPin]); // same codes every round
    const tr = await transitions(t, k!);
    expect(tr.slice(1, 4).map((x) => x.to_state)).toEqual(['ReadyForPickup', 'PickedUp', 'ReadyForDropoff']);
    // it never expires
    t.clock.advance(1000 * 3_600_000);
    const { shipmentService } = await import('../src/shipments/service');
    await shipmentService(t.ctx).expireDue();
    expect(await stateOf(t, k!)).toBe('ReadyForDropoff');
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: k }));
    expect(await lockerHolder(t, locker!)).toBeNull();
  });

  it('CreateLocalShipment swap without a To user: From is the swapped shipment\'s To user, receiver set later', async () => {
    const a = await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking() }));
    const b = await ok(t.post('/v1/Logistics/CreateLocalShipment', { ...booking(), SwapsShipmentUid: a.shipmentUid, IsReceiverDelayed: true }));
    expect(b.lockerName).toBe(a.lockerName);
    const sb = await shipment(t, b.shipmentUid);
    expect(sb).toMatchObject({ fromUserUid: user, stateCode: 'LockerAssigned', swapsShipmentUid: a.shipmentUid });
    expect(sb).not.toHaveProperty('toUserUid');
    await dropOff(t, a.shipmentUid);
    await pickUp(t, a.shipmentUid);
    expect(await stateOf(t, b.shipmentUid)).toBe('WaitForReceiver');
    await ok(t.post('/v1/Logistics/SetShipmentReceiver', { shipmentUid: b.shipmentUid, toUserUid: dispatcher }));
    expect(await stateOf(t, b.shipmentUid)).toBe('ReadyForPickup');
    await pickUp(t, b.shipmentUid);
  });
});
