// Access codes of a new shipment: five codes written with the shipment (on PostgreSQL in the same
// statement as the shipment's other rows); a PIN that collides with a valid PIN of the pick up
// point is not inserted and is drawn again, on both engines (on PostgreSQL the rows go with the
// COMMIT, so a collision fails it and the whole booking runs again with new PINs).
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { PUP_A1 } from './support/fixtures';
import { newPin, pinSource } from '../src/shipments/codes';
import { shipmentService } from '../src/shipments/service';
import { PgTxRunner } from '../src/shipments/tx';
import { addUser, booking, ok } from './shipments-helpers';

describeEngines('access codes of a new shipment', (engine) => {
  let t: TestService;
  let user: string;
  beforeAll(async () => {
    t = await createTestService(engine);
    user = await addUser(t, PUP_A1);
  });
  afterAll(async () => t?.close());
  afterEach(() => {
    pinSource.next = newPin;
  });

  const codesOf = (uid: string) =>
    t.ctx.db.kysely.selectFrom('access_codes').select(['usage', 'type', 'value', 'valid']).where('shipment_uid', '=', uid).orderBy('usage').orderBy('type').execute();

  it('writes a PIN and a Qr for drop-off and pick-up and a LinkCode, all valid', async () => {
    const s = await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking() }));
    const codes = await codesOf(s.shipmentUid);
    expect(codes.map((c) => `${c.usage}/${c.type}/${c.valid}`)).toEqual(['DropOff/Code/1', 'DropOff/Qr/1', 'LinkCode/Qr/1', 'PickUp/Code/1', 'PickUp/Qr/1']);
    for (const c of codes.filter((x) => x.type === 'Code')) expect(c.value).toMatch(/^\d{6}$/);
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: s.shipmentUid }));
  });

  it('draws a PIN again when it collides with a valid PIN of the same pick up point', async () => {
    const first = await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking() }));
    const taken = (await codesOf(first.shipmentUid)).filter((c) => c.type === 'Code').map((c) => c.value);
    // the next shipment's first two PINs are exactly the ones already in use, then fresh ones
    const queue = [...taken];
    const drawn: string[] = [];
    pinSource.next = () => {
      const v = queue.shift() ?? newPin();
      drawn.push(v);
      return v;
    };
    const inner = shipmentService(t.ctx).tx.inner;
    const retries = inner instanceof PgTxRunner ? inner.stats.retries : 0;
    const second = await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking() }));
    // PostgreSQL: the codes were written with the COMMIT, which the collision failed: the booking ran once more
    if (inner instanceof PgTxRunner) expect(inner.stats.retries - retries).toBe(1);
    const pins = (await codesOf(second.shipmentUid)).filter((c) => c.type === 'Code');
    expect(drawn.length).toBe(4); // two collided, two more were drawn
    expect(pins).toHaveLength(2);
    for (const p of pins) expect(taken).not.toContain(p.value);
    expect(pins.map((p) => p.value).sort()).toEqual(drawn.slice(2).sort());
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: first.shipmentUid }));
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: second.shipmentUid }));
  });
});
