// The terminal's live journal, named by its status (docs/edge-protocol.md "Order and
// acknowledgement"): the journal the agent writes now. A late event of a store replaced since can
// no longer take the cursor from it by its seq 1 (which left the live journal unacknowledged for
// good: the agent takes only acknowledgements of its own journal and stops 32 events past the
// oldest unacknowledged one); a replaced store's events are applied late instead of held for ever
// when their seq 1 never comes; and a new store whose events overtook its status is taken over
// when the status comes. Both engines, the embedded broker, a terminal played by a raw MQTT client.
import crypto from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { waitFor } from './support/wait';
import { connectScriptedTerminal, eventAcks, publishEvent, publishJournalStatus, type ScriptedTerminal } from './support/scripted-terminal';
import { PUP_A1 } from './support/fixtures';
import { addUser, doorShipment } from './shipments-helpers';
import { centralMetrics } from '../src/ops/metrics';

const irregular = async (kind: string) => (await centralMetrics.edgeIrregular.get()).values.find((v) => v.labels.kind === kind)?.value ?? 0;

describeEngines('edge events: the live journal the status names', (engine) => {
  let t: TestService;
  let tt: ScriptedTerminal;
  let user: string;
  const live = `journal-${crypto.randomUUID()}`;
  const door = { bus: 'bus0', board: 0, lock: 1 };

  /** an online status naming `journal` as the one the terminal writes (null: an agent that does not name it) */
  const status = (journal: string | null) => publishJournalStatus(tt, journal);
  const named = async () => (await t.ctx.db.kysely.selectFrom('edge_terminals').select('live_journal_id').where('terminal_id', '=', 'term-a1').executeTakeFirstOrThrow()).live_journal_id;

  beforeAll(async () => {
    t = await createTestService(engine, {
      config: { mqtt: { mode: 'embedded', host: '127.0.0.1', port: 0 }, edge: { pollMs: 50, retrySeconds: 0.2, gapResendSeconds: 5, gapGiveUpSeconds: 60, otherJournalWaitSeconds: 10 } },
      startWorkers: true,
    });
    user = await addUser(t, PUP_A1);
    tt = await connectScriptedTerminal(t);
    await status(live);
    await waitFor(() => tt.lastCodes(), 'codes pushed');
    await waitFor(async () => (await named()) === live, 'live journal recorded');
    await sendIn(live, 1, 'doorOpened', door);
    await waitFor(() => lastAck()?.journalId === live && lastAck()?.upTo === 1, 'the live journal acknowledged');
  });
  afterAll(async () => {
    tt?.close();
    await t?.close();
  });

  const sendIn = (journal: string, n: number, type: string, fields: Record<string, unknown>) => publishEvent(tt, journal, n, type, fields, t.clock.now());
  const acks = () => eventAcks(tt);
  const lastAck = () => acks().at(-1);
  const cursor = async () => (await t.ctx.db.kysely.selectFrom('edge_terminals').select(['journal_id', 'applied_seq']).where('terminal_id', '=', 'term-a1').executeTakeFirstOrThrow());
  const eventRow = (eventId: string) => t.ctx.db.kysely.selectFrom('edge_events').select(['processed', 'outcome']).where('event_id', '=', eventId).executeTakeFirstOrThrow();
  const stored = (eventId: string) => waitFor(async () => (await t.ctx.db.kysely.selectFrom('edge_events').select('event_id').where('event_id', '=', eventId).executeTakeFirst()) != null, 'stored');
  const unprocessed = async () => Number((await t.ctx.db.kysely.selectFrom('edge_events').select((eb) => eb.fn.countAll().as('n')).where('terminal_id', '=', 'term-a1').where('processed', '=', 0).executeTakeFirstOrThrow()).n);
  const state = async (uid: string) => (await t.ctx.db.kysely.selectFrom('shipments').select('state_code').where('uid', '=', uid).executeTakeFirstOrThrow()).state_code;
  const history = async (uid: string) => (await t.ctx.db.kysely.selectFrom('shipment_transitions').select('to_state').where('shipment_uid', '=', uid).orderBy('seq').execute()).map((r) => r.to_state);
  const shipment = () => doorShipment(t, user);
  /** a pause of two retry sweeps (edge.retrySeconds 0.2) */
  const settled = () => new Promise((r) => setTimeout(r, 500));
  let liveSeq = 1;

  it("a replaced store's seq 1 that comes late does not take the cursor from the live journal: applied late, the live journal acknowledged on", async () => {
    const s = await shipment();
    const stale = `journal-${crypto.randomUUID()}`;
    const one = await sendIn(stale, 1, 'dropOff', await s.access('dropOff'));
    await stored(one);
    await settled();
    // held for edge.otherJournalWaitSeconds (a status naming it may be on its way), the cursor untouched
    expect((await eventRow(one)).processed).toBe(0);
    expect((await cursor()).journal_id).toBe(live);
    t.clock.advance(6_000); // past edge.gapResendSeconds, not edge.otherJournalWaitSeconds (10 here)
    await settled();
    expect((await eventRow(one)).processed).toBe(0);
    t.clock.advance(5_000);
    await waitFor(async () => (await state(s.uid)) === 'ReadyForPickup', "the replaced store's drop-off applied late");
    expect(await eventRow(one)).toEqual({ processed: 1, outcome: 'DropOff:applied:ReadyForPickup' });
    expect((await cursor()).journal_id).toBe(live);
    // the live journal goes on, acknowledged
    await sendIn(live, ++liveSeq, 'doorClosed', door);
    await waitFor(() => lastAck()?.journalId === live && lastAck()?.upTo === liveSeq, 'the live journal acknowledged on');
    expect(acks().some((a) => a.journalId === stale)).toBe(false);
  });

  it("a replaced store whose seq 1 never comes is applied late, not held for ever", async () => {
    const s = await shipment();
    const stale = `journal-${crypto.randomUUID()}`;
    const three = await sendIn(stale, 3, 'dropOff', await s.access('dropOff'));
    await stored(three);
    t.clock.advance(11_000);
    await waitFor(async () => (await state(s.uid)) === 'ReadyForPickup', 'applied late');
    expect(await unprocessed()).toBe(0);
    expect((await cursor()).journal_id).toBe(live);
    const pick = await sendIn(stale, 4, 'pickUp', { ...(await s.access('pickUp')), item: false });
    await waitFor(async () => (await eventRow(pick)).processed === 1, 'its next event applied late too');
    expect(await state(s.uid)).toBe('PickedUp');
  });

  it('a new store whose events overtook its status: applied late meanwhile, the cursor moves to it when the status names it, its events acknowledged', async () => {
    const s = await shipment();
    const fresh = `journal-${crypto.randomUUID()}`;
    await sendIn(fresh, 1, 'dropOff', await s.access('dropOff'));
    t.clock.advance(11_000); // the status lags past edge.otherJournalWaitSeconds
    await waitFor(async () => (await state(s.uid)) === 'ReadyForPickup', 'its seq 1 applied late');
    expect((await cursor()).journal_id).toBe(live);
    // its next event follows late at once (a journal with an event applied, not the live one)
    const two = await sendIn(fresh, 2, 'pickUp', { ...(await s.access('pickUp')), item: false });
    await waitFor(async () => (await state(s.uid)) === 'PickedUp', 'its seq 2 applied late');
    expect((await eventRow(two)).outcome).toBe('PickUp:applied:PickedUp');
    expect((await cursor()).journal_id).toBe(live);
    expect(acks().some((a) => a.journalId === fresh)).toBe(false); // unacknowledged so far
    await status(fresh);
    // the cursor moves to it, stepping over seq 1 and 2 (applied already), and acknowledges them
    await waitFor(() => lastAck()?.journalId === fresh && lastAck()?.upTo === 2, 'the new journal acknowledged up to 2');
    expect(await cursor()).toMatchObject({ journal_id: fresh });
    expect(Number((await cursor()).applied_seq)).toBe(2);
    // and goes on in order
    await sendIn(fresh, 3, 'doorOpened', door);
    await waitFor(() => lastAck()?.journalId === fresh && lastAck()?.upTo === 3, 'acknowledged up to 3');
    expect(await history(s.uid)).toEqual(['ReadyForDropoff', 'ReadyForPickup', 'PickedUp']);
    expect(await unprocessed()).toBe(0);
  });

  it('events the old journal holds behind a gap when the status names a new one are applied late, not left behind', async () => {
    const old = (await cursor()).journal_id!;
    const oldSeq = Number((await cursor()).applied_seq);
    const s = await shipment();
    const held = await sendIn(old, oldSeq + 2, 'dropOff', await s.access('dropOff')); // seq oldSeq + 1 missing
    await stored(held);
    await settled();
    expect((await eventRow(held)).processed).toBe(0); // held behind the gap
    const skipped0 = await irregular('gap_skipped');
    const fresh = `journal-${crypto.randomUUID()}`;
    await status(fresh);
    await waitFor(async () => (await cursor()).journal_id === fresh, 'the cursor moved to the named journal');
    // the seq missing below the held one is given up on (counted, logged EVENT_GAP_SKIPPED), not left unflagged
    await waitFor(async () => (await irregular('gap_skipped')) === skipped0 + 1, 'the missing seq counted as given up');
    await waitFor(async () => (await state(s.uid)) === 'ReadyForPickup', "the old journal's held drop-off applied late");
    expect(await eventRow(held)).toEqual({ processed: 1, outcome: 'DropOff:applied:ReadyForPickup' });
    expect(await unprocessed()).toBe(0);
    expect(lastAck()).toMatchObject({ journalId: fresh, upTo: 0 });
  });

  it("a pick-up in the new store refused while the old store's drop-off was held is applied again when the drop-off comes late", async () => {
    // a store with nothing applied yet (its seq 1 lost): its drop-off waits edge.otherJournalWaitSeconds once replaced
    const old = `journal-${crypto.randomUUID()}`;
    await status(old);
    await waitFor(async () => (await cursor()).journal_id === old, 'the cursor on the old store');
    const s = await shipment();
    const drop = await sendIn(old, 2, 'dropOff', await s.access('dropOff')); // seq 1 missing: held
    await stored(drop);
    const fresh = `journal-${crypto.randomUUID()}`;
    await status(fresh);
    await waitFor(async () => (await cursor()).journal_id === fresh, 'the cursor moved to the new store');
    // the parcel collected with the new store: refused, its drop-off not applied yet
    const pick = await sendIn(fresh, 1, 'pickUp', { ...(await s.access('pickUp')), item: false });
    await waitFor(async () => (await eventRow(pick)).processed === 1, 'the pick-up applied');
    expect((await eventRow(pick)).outcome).toBe('rejected:InvalidShipmentState');
    t.clock.advance(11_000); // past edge.otherJournalWaitSeconds: the old store's drop-off is late now
    await waitFor(async () => (await state(s.uid)) === 'PickedUp', 'the drop-off applied late, the refused pick-up after it');
    expect(await history(s.uid)).toEqual(['ReadyForDropoff', 'ReadyForPickup', 'PickedUp']);
    expect(await eventRow(pick)).toEqual({ processed: 1, outcome: 'PickUp:applied:PickedUp' });
    expect(await unprocessed()).toBe(0);
  });

  it("a newer store's drop-off applied late before its status came does not undo a refusal of the live journal's (that pick-up came first)", async () => {
    const current = (await cursor()).journal_id!;
    const seqNow = Number((await cursor()).applied_seq);
    const s = await shipment();
    // the live journal: a pick-up refused (nothing dropped off yet)
    const pick = await sendIn(current, seqNow + 1, 'pickUp', { ...(await s.access('pickUp')), item: false });
    await waitFor(async () => (await eventRow(pick)).outcome === 'rejected:InvalidShipmentState', 'the pick-up refused');
    // a newer store (its status not come yet) drops the parcel off: applied late after the wait
    const newer = `journal-${crypto.randomUUID()}`;
    await sendIn(newer, 1, 'dropOff', await s.access('dropOff'));
    t.clock.advance(11_000);
    await waitFor(async () => (await state(s.uid)) === 'ReadyForPickup', 'the drop-off applied late');
    await settled();
    // the pick-up came before it: it stays refused, the parcel stays in the locker
    expect(await state(s.uid)).toBe('ReadyForPickup');
    expect((await eventRow(pick)).outcome).toBe('rejected:InvalidShipmentState');
    await status(newer); // the newer store named at last: the tests after go on from it
    await waitFor(async () => (await cursor()).journal_id === newer, 'the cursor on the newer store');
  });

  it('a new store named by its status first: taken over at its seq 1 at once, in order', async () => {
    const s = await shipment();
    const next = `journal-${crypto.randomUUID()}`;
    await status(next);
    await waitFor(async () => (await named()) === next, 'named');
    await sendIn(next, 1, 'dropOff', await s.access('dropOff'));
    await waitFor(() => lastAck()?.journalId === next && lastAck()?.upTo === 1, 'acknowledged for the new journal');
    expect(await state(s.uid)).toBe('ReadyForPickup');
  });

  it('a status naming the journal the live one replaced (recorded late by a slower instance) changes nothing: journals never come back', async () => {
    const current = (await named())!;
    const replaced = (await t.ctx.db.kysely.selectFrom('edge_terminals').select('previous_live_journal_id').where('terminal_id', '=', 'term-a1').executeTakeFirstOrThrow()).previous_live_journal_id!;
    expect(replaced).toBeTruthy();
    expect(replaced).not.toBe(current);
    const recorded = () => t.ctx.db.kysely.selectFrom('edge_terminals').select('last_status').where('terminal_id', '=', 'term-a1').executeTakeFirstOrThrow();
    await status(replaced);
    await waitFor(async () => JSON.parse((await recorded()).last_status!).journal.id === replaced, 'the stale status recorded');
    await settled();
    expect(await named()).toBe(current);
    expect((await cursor()).journal_id).toBe(current);
    // the live one named again (its next status): nothing moves either
    await status(current);
    await waitFor(async () => JSON.parse((await recorded()).last_status!).journal.id === current, 'recorded');
    expect(await named()).toBe(current);
  });

  it('an online status without a journal id (an older agent) leaves it unknown: a new journal takes over at its seq 1 again', async () => {
    await status(null);
    await waitFor(async () => (await named()) === null, 'unknown again');
    const s = await shipment();
    const older = `journal-${crypto.randomUUID()}`;
    await sendIn(older, 1, 'dropOff', await s.access('dropOff'));
    await waitFor(() => lastAck()?.journalId === older && lastAck()?.upTo === 1, 'taken over at its seq 1');
    expect(await state(s.uid)).toBe('ReadyForPickup');
  });
});
