// Access codes of a new shipment: five codes written with the shipment (on PostgreSQL in the same
// statement as the shipment's other rows); a PIN that collides with a valid PIN of the pick up
// point is not inserted and is drawn again, on both engines (on PostgreSQL the rows go with the
// COMMIT, so a collision fails it and the whole booking runs again with new PINs). A booking on
// PostgreSQL is two round trips; one whose rows the database refuses at the COMMIT is answered
// 500 with nothing of it left, on both engines.
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { sql } from 'kysely';
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

  // PostgreSQL writes a new shipment's rows with the transaction's COMMIT (shipments/sqlq.ts
  // rawQueryAtCommit): a failure of those rows that is not retryable must fail the booking, with
  // nothing of it left (no shipment, no codes, the locker free), never answer it as booked.
  it.runIf(engine === 'postgres')('a plain booking is two round trips on PostgreSQL: BEGIN with the locker taken, then its rows with COMMIT', async () => {
    // one pooled connection (the service's pool of 1), warm: its statements parsed there
    const one = await createTestService(engine, { config: { database: { poolSize: 1 } } });
    try {
      const u = await addUser(one, PUP_A1);
      const first = await ok(one.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: u, ...booking() }));
      const client = await one.ctx.db.pool!.connect();
      let roundTrips = 0;
      const conn = (client as unknown as { connection: { on(e: string, f: () => void): void; removeListener(e: string, f: () => void): void } }).connection;
      const count = () => roundTrips++;
      conn.on('readyForQuery', count);
      client.release();
      const second = await ok(one.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: u, ...booking() }));
      conn.removeListener('readyForQuery', count);
      expect(roundTrips).toBe(2);
      for (const s of [first, second]) await ok(one.post('/v1/Logistics/CancelShipment', { shipmentUid: s.shipmentUid }));
    } finally {
      await one.close();
    }
  });

  it('a booking whose rows the database refuses at the COMMIT is answered 500 (InternalError), and nothing of it stays', async () => {
    // the shipments table refuses one reference (a trigger on PostgreSQL, on SQLite as well)
    if (engine === 'postgres') {
      await sql`CREATE FUNCTION refuse_marked() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF NEW.reference_no = 'REFUSE-ME' THEN RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$`.execute(t.ctx.db.kysely);
      await sql`CREATE TRIGGER refuse_marked BEFORE INSERT ON shipments FOR EACH ROW EXECUTE FUNCTION refuse_marked()`.execute(t.ctx.db.kysely);
    } else {
      await sql`CREATE TRIGGER refuse_marked BEFORE INSERT ON shipments WHEN NEW.reference_no = 'REFUSE-ME' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`.execute(t.ctx.db.kysely);
    }
    const booked = () => t.ctx.db.kysely.selectFrom('lockers').select('uid').where('pup_uid', '=', PUP_A1).where('booked_shipment_uid', 'is not', null).execute();
    const lockersBefore = (await booked()).length;
    const codesBefore = (await t.ctx.db.kysely.selectFrom('access_codes').select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow()).n;
    const r = await t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ReferenceNo: 'REFUSE-ME', ...booking() });
    expect({ status: r.status, success: r.body.success, error: r.body.error }).toEqual({ status: 500, success: false, error: 'InternalError' });
    expect(await t.ctx.db.kysely.selectFrom('shipments').select('uid').where('reference_no', '=', 'REFUSE-ME').execute()).toEqual([]);
    expect((await booked()).length).toBe(lockersBefore);
    expect((await t.ctx.db.kysely.selectFrom('access_codes').select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow()).n).toBe(codesBefore);
    // and the next booking goes through
    const next = await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ReferenceNo: 'fine', ...booking() }));
    expect((await booked()).length).toBe(lockersBefore + 1);
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: next.shipmentUid }));
  });
});
