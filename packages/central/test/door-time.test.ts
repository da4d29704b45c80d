// Door time is the truth (issue 11, part 3; docs/state-machine.md "Door time" and "The expiry
// race"), with a terminal played over the embedded broker and a ManualClock, on both engines:
// - offline for a simulated day with a drop-off before the deadline: not expired; the transition,
//   its history row, GetShipments' and the callback's stateStart carry the door time, the arrival
//   time is kept, updatedSince still sees the change; the booking that was not dropped off expires
//   only once the terminal has reported everything up to after its deadline;
// - the expiry race: the clock expired the booking (the terminal silent past edge.maxOfflineHours)
//   before the drop-off arrived: the doors win (locker free; locker re-booked meanwhile: that
//   booking moves); a drop-off after the deadline stays refused, with the reason recorded;
// - clock skew: a terminal 10 minutes ahead is flagged, its event's door time corrected.
import crypto from 'node:crypto';
import { afterEach, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { waitFor } from './support/wait';
import { connectScriptedTerminal, type ScriptedTerminal } from './support/scripted-terminal';
import { PUP_A1 } from './support/fixtures';
import { addUser, booking, codes, lockerHolder, lockerOf, ok, shipment, simulate, stateOf, transitions } from './shipments-helpers';
import { shipmentService } from '../src/shipments/service';
import { toApiTime } from '../src/ids';

const H = 3_600_000;
const MIN = 60_000;
const P = 'locker/v1/t/term-a1';

describeEngines('door time', (engine) => {
  let t: TestService;
  let tt: ScriptedTerminal;
  let user: string;
  let seq = 0;

  const setup = async (edge: Record<string, unknown> = {}) => {
    seq = 0;
    t = await createTestService(engine, {
      config: { mqtt: { mode: 'embedded', host: '127.0.0.1', port: 0 }, edge: { pollMs: 50, retrySeconds: 0.2, ...edge }, shipments: { dropOffDeadlineHours: 12, expirySweepSeconds: 3600 } },
      startWorkers: true,
    });
    user = await addUser(t, PUP_A1);
    tt = await connectScriptedTerminal(t);
  };
  afterEach(async () => {
    tt?.close();
    await t?.close();
  });

  const db = () => t.ctx.db.kysely;
  const create = async (over: Record<string, unknown> = {}) => (await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking(), ...over }))).shipmentUid as string;
  const term = () => db().selectFrom('edge_terminals').selectAll().where('terminal_id', '=', 'term-a1').executeTakeFirst();

  /** an online status of the terminal; `at` is its clock (default: the central clock) */
  const online = async (o: { at?: Date; unsent?: number; lastSeq?: number } = {}) => {
    const now = t.clock.now().toISOString();
    const msg = { v: 1, state: 'online', terminalId: 'term-a1', agentVersion: 'test', startedAt: now, at: (o.at ?? t.clock.now()).toISOString(), codes: { epoch: null, version: 0, count: 0 }, journal: { unsent: o.unsent ?? 0, lastSeq: o.lastSeq ?? seq }, buses: [] };
    await tt.term.publishAsync(`${P}/up/status`, JSON.stringify(msg), { qos: 1, retain: true });
    await waitFor(async () => (await term())?.status_at === now && (await term())?.last_status === JSON.stringify(msg), 'status stored');
  };
  const offline = async () => {
    const now = t.clock.now().toISOString();
    await tt.term.publishAsync(`${P}/up/status`, JSON.stringify({ v: 1, state: 'offline', terminalId: 'term-a1', reason: 'connection-lost' }), { qos: 1, retain: true });
    await waitFor(async () => (await term())?.status_at === now && (await term())?.online === 0, 'offline stored');
  };
  /** a dropOff event of this shipment's drop-off code, with the terminal's time `at` */
  const dropOffEvent = async (uid: string, at: Date) => {
    const c = await db().selectFrom('access_codes').select(['uid', 'locker_uid']).where('shipment_uid', '=', uid).where('usage', '=', 'DropOff').where('type', '=', 'Qr').orderBy('created_at', 'desc').executeTakeFirstOrThrow();
    const ev = { v: 1, eventId: crypto.randomUUID(), seq: ++seq, terminalId: 'term-a1', at: at.toISOString(), type: 'dropOff', sessionId: `s${seq}`, shipmentUid: uid, codeId: c.uid, lockerUid: c.locker_uid, bus: 'bus0', board: 0, lock: 1, item: true };
    await tt.term.publishAsync(`${P}/up/events`, JSON.stringify(ev), { qos: 1 });
    return waitFor(async () => {
      const r = await db().selectFrom('edge_events').select(['outcome', 'processed']).where('event_id', '=', ev.eventId).executeTakeFirst();
      return r?.processed && r.outcome && r.outcome !== 'applying' ? r.outcome : null;
    }, `outcome of dropOff seq ${seq}`);
  };
  const callbacks = async (uid: string) =>
    (await db().selectFrom('callback_outbox').select(['sequence', 'payload']).where('shipment_uid', '=', uid).orderBy('sequence').execute()).map((r) => JSON.parse(r.payload).message as { sequence: number; stateCode: string; stateStart: string });

  it('offline for a day with a drop-off before the deadline: not expired; door time on the transition, GetShipments and the callback; arrival kept', async () => {
    await setup();
    const t0 = t.clock.now();
    const dropped = await create();
    const waiting = await create();
    await online(); // the terminal had reported everything at t0
    t.clock.advance(30 * MIN);
    await offline();
    const door = new Date(t0.getTime() + H); // the courier's drop-off, journalled on the terminal while it is offline

    t.clock.advance(24 * H - 30 * MIN); // a day later, 12 h past both deadlines
    const svc = shipmentService(t.ctx);
    expect(await svc.expireDue()).toBe(0); // the terminal may hold drop-offs made before the deadlines
    expect(await stateOf(t, dropped)).toBe('ReadyForDropoff');
    expect(await stateOf(t, waiting)).toBe('ReadyForDropoff');

    // it reconnects: its status says one event is still unsent -> still nothing expires
    const arrival = t.clock.now();
    await online({ unsent: 1, lastSeq: 1 });
    expect(await svc.expireDue()).toBe(0);
    expect(await dropOffEvent(dropped, door)).toBe('DropOff:applied:ReadyForPickup');

    const s = await shipment(t, dropped);
    expect(s.stateCode).toBe('ReadyForPickup');
    expect(s.stateStart).toBe(toApiTime(door)); // GetShipments: the door time
    const tr = (await transitions(t, dropped)).at(-1)!;
    expect(tr).toMatchObject({ from_state: 'ReadyForDropoff', to_state: 'ReadyForPickup', cause: 'door', at: door.toISOString(), received_at: arrival.toISOString() });
    const cb = await callbacks(dropped);
    expect(cb.map((m) => [m.sequence, m.stateCode, m.stateStart])).toEqual([
      [1, 'ReadyForDropoff', toApiTime(t0)],
      [2, 'ReadyForPickup', toApiTime(door)],
    ]);
    // updatedSince is about when the record changed here: the arrival, not the door time
    const since = await ok(t.post('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 50, activeShipments: true, updatedSince: toApiTime(new Date(arrival.getTime() - 1000)) }));
    expect(since.items.map((i: any) => i.shipmentUid)).toEqual([dropped]);

    // now everything the terminal journalled up to after the deadline is here: the other booking expires
    expect(await svc.expireDue()).toBe(1);
    expect(await stateOf(t, waiting)).toBe('Expired');
    expect(await stateOf(t, dropped)).toBe('ReadyForPickup');
  });

  it('the expiry race, locker still free: expired first (terminal silent past the cap), then a drop-off with an earlier door time: the doors win', async () => {
    await setup();
    const t0 = t.clock.now();
    const uid = await create();
    const locker = (await lockerOf(t, uid))!;
    const pickBefore = (await codes(t, uid)).pickPin;
    await online();
    await offline();
    const svc = shipmentService(t.ctx);
    t.clock.advance(13 * H);
    expect(await svc.expireDue()).toBe(0); // silent 13 h: it may still report
    t.clock.advance(60 * H); // silent 73 h > edge.maxOfflineHours (72): the sweep stops waiting
    expect(await svc.expireDue()).toBe(1);
    expect(await stateOf(t, uid)).toBe('Expired');
    expect(await lockerHolder(t, locker)).toBeNull();

    const door = new Date(t0.getTime() + 2 * H);
    await online({ unsent: 1, lastSeq: 1 });
    expect(await dropOffEvent(uid, door)).toBe('DropOff:applied:ReadyForPickup');
    const s = await shipment(t, uid);
    expect(s).toMatchObject({ stateCode: 'ReadyForPickup', stateStart: toApiTime(door), bookedPupUid: PUP_A1 });
    expect(await lockerHolder(t, locker)).toBe(uid);
    const tr = await transitions(t, uid);
    expect(tr.map((r) => [r.from_state, r.to_state, r.cause])).toEqual([
      [null, 'ReadyForDropoff', 'api'],
      ['ReadyForDropoff', 'Expired', 'clock'],
      ['Expired', 'ReadyForPickup', 'door'],
    ]);
    expect(tr[2]!.at).toBe(door.toISOString());
    expect(tr[2]!.detail).toContain('expiry is undone');
    const cb = await callbacks(uid);
    expect(cb.map((m) => [m.sequence, m.stateCode])).toEqual([
      [1, 'ReadyForDropoff'],
      [2, 'Expired'],
      [3, 'ReadyForPickup'],
    ]);
    expect(cb[2]!.stateStart).toBe(toApiTime(door)); // earlier than the Expired message's: order by sequence
    // the receiver's pick-up code works again, and the parcel can be collected
    const c = await codes(t, uid);
    expect(c.pickPin).toBe(pickBefore);
    await ok(simulate(t, PUP_A1, s.bookedLockerName, c.pickPin!));
    expect(await stateOf(t, uid)).toBe('PickedUp');
  });

  it('the expiry race, locker re-booked meanwhile: the parcel keeps its locker, the new booking moves to another locker with its codes', async () => {
    await setup({ maxOfflineHours: 1 });
    const t0 = t.clock.now();
    const uid = await create();
    const locker = (await lockerOf(t, uid))!;
    await online();
    await offline();
    t.clock.advance(13 * H);
    expect(await shipmentService(t.ctx).expireDue()).toBe(1); // silent 13 h > 1 h cap
    const other = await create({ LockerUid: locker });
    expect(await lockerHolder(t, locker)).toBe(other);

    await online({ unsent: 1, lastSeq: 1 });
    expect(await dropOffEvent(uid, new Date(t0.getTime() + H))).toBe('DropOff:applied:ReadyForPickup');
    expect(await lockerHolder(t, locker)).toBe(uid);
    const moved = (await lockerOf(t, other))!;
    expect(moved).not.toBe(locker);
    expect(await lockerHolder(t, moved)).toBe(other);
    expect(await stateOf(t, other)).toBe('ReadyForDropoff');
    const valid = await db().selectFrom('access_codes').select('locker_uid').where('shipment_uid', '=', other).where('valid', '=', 1).where('usage', 'in', ['DropOff', 'PickUp']).execute();
    expect(valid.length).toBe(4);
    expect(valid.every((v) => v.locker_uid === moved)).toBe(true);
    const last = (await transitions(t, other)).at(-1)!;
    expect(last).toMatchObject({ from_state: 'ReadyForDropoff', to_state: 'ReadyForDropoff', cause: 'door' });
    expect(last.detail).toContain(uid);
    expect((await callbacks(other)).map((m) => m.stateCode)).toEqual(['ReadyForDropoff', 'ReadyForDropoff']);
    // the moved booking's drop-off code opens its new locker
    const s = await shipment(t, other);
    await ok(simulate(t, PUP_A1, s.bookedLockerName, (await codes(t, other)).dropPin!));
    expect(await stateOf(t, other)).toBe('ReadyForPickup');
  });

  it('the expiry race, drop-off after the deadline: stays Expired, refused with the reason', async () => {
    await setup({ maxOfflineHours: 1 });
    const t0 = t.clock.now();
    const uid = await create();
    await online();
    await offline();
    t.clock.advance(14 * H);
    expect(await shipmentService(t.ctx).expireDue()).toBe(1);
    await online({ unsent: 1, lastSeq: 1 });
    expect(await dropOffEvent(uid, new Date(t0.getTime() + 13 * H))).toBe('rejected:DropOffAfterDeadline');
    expect(await stateOf(t, uid)).toBe('Expired');
    expect((await callbacks(uid)).map((m) => m.stateCode)).toEqual(['ReadyForDropoff', 'Expired']);
  });

  it('clock skew: a terminal 10 min ahead is flagged, and its event door time is corrected by the measured offset', async () => {
    await setup();
    const uid = await create();
    t.clock.advance(20 * MIN);
    await online({ at: new Date(t.clock.now().getTime() + 10 * MIN) });
    const row = await term();
    expect(row).toMatchObject({ clock_skewed: 1 });
    expect(Number(row!.clock_offset_ms)).toBe(-10 * MIN);
    expect(row!.clock_measured_at).toBe(t.clock.now().toISOString());

    // the door closed 5 min ago in central time; the terminal's clock said 5 min from now
    const real = new Date(t.clock.now().getTime() - 5 * MIN);
    expect(await dropOffEvent(uid, new Date(real.getTime() + 10 * MIN))).toBe('DropOff:applied:ReadyForPickup');
    expect((await shipment(t, uid)).stateStart).toBe(toApiTime(real));
    expect((await transitions(t, uid)).at(-1)).toMatchObject({ at: real.toISOString(), received_at: t.clock.now().toISOString() });
    expect((await callbacks(uid)).at(-1)!.stateStart).toBe(toApiTime(real));

    // a status within the limit clears the flag
    await online({ at: new Date(t.clock.now().getTime() - 30_000) });
    expect(await term()).toMatchObject({ clock_skewed: 0 });
  });
});
