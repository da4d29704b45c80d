// CreateLocalShipment's account checks (FromUserUid, ToUserUid) answer as before whichever way they
// run: on PostgreSQL a plain booking checks them in its first statement (shipments/booking.ts
// userChecks), on SQLite before the booking. Precedence (InvalidPupUid, then FromUserUid, then
// ToUserUid, then NoLockerAvailable), the message, and nothing taken or stored by a refused call.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { PUP_A1, PUP_B1, UNKNOWN_UID } from './support/fixtures';
import { addUser, booking, fails, ok } from './shipments-helpers';

describeEngines('shipments: account checks of a booking', (engine) => {
  let t: TestService;
  let user: string;
  let userB: string;
  beforeAll(async () => {
    t = await createTestService(engine);
    user = await addUser(t, PUP_A1);
    userB = await addUser(t, PUP_B1);
  });
  afterAll(async () => t?.close());

  const create = (body: Record<string, unknown>) => t.post('/v1/Logistics/CreateLocalShipment', body);
  const counts = async () => {
    const k = t.ctx.db.kysely;
    const booked = await k.selectFrom('lockers').select((eb) => eb.fn.countAll<number>().as('n')).where('booked_shipment_uid', 'is not', null).executeTakeFirstOrThrow();
    const stored = await k.selectFrom('shipments').select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow();
    return [Number(booked.n), Number(stored.n)];
  };

  it('FromUserUid is checked before ToUserUid, with the same message', async () => {
    const before = await counts();
    const both = await fails(create({ FromUserUid: userB, ToUserUid: UNKNOWN_UID, ...booking() }), 'InvalidUserUid');
    expect(both.message).toBe(`FromUserUid: ${userB} is not an account this client can manage`);
    const to = await fails(create({ FromUserUid: user, ToUserUid: UNKNOWN_UID, ...booking() }), 'InvalidUserUid');
    expect(to.message).toBe(`ToUserUid: ${UNKNOWN_UID} is not an account this client can manage`);
    expect(await counts()).toEqual(before); // no locker taken, nothing stored
  });

  it('an unmanageable account is refused before NoLockerAvailable, and an unknown PUP before both', async () => {
    const huge = { Dimension: { width: 10_000, height: 10_000, length: 10_000 } };
    await fails(create({ ToUserUid: UNKNOWN_UID, ...booking(huge) }), 'InvalidUserUid');
    await fails(create({ ToUserUid: user, ...booking(huge) }), 'NoLockerAvailable');
    await fails(create({ ToUserUid: UNKNOWN_UID, ...booking({ PupUid: PUP_B1 }) }), 'InvalidPupUid');
  });

  it('accounts that pass: the booking is made', async () => {
    const b = await ok(create({ FromUserUid: user, ToUserUid: user, ...booking() }));
    expect(b.lockerName).toBeTruthy();
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: b.shipmentUid }));
  });
});
