// Expiry: a booking not dropped off before shipments.dropOffDeadlineHours becomes Expired and its
// locker is released; driven by a ManualClock, both by calling expireDue() and by the worker.
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { PUP_A1 } from './support/fixtures';
import { shipmentService } from '../src/shipments/service';
import { addUser, booking, dropOff, fails, lockerHolder, lockerOf, ok, stateOf, transitions } from './shipments-helpers';

describeEngines('shipments: expiry', (engine) => {
  let t: TestService;
  let user: string;
  beforeAll(async () => {
    t = await createTestService(engine, { config: { shipments: { dropOffDeadlineHours: 2, expirySweepSeconds: 0.05 } } });
    user = await addUser(t, PUP_A1);
  });
  afterAll(async () => t?.close());

  const create = async (over: Record<string, unknown> = {}) => (await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking(), ...over }))).shipmentUid as string;

  it('expires a booking after the deadline and releases its locker; a dropped-off one stays', async () => {
    const svc = shipmentService(t.ctx);
    const a = await create();
    const b = await create();
    await dropOff(t, b);
    const locker = await lockerOf(t, a);
    t.clock.advance(2 * 3_600_000 - 1000);
    expect(await svc.expireDue()).toBe(0);
    expect(await stateOf(t, a)).toBe('ReadyForDropoff');
    t.clock.advance(1000);
    expect(await svc.expireDue()).toBe(1);
    expect(await stateOf(t, a)).toBe('Expired');
    expect(await stateOf(t, b)).toBe('ReadyForPickup');
    expect(await lockerHolder(t, locker!)).toBeNull();
    const tr = await transitions(t, a);
    expect(tr.at(-1)).toMatchObject({ from_state: 'ReadyForDropoff', to_state: 'Expired', cause: 'clock' });
    // its codes no longer open anything; cancelling it is refused
    await fails(t.post('/v1/Logistics/CancelShipment', { shipmentUid: a }), 'InvalidShipmentState');
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: b }));
  });

  it('an expired swapped shipment hands its locker to the swap, whose deadline starts then', async () => {
    const svc = shipmentService(t.ctx);
    const a = await create();
    const b = await create({ SwapsShipmentUid: a, FromUserUid: user });
    const locker = await lockerOf(t, a);
    t.clock.advance(2 * 3_600_000);
    expect(await svc.expireDue()).toBe(1);
    expect(await stateOf(t, a)).toBe('Expired');
    expect(await stateOf(t, b)).toBe('ReadyForDropoff');
    expect(await lockerHolder(t, locker!)).toBe(b);
    t.clock.advance(2 * 3_600_000);
    expect(await svc.expireDue()).toBe(1);
    expect(await stateOf(t, b)).toBe('Expired');
    expect(await lockerHolder(t, locker!)).toBeNull();
  });

  it('the registered worker sweeps on its own', async () => {
    const w = t.ctx.workers.find((x) => x.name === 'shipments.expiry');
    expect(w).toBeDefined();
    const a = await create();
    await w!.start();
    try {
      t.clock.advance(3 * 3_600_000);
      await vi.waitFor(async () => expect(await stateOf(t, a)).toBe('Expired'), { timeout: 5000, interval: 50 });
    } finally {
      await w!.stop();
    }
  });
});
