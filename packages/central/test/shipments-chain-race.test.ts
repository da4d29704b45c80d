// Concurrent requests on a chain (A holds the locker, B swaps A): the pick-up of A changes B
// (PriorPickedUp) while a request on B changes B too. On PostgreSQL every shipment a job changes is
// row-locked and re-read under the lock, so the two serialize whichever comes first; on SQLite the
// single writer serializes them anyway. Either order must end in a consistent state.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { PUP_A1 } from './support/fixtures';
import { shipmentService } from '../src/shipments/service';
import type { PgTxRunner } from '../src/shipments/tx';
import { addUser, booking, codes, dropOff, lockerHolder, lockerOf, ok, shipment, simulate, transitions } from './shipments-helpers';

const ITER = 12;

describeEngines('shipments: concurrent changes on a chain', (engine) => {
  let t: TestService;
  let user: string;
  let user2: string;
  beforeAll(async () => {
    t = await createTestService(engine);
    user = await addUser(t, PUP_A1);
    user2 = await addUser(t, PUP_A1);
  });
  afterAll(async () => t?.close());

  /** A dropped off (ReadyForPickup); B created as its swap; returns A's pick-up PIN and locker. */
  async function chain(bOver: Record<string, unknown>) {
    const a = (await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking() }))).shipmentUid as string;
    await dropOff(t, a);
    const sa = await shipment(t, a);
    const pickPin = (await codes(t, a)).pickPin!;
    const b = (await ok(t.post('/v1/Logistics/CreateLocalShipment', { ...booking(), SwapsShipmentUid: a, ...bOver }))).shipmentUid as string;
    return { a, b, pup: sa.bookedPupUid as string, lockerName: sa.bookedLockerName as string, pickPin };
  }

  /** PostgreSQL: jobs run again after a deadlock or serialization failure (PgTxRunner) */
  const retriesSoFar = () => (shipmentService(t.ctx).tx.inner as Partial<PgTxRunner>).stats?.retries ?? 0;

  async function outboxStates(uid: string): Promise<string[]> {
    const rows = await t.ctx.db.kysely.selectFrom('callback_outbox').select(['sequence', 'payload']).where('shipment_uid', '=', uid).orderBy('sequence').execute();
    return rows.map((r) => JSON.parse(r.payload).message.stateCode as string);
  }

  async function cleanUp(...uids: string[]) {
    for (const u of uids) await t.post('/v1/Logistics/CancelShipment', { shipmentUid: u });
  }

  it('pick-up of A concurrent with SetShipmentReceiver on its swap B: B ends ReadyForPickup (rule 7: the swap item is in) with its receiver', async () => {
    for (let i = 0; i < ITER; i++) {
      const c = await chain({ IsReceiverDelayed: true });
      const [p, s] = await Promise.all([
        simulate(t, c.pup, c.lockerName, c.pickPin),
        t.post('/v1/Logistics/SetShipmentReceiver', { shipmentUid: c.b, toUserUid: user2 }),
      ]);
      expect({ pickUp: p.status, setReceiver: s.status }).toEqual({ pickUp: 200, setReceiver: 200 });
      const sb = await shipment(t, c.b);
      expect({ state: sb.stateCode, to: sb.toUserUid }).toEqual({ state: 'ReadyForPickup', to: user2 });
      expect((await shipment(t, c.a)).stateCode).toBe('PickedUp');
      expect(await outboxStates(c.b)).toContain('ReadyForPickup');
      const tr = await transitions(t, c.b);
      expect(tr.map((x) => x.seq)).toEqual(tr.map((_, k) => k + 1));
      await cleanUp(c.b);
    }
  });

  it('pick-up of A concurrent with CancelShipment on its swap B: the pick-up counts and the locker is released', async () => {
    for (let i = 0; i < ITER; i++) {
      const c = await chain({ ToUserUid: user });
      const locker = await lockerOf(t, c.a);
      const [p, x] = await Promise.all([simulate(t, c.pup, c.lockerName, c.pickPin), t.post('/v1/Logistics/CancelShipment', { shipmentUid: c.b })]);
      // the pick-up always happened; the cancel either came first, or found B already handed the locker
      expect(p.status).toBe(200);
      expect((await shipment(t, c.a)).stateCode).toBe('PickedUp');
      const sb = await shipment(t, c.b);
      if (x.status === 200) {
        expect(sb.stateCode).toBe('Cancelled');
        expect(await lockerHolder(t, locker!)).toBeNull();
      } else {
        // B got A's locker first (ReadyForPickup); cancelling it is then still allowed, so any
        // refusal is a bug
        throw new Error(`cancel refused: ${x.status} ${JSON.stringify(x.body)} (B ${sb.stateCode})`);
      }
      const tr = await transitions(t, c.b);
      expect(tr.map((r) => r.seq)).toEqual(tr.map((_, k) => k + 1));
      await cleanUp(c.a, c.b);
    }
  });

  it('A <- B <- C: pick-up of A concurrent with CancelShipment on B: C moves up or takes the locker, never left behind; no deadlock', async () => {
    for (let i = 0; i < ITER; i++) {
      const c = await chain({ ToUserUid: user });
      const third = (await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking(), SwapsShipmentUid: c.b }))).shipmentUid as string;
      const locker = await lockerOf(t, c.a);
      const retries = retriesSoFar();
      const [p, x] = await Promise.all([simulate(t, c.pup, c.lockerName, c.pickPin), t.post('/v1/Logistics/CancelShipment', { shipmentUid: c.b })]);
      // a deadlock would be detected (after deadlock_timeout, 1 s) and the job retried: both would
      // still succeed, but the chain's lock order (holder first) avoids it
      expect(retriesSoFar()).toBe(retries);
      expect({ pickUp: p.status, cancel: x.status }).toEqual({ pickUp: 200, cancel: 200 });
      expect((await shipment(t, c.a)).stateCode).toBe('PickedUp');
      expect((await shipment(t, c.b)).stateCode).toBe('Cancelled');
      // cancel first: C swaps A, picked up with it (ReadyForPickup); pick-up first: B got the
      // locker and was cancelled, C takes it over (ReadyForDropoff)
      expect(['ReadyForPickup', 'ReadyForDropoff']).toContain((await shipment(t, third)).stateCode);
      expect(await lockerHolder(t, locker!)).toBe(third);
      for (const u of [c.b, third]) {
        const tr = await transitions(t, u);
        expect(tr.map((r) => r.seq)).toEqual(tr.map((_, k) => k + 1));
      }
      await cleanUp(third);
    }
  });
});
