// One test per rule of the API document's "Rules that involve states", through the API on both
// storage engines.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { PUP_A1 } from './support/fixtures';
import { FakeTerminalGateway } from '../src/terminals/gateway';
import { shipmentService } from '../src/shipments/service';
import { addUser, booking, codes, dropOff, fails, lockerHolder, lockerOf, ok, pickUp, shipment, stateOf } from './shipments-helpers';

describeEngines('rules that involve states', (engine) => {
  let t: TestService;
  let user: string;
  beforeAll(async () => {
    t = await createTestService(engine, { terminals: new FakeTerminalGateway(), config: { shipments: { dropOffDeadlineHours: 1 } } });
    user = await addUser(t, PUP_A1);
  });
  afterAll(async () => t?.close());

  const local = async (over: Record<string, unknown> = {}) => (await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking(), ...over }))).shipmentUid as string;
  const flow = async (name: string, body: Record<string, unknown>) => (await ok(t.post(`/v1/Logistics/${name}`, body))).shipmentUids as string[];
  const listed = async (active: boolean) => (await ok(t.post('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 500, activeShipments: active }))).items.map((i: any) => i.shipmentUid);

  it('rule 1: active = being processed (ReadyForDropoff, LockerAssigned, WaitForReceiver, ReadyForPickup); inactive = completed or cancelled', async () => {
    const expired = await local();
    t.clock.advance(3_600_000);
    await shipmentService(t.ctx).expireDue();
    expect(await stateOf(t, expired)).toBe('Expired');
    const rfd = await local();
    const [issue, la] = await flow('CreateLocalShipmentAsIssueAndSwapIntake', { ...booking(), ToUserUid: user });
    const [wfr] = await flow('CreateLocalShipmentAsStock', booking());
    await dropOff(t, wfr!);
    const rfp = await local();
    await dropOff(t, rfp);
    const picked = await local();
    await dropOff(t, picked);
    await pickUp(t, picked);
    const cancelled = await local();
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: cancelled }));
    const active = await listed(true);
    const inactive = await listed(false);
    for (const u of [rfd, issue!, la!, wfr!, rfp]) expect(active).toContain(u);
    for (const u of [picked, cancelled, expired]) expect(inactive).toContain(u);
    expect(active.filter((u: string) => inactive.includes(u))).toEqual([]);
    expect(await stateOf(t, la!)).toBe('LockerAssigned');
    for (const u of [...active]) await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: u }));
  });

  it('rule 2: SetShipmentReceiver only without a receiver and not in ReadyForPickup', async () => {
    const withReceiver = await local();
    await fails(t.post('/v1/Logistics/SetShipmentReceiver', { shipmentUid: withReceiver, toUserUid: user }), 'InvalidShipmentState');
    const [intake, circ] = await flow('CreateLocalShipmentAsIntakeAndCircularStock', { ...booking(), FromUserUid: user });
    await dropOff(t, intake!);
    expect(await shipment(t, circ!)).toMatchObject({ stateCode: 'ReadyForPickup' });
    expect(await shipment(t, circ!)).not.toHaveProperty('toUserUid');
    await fails(t.post('/v1/Logistics/SetShipmentReceiver', { shipmentUid: circ, toUserUid: user }), 'InvalidShipmentState');
    const delayed = await local({ ToUserUid: null, FromUserUid: user, IsReceiverDelayed: true });
    await ok(t.post('/v1/Logistics/SetShipmentReceiver', { shipmentUid: delayed, toUserUid: user }));
    for (const u of [withReceiver, circ!, delayed]) await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: u }));
  });

  it('rule 3: removing a receiver needs a user and not ReadyForPickup', async () => {
    const a = await local();
    await dropOff(t, a);
    await fails(t.post('/v1/Logistics/SetShipmentReceiver', { shipmentUid: a, removeReceiver: true }), 'InvalidShipmentState');
    const b = await local();
    await ok(t.post('/v1/Logistics/SetShipmentReceiver', { shipmentUid: b, removeReceiver: true }));
    await fails(t.post('/v1/Logistics/SetShipmentReceiver', { shipmentUid: b, removeReceiver: true }), 'InvalidShipmentState');
    await dropOff(t, b);
    expect(await stateOf(t, b)).toBe('WaitForReceiver');
    for (const u of [a, b]) await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: u }));
  });

  it('rule 4: unlockGoal DropOff only when ready for drop-off, PickUp only when ready for pick-up, null regardless', async () => {
    const u = (body: Record<string, unknown>) => t.post('/v1/Logistics/UnlockShipmentLocker', body);
    const [issue, intake] = await flow('CreateLocalShipmentAsIssueAndSwapIntake', { ...booking(), ToUserUid: user });
    await ok(u({ shipmentUid: issue, unlockGoal: 'DropOff' }));
    await fails(u({ shipmentUid: issue, unlockGoal: 'PickUp' }), 'UnlockNotAllowed');
    await fails(u({ shipmentUid: intake, unlockGoal: 'DropOff' }), 'UnlockNotAllowed'); // LockerAssigned
    await ok(u({ shipmentUid: intake, unlockGoal: null })); // regardless of state
    await dropOff(t, issue!);
    await ok(u({ shipmentUid: issue, unlockGoal: 'PickUp' }));
    await fails(u({ shipmentUid: issue, unlockGoal: 'DropOff' }), 'UnlockNotAllowed');
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: intake }));
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: issue }));
    await fails(u({ shipmentUid: issue }), 'InvalidShipmentState'); // no locker any more
  });

  it('rule 5: SimulateLockerAccess advances a shipment to its next state', async () => {
    const a = await local();
    const path: string[] = [await stateOf(t, a)];
    await dropOff(t, a);
    path.push(await stateOf(t, a));
    await pickUp(t, a);
    path.push(await stateOf(t, a));
    expect(path).toEqual(['ReadyForDropoff', 'ReadyForPickup', 'PickedUp']);
    const [s] = await flow('CreateLocalShipmentAsStock', booking());
    await dropOff(t, s!);
    expect(await stateOf(t, s!)).toBe('WaitForReceiver');
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: s }));
  });

  it('rule 6: CancelShipment cancels and releases the booked locker', async () => {
    const a = await local();
    const locker = await lockerOf(t, a);
    expect(await lockerHolder(t, locker!)).toBe(a);
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: a }));
    expect(await stateOf(t, a)).toBe('Cancelled');
    expect(await lockerHolder(t, locker!)).toBeNull();
    const again = await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking({ LockerUid: locker }) }));
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: again.shipmentUid }));
  });

  it('rule 7: when the swapped shipment is picked up, the drop-off of the new one is assumed at the same moment', async () => {
    const a = await local();
    const b = await local({ SwapsShipmentUid: a, FromUserUid: user });
    expect((await codes(t, b)).dropPin).toBe((await codes(t, a)).pickPin);
    await dropOff(t, a);
    expect(await stateOf(t, b)).toBe('LockerAssigned');
    await pickUp(t, a);
    const sa = await shipment(t, a);
    const sb = await shipment(t, b);
    expect([sa.stateCode, sb.stateCode]).toEqual(['PickedUp', 'ReadyForPickup']);
    expect(sb.stateStart).toBe(sa.stateStart);
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: b }));
  });

  it('rule 8: circular stock is marked ready for pick-up when the original item is dropped off', async () => {
    const [intake, circ] = await flow('CreateLocalShipmentAsIntakeAndCircularStock', { ...booking(), FromUserUid: user });
    expect(await stateOf(t, circ!)).toBe('LockerAssigned');
    await dropOff(t, intake!);
    expect(await stateOf(t, circ!)).toBe('ReadyForPickup');
    expect((await shipment(t, circ!)).stateStart).toBe((await shipment(t, intake!)).stateStart);
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: circ }));
  });

  it('rule 9: collect-only with KeepBookedAfterPickUp keeps the locker booked after each pick-up', async () => {
    const k = (await ok(t.post('/v1/Logistics/CreateCollectOnlyShipment', { ...booking(), ToUserUid: user, KeepBookedAfterPickUp: true }))).shipmentUid;
    const locker = await lockerOf(t, k);
    await dropOff(t, k);
    await pickUp(t, k);
    expect(await stateOf(t, k)).toBe('ReadyForDropoff');
    expect(await lockerHolder(t, locker!)).toBe(k);
    const once = (await ok(t.post('/v1/Logistics/CreateCollectOnlyShipment', { ...booking(), ToUserUid: user, KeepBookedAfterPickUp: false }))).shipmentUid;
    const l2 = await lockerOf(t, once);
    await dropOff(t, once);
    await pickUp(t, once);
    expect(await stateOf(t, once)).toBe('PickedUp');
    expect(await lockerHolder(t, l2!)).toBeNull();
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: k }));
  });
});
