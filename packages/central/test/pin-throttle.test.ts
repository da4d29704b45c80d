// Wrong PINs of UnlockShipmentLocker and SimulateLockerAccess are throttled per tenant and locker,
// per tenant and pick up point, and per tenant, not only per shipment (docs/api.md, "Throttling
// and limits"): guesses spread over shipments are counted together, every central instance on the
// store sees the same counts, and a throttled check answers 429 RateLimited with Retry-After
// without looking at the code (even the right one is refused). Both engines.
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { openSameStore } from './support/same-store';
import { PUP_A1, PUP_A2, PUP_B1, TENANT_B } from './support/fixtures';
import { FakeTerminalGateway } from '../src/terminals/gateway';
import { loadConfig } from '../src/config';
import { addUser, booking, codes, fails, ok, shipment, simulate, stateOf } from './shipments-helpers';

const PER_LOCKER = 3;
const PER_PUP = 6;
const PER_TENANT = 9;
const WINDOW_S = loadConfig({ env: {} }).throttle.pinFailureWindowSeconds;

describeEngines('wrong-PIN throttling per locker, pick up point and tenant', (engine) => {
  let t: TestService;
  let userA1: string;
  let userA2: string;
  let userB1: string;
  beforeAll(async () => {
    t = await createTestService(engine, {
      terminals: new FakeTerminalGateway(),
      config: { throttle: { pinMaxFailuresPerLocker: PER_LOCKER, pinMaxFailuresPerPup: PER_PUP, pinMaxFailuresPerTenant: PER_TENANT } },
    });
    userA1 = await addUser(t, PUP_A1);
    userA2 = await addUser(t, PUP_A2);
    userB1 = await addUser(t, PUP_B1);
  });
  afterAll(async () => t?.close());
  // every test starts with no failures in the window
  beforeEach(() => t.clock.advance((WINDOW_S + 60) * 1000));

  const create = async (pupUid: string, toUser: string, token?: string) =>
    (await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: toUser, ...booking({ PupUid: pupUid, AllowOverflowLockers: false }) }, token))).shipmentUid as string;
  const unlock = (shipmentUid: string, pinCode: string, token?: string) => t.post('/v1/Logistics/UnlockShipmentLocker', { shipmentUid, unlockGoal: 'DropOff', pinCode }, token);
  const cancel = (uid: string, token?: string) => ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: uid }, token));
  const throttled = async (p: ReturnType<TestService['post']>) => {
    const r = await p;
    expect({ status: r.status, error: r.body.error }).toEqual({ status: 429, error: 'RateLimited' });
    const after = Number(r.headers['retry-after']);
    expect(after).toBeGreaterThan(0);
    expect(after).toBeLessThanOrEqual(WINDOW_S);
    return r.body as { message: string };
  };

  it('SimulateLockerAccess: wrong PINs at one locker block that locker (even the right PIN), not the others; the window ends it', async () => {
    const uid = await create(PUP_A1, userA1);
    const s = await shipment(t, uid);
    const c = await codes(t, uid);
    for (let i = 0; i < PER_LOCKER; i++) await fails(simulate(t, PUP_A1, s.bookedLockerName, `90000${i}`), 'InvalidAccessCode');
    const body = await throttled(simulate(t, PUP_A1, s.bookedLockerName, c.dropPin!));
    expect(body.message).toMatch(/at this locker/);
    expect(await stateOf(t, uid)).toBe('ReadyForDropoff');
    // another locker of the PUP is still checked
    const otherLocker = s.bookedLockerName === 'A1-01' ? 'A1-02' : 'A1-01';
    await fails(simulate(t, PUP_A1, otherLocker, '900009'), 'InvalidAccessCode');
    t.clock.advance((WINDOW_S + 1) * 1000);
    await ok(simulate(t, PUP_A1, s.bookedLockerName, c.dropPin!));
    expect(await stateOf(t, uid)).toBe('ReadyForPickup');
  });

  it('UnlockShipmentLocker: guesses spread over shipments count per pick up point, and per tenant across pick up points', async () => {
    // three shipments at PUP A1, two wrong PINs each: under the per-shipment (5) and per-locker limits
    const a1 = [await create(PUP_A1, userA1), await create(PUP_A1, userA1), await create(PUP_A1, userA1)];
    for (const uid of a1) for (let i = 0; i < 2; i++) await fails(unlock(uid, `80000${i}`), 'InvalidAccessCode');
    const fresh = await create(PUP_A1, userA1);
    const body = await throttled(unlock(fresh, (await codes(t, fresh)).dropPin!));
    expect(body.message).toMatch(/at this pick up point/);
    // the tenant's other PUP is still checked: 3 more failures there reach the tenant's limit
    const a2 = [await create(PUP_A2, userA2), await create(PUP_A2, userA2)];
    await ok(unlock(a2[0]!, (await codes(t, a2[0]!)).dropPin!));
    await fails(unlock(a2[0]!, '700001'), 'InvalidAccessCode');
    await fails(unlock(a2[0]!, '700002'), 'InvalidAccessCode');
    await fails(unlock(a2[1]!, '700003'), 'InvalidAccessCode');
    const tenantWide = await throttled(unlock(a2[1]!, (await codes(t, a2[1]!)).dropPin!));
    expect(tenantWide.message).toMatch(/for this client/);
    await throttled(simulate(t, PUP_A2, 'A2-03', '123456'));
    // another tenant is not affected by tenant A's guesses
    const tokB = await t.token(TENANT_B.clientId);
    const b = await create(PUP_B1, userB1, tokB);
    await fails(unlock(b, '600001', tokB), 'InvalidAccessCode');
    await ok(unlock(b, (await codes(t, b, tokB)).dropPin!, tokB));
    for (const uid of [...a1, fresh, ...a2]) await cancel(uid);
    await cancel(b, tokB);
  });

  it('counts in the database: failures on one central instance throttle the other', async () => {
    const other = await openSameStore(t, { config: { throttle: { pinMaxFailuresPerLocker: PER_LOCKER, pinMaxFailuresPerPup: PER_PUP, pinMaxFailuresPerTenant: PER_TENANT } } });
    try {
      const uid = await create(PUP_A1, userA1);
      const s = await shipment(t, uid);
      for (let i = 0; i < PER_LOCKER; i++) await fails(simulate(t, PUP_A1, s.bookedLockerName, `50000${i}`), 'InvalidAccessCode');
      const r = await other.post('/v1/Logistics/UnlockShipmentLocker', { shipmentUid: uid, unlockGoal: 'DropOff', pinCode: (await codes(t, uid)).dropPin });
      expect({ status: r.status, error: r.body.error }).toEqual({ status: 429, error: 'RateLimited' });
      expect(Number(r.headers['retry-after'])).toBeGreaterThan(0);
      await cancel(uid);
    } finally {
      await other.close();
    }
  });
});
