// Per-terminal order, whatever the delivery (issue 11 part 4, docs/edge-protocol.md "Order and
// acknowledgement"): the central service applies a terminal's events in its journal's seq order.
// An event that arrives early is held (stored, not applied) until the gap is filled, never refused
// for good; repeats are applied once; a gap that stays open makes the central ask the terminal to
// send again from it (down/eventAcks resendFrom), and after edge.gapGiveUpSeconds it is skipped.
// Every committed prefix is acknowledged on down/eventAcks. Both engines, the embedded broker and a
// terminal played by a raw MQTT client.
import crypto from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { waitFor } from './support/wait';
import { connectScriptedTerminal, terminalStatus, publishEvent, type ScriptedTerminal } from './support/scripted-terminal';
import { PUP_A1 } from './support/fixtures';
import { addUser, doorShipment } from './shipments-helpers';
import { centralMetrics } from '../src/ops/metrics';

/** locker_edge_events_irregular_total of a kind (one registry for the whole file: compare before and after) */
const irregular = async (kind: string) => (await centralMetrics.edgeIrregular.get()).values.find((v) => v.labels.kind === kind)?.value ?? 0;

describeEngines('edge events: applied in seq order, once, acknowledged', (engine) => {
  let t: TestService;
  let tt: ScriptedTerminal;
  let user: string;
  const P = 'locker/v1/t/term-a1';
  const journalId = `journal-${crypto.randomUUID()}`;

  beforeAll(async () => {
    t = await createTestService(engine, {
      config: { mqtt: { mode: 'embedded', host: '127.0.0.1', port: 0 }, edge: { pollMs: 50, retrySeconds: 0.2, gapResendSeconds: 5, gapGiveUpSeconds: 60 } },
      startWorkers: true,
    });
    user = await addUser(t, PUP_A1);
    tt = await connectScriptedTerminal(t);
    await tt.term.publishAsync(`${P}/up/status`, JSON.stringify(terminalStatus(0, null)), { qos: 1, retain: true });
    await waitFor(() => tt.lastCodes(), 'codes pushed');
  });
  afterAll(async () => {
    tt?.close();
    await t?.close();
  });

  let seq = 0;
  const send = async (s: number, type: string, fields: Record<string, unknown> = {}, eventId: string = crypto.randomUUID()) => {
    await tt.term.publishAsync(`${P}/up/events`, JSON.stringify({ v: 1, eventId, seq: s, terminalId: 'term-a1', journalId, at: t.clock.now().toISOString(), type, ...fields }), { qos: 1 });
    return eventId;
  };
  const acks = () => tt.got.filter((g) => g.kind === 'eventAcks').map((g) => g.body);
  const lastAck = () => acks().at(-1);
  const shipment = () => doorShipment(t, user);
  const state = async (uid: string) => (await t.ctx.db.kysely.selectFrom('shipments').select('state_code').where('uid', '=', uid).executeTakeFirstOrThrow()).state_code;
  const history = async (uid: string) => (await t.ctx.db.kysely.selectFrom('shipment_transitions').select('to_state').where('shipment_uid', '=', uid).orderBy('seq').execute()).map((r) => r.to_state);

  it('in order: each event is applied and acknowledged (upTo = its seq)', async () => {
    const s = await shipment();
    await send(++seq, 'doorOpened', { bus: 'bus0', board: 0, lock: 1 });
    await waitFor(() => lastAck()?.upTo === seq, 'ack 1');
    await send(++seq, 'dropOff', await s.access('dropOff'));
    await waitFor(() => lastAck()?.upTo === seq, 'ack 2');
    expect(lastAck()).toMatchObject({ v: 1, journalId, upTo: 2 });
    expect(await state(s.uid)).toBe('ReadyForPickup');
  });

  it('a pick-up that arrives before its drop-off is held, then both are applied in order; a repeat is applied once', async () => {
    const s = await shipment();
    const dropSeq = ++seq;
    const pickSeq = ++seq;
    const drop = await s.access('dropOff');
    const pick = await s.access('pickUp');
    await send(pickSeq, 'pickUp', pick); // early
    await waitFor(async () => (await t.ctx.db.kysely.selectFrom('edge_events').select('processed').where('seq', '=', pickSeq).executeTakeFirst())?.processed === 0, 'pick-up stored, held');
    // held, not refused: nothing applied, the acknowledgement stays before the gap
    expect(await state(s.uid)).toBe('ReadyForDropoff');
    expect(lastAck()?.upTo).toBe(dropSeq - 1);
    const dropId = await send(dropSeq, 'dropOff', drop);
    await waitFor(async () => (await state(s.uid)) === 'PickedUp', 'both applied');
    await waitFor(() => lastAck()?.upTo === pickSeq, 'ack past both');
    // the same drop-off again (a broker redelivery): stored once, applied once, acknowledged again
    const n = acks().length;
    await send(dropSeq, 'dropOff', drop, dropId);
    await waitFor(() => acks().length > n, 'repeat acknowledged');
    expect(await history(s.uid)).toEqual(['ReadyForDropoff', 'ReadyForPickup', 'PickedUp']);
    const rows = await t.ctx.db.kysely.selectFrom('edge_events').select(['seq', 'outcome']).where('seq', 'in', [dropSeq, pickSeq]).orderBy('seq').execute();
    expect(rows.map((r) => [Number(r.seq), r.outcome])).toEqual([
      [dropSeq, 'DropOff:applied:ReadyForPickup'],
      [pickSeq, 'PickUp:applied:PickedUp'],
    ]);
  });

  it('a gap that stays open: the terminal is asked to send again from it; filled late, all is applied in order', async () => {
    const s = await shipment();
    const missing = ++seq;
    const held = ++seq;
    await send(held, 'dropOff', await s.access('dropOff'));
    await waitFor(async () => (await t.ctx.db.kysely.selectFrom('edge_terminals').select('gap_since').where('terminal_id', '=', 'term-a1').executeTakeFirst())?.gap_since != null, 'gap noticed');
    expect(acks().some((a) => a.resendFrom !== undefined)).toBe(false);
    t.clock.advance(6_000); // past edge.gapResendSeconds
    const ask = await waitFor(() => acks().find((a) => a.resendFrom === missing), 'resend asked');
    expect(ask.upTo).toBe(missing - 1);
    expect(await state(s.uid)).toBe('ReadyForDropoff');
    await send(missing, 'doorOpened', { bus: 'bus0', board: 0, lock: 1 });
    await waitFor(async () => (await state(s.uid)) === 'ReadyForPickup', 'held drop-off applied');
    await waitFor(() => lastAck()?.upTo === held, 'acknowledged past the gap');
  });

  it('a gap never filled is given up on after edge.gapGiveUpSeconds: the held events are applied (an error logged)', async () => {
    const s = await shipment();
    const skipped0 = await irregular('gap_skipped');
    ++seq; // lost for good
    const held = ++seq;
    await send(held, 'dropOff', await s.access('dropOff'));
    await waitFor(async () => (await t.ctx.db.kysely.selectFrom('edge_terminals').select('gap_since').where('terminal_id', '=', 'term-a1').executeTakeFirst())?.gap_since != null, 'gap noticed');
    t.clock.advance(30_000);
    await new Promise((r) => setTimeout(r, 600));
    expect(await state(s.uid)).toBe('ReadyForDropoff'); // still waiting
    t.clock.advance(31_000);
    await waitFor(async () => (await state(s.uid)) === 'ReadyForPickup', 'applied after giving up');
    await waitFor(() => lastAck()?.upTo === held, 'acknowledged');
    // counted for the operator's alert (LockerEdgeEventsGivenUp): one seq given up on
    await waitFor(async () => (await irregular('gap_skipped')) === skipped0 + 1, 'gap_skipped counted');
  });

  const gapNoticed = () => waitFor(async () => (await t.ctx.db.kysely.selectFrom('edge_terminals').select('gap_since').where('terminal_id', '=', 'term-a1').executeTakeFirst())?.gap_since != null, 'gap noticed');
  const eventRow = (eventId: string) => t.ctx.db.kysely.selectFrom('edge_events').select(['processed', 'outcome']).where('event_id', '=', eventId).executeTakeFirstOrThrow();
  const unprocessed = async () => Number((await t.ctx.db.kysely.selectFrom('edge_events').select((eb) => eb.fn.countAll().as('n')).where('terminal_id', '=', 'term-a1').where('processed', '=', 0).executeTakeFirstOrThrow()).n);

  // the parcel collected: its locker free again for the tests after (the pick up point has few that fit)
  const collect = async (x: { uid: string; access: (type: 'dropOff' | 'pickUp') => Promise<Record<string, unknown>> }) => {
    await send(++seq, 'pickUp', { ...(await x.access('pickUp')), item: false });
    await waitFor(async () => (await state(x.uid)) === 'PickedUp', 'collected');
  };

  it('a missing event that comes after its gap was given up is applied late, at its own door time (not left below the cursor)', async () => {
    const s = await shipment();
    const missing = ++seq;
    const held = ++seq;
    await send(held, 'doorOpened', { bus: 'bus0', board: 0, lock: 1 });
    await gapNoticed();
    t.clock.advance(61_000); // past edge.gapGiveUpSeconds: the cursor moves past the missing seq
    await waitFor(() => lastAck()?.upTo === held, 'gap given up, acknowledged past it');
    // the terminal comes back (say from a power cut) and sends its unacknowledged drop-off
    const doorTime = new Date(t.clock.now().getTime() - 90_000).toISOString(); // before the gap was given up
    const eventId = crypto.randomUUID();
    const acked = acks().length;
    const late0 = await irregular('late');
    await tt.term.publishAsync(`${P}/up/events`, JSON.stringify({ v: 1, eventId, seq: missing, terminalId: 'term-a1', journalId, at: doorTime, type: 'dropOff', ...(await s.access('dropOff')) }), { qos: 1 });
    await waitFor(async () => (await state(s.uid)) === 'ReadyForPickup', 'the late drop-off applied');
    await waitFor(async () => (await irregular('late')) === late0 + 1, 'counted as late');
    expect(await eventRow(eventId)).toEqual({ processed: 1, outcome: 'DropOff:applied:ReadyForPickup' });
    const tr = await t.ctx.db.kysely.selectFrom('shipment_transitions').select(['to_state', 'at']).where('shipment_uid', '=', s.uid).where('to_state', '=', 'ReadyForPickup').executeTakeFirstOrThrow();
    // at the door time (corrected by the terminal's measured clock offset, edge/clock.ts), long before it arrived
    expect(Date.parse(tr.at)).toBeLessThan(t.clock.now().getTime() - 45_000);
    expect(await unprocessed()).toBe(0);
    // acknowledged again, the cursor where it was: the acknowledgement does not go back
    await waitFor(() => acks().length > acked, 'acknowledged');
    expect(lastAck()?.upTo).toBe(held);
    await collect(s);
  });

  it('a pick-up refused while its drop-off was missing is applied again once the drop-off comes late', async () => {
    const s = await shipment();
    const missing = ++seq;
    const pickSeq = ++seq;
    const pickId = await send(pickSeq, 'pickUp', { ...(await s.access('pickUp')), item: false });
    await gapNoticed();
    t.clock.advance(61_000); // the gap given up on: the pick-up applied, refused for the shipment's state
    await waitFor(async () => (await eventRow(pickId)).outcome === 'rejected:InvalidShipmentState', 'pick-up refused');
    expect(await state(s.uid)).toBe('ReadyForDropoff');
    const reapplied0 = await irregular('reapplied');
    await send(missing, 'dropOff', await s.access('dropOff')); // the drop-off, late
    await waitFor(async () => (await state(s.uid)) === 'PickedUp', 'the drop-off applied late and the refused pick-up after it');
    await waitFor(async () => (await irregular('reapplied')) === reapplied0 + 1, 'counted as applied again');
    expect(await history(s.uid)).toEqual(['ReadyForDropoff', 'ReadyForPickup', 'PickedUp']);
    expect(await eventRow(pickId)).toEqual({ processed: 1, outcome: 'PickUp:applied:PickedUp' });
    expect(await unprocessed()).toBe(0);
  });

  it('two gaps in a row: the second, noticed once the first is given up on, is asked for at once and given up on edge.gapResendSeconds later', async () => {
    const a = await shipment();
    const b = await shipment();
    ++seq; // lost for good
    const heldA = ++seq;
    ++seq; // lost for good too
    const heldB = ++seq;
    await send(heldA, 'dropOff', await a.access('dropOff'));
    await send(heldB, 'dropOff', await b.access('dropOff'));
    await gapNoticed();
    t.clock.advance(61_000);
    await waitFor(async () => (await state(a.uid)) === 'ReadyForPickup', 'the first gap given up on, the event behind it applied');
    // the second gap, noticed only now, is asked for once at once, not after a whole edge.gapGiveUpSeconds
    await waitFor(() => acks().find((x) => x.resendFrom === heldA + 1), 'the second gap asked for');
    expect(await state(b.uid)).toBe('ReadyForDropoff');
    t.clock.advance(6_000); // edge.gapResendSeconds later
    await waitFor(async () => (await state(b.uid)) === 'ReadyForPickup', 'the second gap given up on too');
    await waitFor(() => lastAck()?.upTo === heldB, 'acknowledged past both');
    await collect(a);
    await collect(b);
  });

  it('the retry sweep reaches every terminal with unprocessed events, also past the first thousand', async () => {
    const s = await shipment();
    ++seq; // lost for good
    const held = ++seq;
    await send(held, 'dropOff', await s.access('dropOff'));
    await gapNoticed();
    // 1,005 other terminals (ids before term-a1) whose events are never applied (no cursor row)
    const junk = Array.from({ length: 1005 }, (_, i) => ({ event_id: `junk-${i}`, terminal_id: `t-${String(i).padStart(4, '0')}`, journal_id: null, seq: 1, type: 'doorOpened', at: t.clock.now().toISOString(), received_at: t.clock.now().toISOString(), payload: '{}', processed: 0 as const, outcome: null, attempts: 0 }));
    for (let i = 0; i < junk.length; i += 200) await t.ctx.db.kysely.insertInto('edge_events').values(junk.slice(i, i + 200)).execute();
    try {
      t.clock.advance(61_000); // only a retry sweep gives the gap up now (nothing else arrives)
      await waitFor(async () => (await state(s.uid)) === 'ReadyForPickup', 'gap given up by a retry sweep', 20_000);
    } finally {
      await t.ctx.db.kysely.deleteFrom('edge_events').where('event_id', 'like', 'junk-%').execute();
    }
    await collect(s);
  });

  it('a new journal (a new store) starts again at seq 1 and is applied from there', async () => {
    const s = await shipment();
    const other = `journal-${crypto.randomUUID()}`;
    await tt.term.publishAsync(`${P}/up/events`, JSON.stringify({ v: 1, eventId: crypto.randomUUID(), seq: 1, terminalId: 'term-a1', journalId: other, at: t.clock.now().toISOString(), type: 'dropOff', ...(await s.access('dropOff')) }), { qos: 1 });
    await waitFor(async () => (await state(s.uid)) === 'ReadyForPickup', 'applied');
    await waitFor(() => lastAck()?.journalId === other && lastAck()?.upTo === 1, 'acknowledged for the new journal');
  });

  it('an event of the replaced journal that comes after the new one took over is applied late; a newer journal waits for its seq 1', async () => {
    const current = lastAck()!.journalId as string; // the new journal of the test before
    expect(current).not.toBe(journalId);
    const s = await shipment();
    // the old journal's event, seq past anything it sent: neither the current journal nor a seq 1
    const old = await send(++seq, 'dropOff', await s.access('dropOff'));
    await waitFor(async () => (await state(s.uid)) === 'ReadyForPickup', 'the old journal\'s late drop-off applied');
    expect(await eventRow(old)).toEqual({ processed: 1, outcome: 'DropOff:applied:ReadyForPickup' });
    // a third journal's seq 2 before its seq 1: held (a journal with nothing applied is not an old one)
    const third = `journal-${crypto.randomUUID()}`;
    const sendThird = (n: number, type: string, fields: Record<string, unknown>) => sendIn(third, n, type, fields);
    const second = await sendThird(2, 'pickUp', { ...(await s.access('pickUp')), item: false });
    await waitFor(async () => (await t.ctx.db.kysely.selectFrom('edge_events').select('event_id').where('event_id', '=', second).executeTakeFirst()) != null, 'stored');
    await new Promise((r) => setTimeout(r, 400)); // two retry sweeps
    expect((await eventRow(second)).processed).toBe(0);
    expect(await state(s.uid)).toBe('ReadyForPickup');
    await sendThird(1, 'doorOpened', { bus: 'bus0', board: 0, lock: 1 });
    await waitFor(async () => (await state(s.uid)) === 'PickedUp', 'the third journal applied from its seq 1');
    await waitFor(() => lastAck()?.journalId === third && lastAck()?.upTo === 2, 'acknowledged for the third journal');
    expect(await unprocessed()).toBe(0);
  });

  const cursorJournal = async () => (await t.ctx.db.kysely.selectFrom('edge_terminals').select('journal_id').where('terminal_id', '=', 'term-a1').executeTakeFirstOrThrow()).journal_id;
  const sendIn = (journal: string, n: number, type: string, fields: Record<string, unknown>) => publishEvent(tt, journal, n, type, fields, t.clock.now());
  const door = { bus: 'bus0', board: 0, lock: 1 };

  it('a new journal whose seq 1 has not come is held, also past edge.gapGiveUpSeconds, and taken over from its seq 1 when it comes', async () => {
    const before = await cursorJournal();
    const live = `journal-${crypto.randomUUID()}`;
    const s = await shipment();
    const three = await sendIn(live, 3, 'dropOff', await s.access('dropOff')); // seq 1 and 2 held up (say, a power cut)
    await waitFor(async () => (await t.ctx.db.kysely.selectFrom('edge_events').select('event_id').where('event_id', '=', three).executeTakeFirst()) != null, 'stored');
    t.clock.advance(61_000);
    await new Promise((r) => setTimeout(r, 600)); // retry sweeps
    // never taken over without its seq 1: which journal is the live one cannot be told, and a wrong
    // guess would leave the live one unacknowledged for good; it stays unprocessed (the gauges count it)
    expect(await unprocessed()).toBe(1);
    expect(await state(s.uid)).toBe('ReadyForDropoff');
    expect((await eventRow(three)).processed).toBe(0);
    expect(await cursorJournal()).toBe(before);
    await sendIn(live, 1, 'doorOpened', door);
    await sendIn(live, 2, 'doorClosed', door);
    await waitFor(async () => (await state(s.uid)) === 'ReadyForPickup', 'taken over from its seq 1, applied in order');
    expect(await cursorJournal()).toBe(live);
    await waitFor(() => lastAck()?.journalId === live && lastAck()?.upTo === 3, 'the new journal acknowledged up to 3');
    expect(await unprocessed()).toBe(0);
    await collect(s);
  });
});
