// Which journal is a terminal's live one, and from where a journal counts (docs/edge-protocol.md
// "Order and acknowledgement"), where a stale status or an older agent's cursor had the central
// service acknowledge the wrong thing: journals are ordered by when the central service first saw
// them (edge_journals, migration 413), so a status of a dead store recorded late can no longer take
// the live journal (whose real statuses then all counted as stale: the terminal never acknowledged
// again); a new store meeting a cursor of an agent older than journal ids counts from its seq 1
// (it was acknowledged up to the old count, past what the terminal had sent); and an event value
// the store cannot take no longer holds the terminal for good on PostgreSQL. Both engines, the
// embedded broker, a terminal played by a raw MQTT client.
import crypto from 'node:crypto';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { migrationStore } from './support/migration-store';
import { PUP_A1 } from './support/fixtures';
import { addUser, booking, doorShipment, ok, stateOf } from './shipments-helpers';
import { pinSource } from '../src/shipments/codes';
import { waitFor } from './support/wait';
import { connectScriptedTerminal, eventAcks, publishEvent, publishJournalStatus, type ScriptedTerminal } from './support/scripted-terminal';

describeEngines('edge events: journals in the order first seen', (engine) => {
  let t: TestService;
  let tt: ScriptedTerminal;
  const door = { bus: 'bus0', board: 0, lock: 1 };
  const journal = () => `journal-${crypto.randomUUID()}`;

  beforeEach(async () => {
    t = await createTestService(engine, {
      config: { mqtt: { mode: 'embedded', host: '127.0.0.1', port: 0 }, edge: { pollMs: 50, retrySeconds: 0.2, gapResendSeconds: 5, gapGiveUpSeconds: 60, otherJournalWaitSeconds: 10 } },
      startWorkers: true,
    });
    tt = await connectScriptedTerminal(t);
  });
  afterEach(async () => {
    tt?.close();
    await t?.close();
  });

  // the terminal's clock agrees with the service's (the test's manual clock): door times are not corrected
  const status = (id: string | null) => publishJournalStatus(tt, id, t.clock.now());
  const row = async () => await t.ctx.db.kysely.selectFrom('edge_terminals').select(['live_journal_id', 'journal_id', 'applied_seq', 'last_status']).where('terminal_id', '=', 'term-a1').executeTakeFirst();
  /** the status just sent has been recorded (whatever it did to the live journal) */
  const recorded = async (id: string | null) => waitFor(async () => (JSON.parse((await row())?.last_status ?? 'null') as { journal?: { id?: string } } | null)?.journal?.id === (id ?? undefined), `a status naming ${id} recorded`);
  const live = async () => (await row())?.live_journal_id ?? null;
  const sendIn = (id: string | null, seq: number, type = 'doorOpened', fields: Record<string, unknown> = door) => publishEvent(tt, id, seq, type, fields, t.clock.now());
  const acks = () => eventAcks(tt);
  const acked = (id: string, upTo: number) => waitFor(() => acks().some((a) => a.journalId === id && a.upTo === upTo), `${id} acknowledged up to ${upTo}`);
  const settled = () => new Promise((r) => setTimeout(r, 500));

  it('a status naming a store replaced two stores ago, recorded late, changes nothing: the live store stays acknowledged', async () => {
    const [j1, j2, j3] = [journal(), journal(), journal()];
    await status(j1);
    await waitFor(async () => (await live()) === j1, 'j1 live');
    await sendIn(j1, 1);
    await acked(j1, 1);
    await status(j2);
    await waitFor(async () => (await live()) === j2, 'j2 live');
    await status(j3);
    await waitFor(async () => (await live()) === j3, 'j3 live');
    // a slower instance records the first store's status only now
    await status(j1);
    await recorded(j1);
    expect(await live()).toBe(j3);
    // the terminal's next status names its store again; its events are acknowledged in order
    await status(j3);
    await recorded(j3);
    expect(await live()).toBe(j3);
    await sendIn(j3, 1);
    await acked(j3, 1);
    await sendIn(j3, 2);
    await acked(j3, 2);
    expect((await row())?.journal_id).toBe(j3);
  });

  it('while the live journal is unknown, a late status of the store the cursor left changes nothing; a store never seen is taken', async () => {
    const [j1, j2, j3] = [journal(), journal(), journal()];
    await sendIn(j1, 1);
    await acked(j1, 1);
    // an older agent's status: the live journal unknown
    await status(null);
    await recorded(null);
    expect(await live()).toBeNull();
    // a new store names itself, then the old store's status comes late
    await status(j2);
    await waitFor(async () => (await live()) === j2, 'j2 live');
    await status(j1);
    await recorded(j1);
    expect(await live()).toBe(j2);
    await status(j2);
    await recorded(j2);
    expect(await live()).toBe(j2);
    await sendIn(j2, 1);
    await acked(j2, 1);
    // a store not seen before (no event, no status of it yet): the newest
    await status(j3);
    await waitFor(async () => (await live()) === j3, 'j3 live');
    await sendIn(j3, 1);
    await acked(j3, 1);
  });

  it("a new store meeting the cursor of an agent older than journal ids counts from its seq 1: acknowledged only as far as it came", async () => {
    for (let seq = 1; seq <= 5; seq++) await sendIn(null, seq);
    await waitFor(async () => Number((await row())?.applied_seq) === 5, 'the legacy events applied');
    const j = journal();
    // its seq 2 stored first (two instances behind a shared subscription store in any order; a store retried)
    await sendIn(j, 2);
    await waitFor(async () => (await row())?.journal_id === j, 'the journal taken by the cursor');
    expect(Number((await row())?.applied_seq)).toBe(0);
    await sendIn(j, 1);
    await acked(j, 2);
    await settled();
    expect(acks().filter((a) => a.journalId === j).map((a) => a.upTo)).not.toContain(5);
    expect(await row()).toMatchObject({ journal_id: j, applied_seq: 2 });
    await sendIn(j, 3);
    await acked(j, 3);
    // not applied late (out of order): in order, as a new journal
    const late = await t.ctx.db.kysely.selectFrom('edge_events').select('seq').where('terminal_id', '=', 'term-a1').where('journal_id', '=', j).where('processed', '=', 1).orderBy('seq').execute();
    expect(late.map((r) => Number(r.seq))).toEqual([1, 2, 3]);
  });

  /**
   * A booked, its drop-off PIN's code row and a drop-off event of it (door time `doorAt`, or now);
   * then A cancelled and B booked for the same locker drawing the same PIN, a minute later.
   */
  const reissuedPin = async () => {
    const user = await addUser(t, PUP_A1);
    const j = journal();
    await status(j);
    await waitFor(async () => (await live()) === j, 'live');
    const a = await doorShipment(t, user);
    const pin = await t.ctx.db.kysely.selectFrom('access_codes').select(['uid', 'value', 'locker_uid']).where('shipment_uid', '=', a.uid).where('usage', '=', 'DropOff').where('type', '=', 'Code').executeTakeFirstOrThrow();
    const event = { ...(await a.access('dropOff')), codeId: pin.uid };
    const beforeB = t.clock.now().toISOString();
    t.clock.advance(60_000);
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: a.uid }));
    const draw = pinSource.next;
    let first = true;
    pinSource.next = () => (first ? ((first = false), pin.value) : draw());
    let b: string;
    try {
      b = (await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking({ LockerUid: pin.locker_uid }) }))).shipmentUid as string;
    } finally {
      pinSource.next = draw;
    }
    const bPin = await t.ctx.db.kysely.selectFrom('access_codes').select(['value', 'locker_uid']).where('shipment_uid', '=', b).where('usage', '=', 'DropOff').where('type', '=', 'Code').executeTakeFirstOrThrow();
    expect(bPin).toEqual({ value: pin.value, locker_uid: pin.locker_uid });
    t.clock.advance(60_000);
    return { j, a: a.uid, b, event, beforeB };
  };

  it("a late door event of a code invalidated since does not move another booking that drew the same PIN for the same locker after the door opened", async () => {
    const { j, a, b, event, beforeB } = await reissuedPin();
    // A's courier opened the locker with A's PIN before A was cancelled; the event comes now
    const id = await sendIn(j, 1, 'dropOff', { ...event, at: beforeB });
    await acked(j, 1);
    expect(await stateOf(t, b)).toBe('ReadyForDropoff');
    expect(await stateOf(t, a)).toBe('Cancelled');
    expect((await outcomes([id]))[0]![2]).toMatch(/^rejected:/);
  });

  it("a terminal still holding the old code row opens the locker for the new booking's courier: that booking's drop-off is applied (outside the clock margin)", async () => {
    const { j, a, b, event } = await reissuedPin();
    // within edge.maxClockSkewSeconds (120 s) of B's booking the door time cannot tell the two
    // couriers apart: B is left alone
    const near = await sendIn(j, 1, 'dropOff', { ...event, at: t.clock.now().toISOString() });
    await acked(j, 1);
    expect(await stateOf(t, b)).toBe('ReadyForDropoff');
    expect((await outcomes([near]))[0]![2]).toMatch(/^rejected:/);
    // B's courier typed the PIN well after B was booked; the terminal's cache matched A's old row
    t.clock.advance(120_000);
    const id = await sendIn(j, 2, 'dropOff', { ...event, sessionId: crypto.randomUUID(), at: t.clock.now().toISOString() });
    await acked(j, 2);
    expect(await stateOf(t, b)).toBe('ReadyForPickup');
    expect(await stateOf(t, a)).toBe('Cancelled');
    expect((await outcomes([id]))[0]![2]).toBe('DropOff:applied:ReadyForPickup');
  });

  const outcomes = async (ids: string[]) => {
    const rows = await t.ctx.db.kysely.selectFrom('edge_events').select(['event_id', 'processed', 'attempts', 'outcome']).where('event_id', 'in', ids).execute();
    return ids.map((id) => rows.find((r) => r.event_id === id)).map((r) => [Number(r?.processed), Number(r?.attempts), r?.outcome]);
  };

  it('an agent updated in place whose old event never came sends it at last with its journal id: the count goes on, not a new store', async () => {
    for (const seq of [1, 2, 4, 5]) await sendIn(null, seq);
    await waitFor(async () => Number((await row())?.applied_seq) === 2, 'held behind the missing seq 3');
    t.clock.advance(61_000); // past edge.gapGiveUpSeconds: seq 3 given up
    await waitFor(async () => Number((await row())?.applied_seq) === 5, 'the gap given up');
    const j = journal();
    // the old store's seq 3, never acknowledged, sent again by the updated agent with its journal id
    await sendIn(j, 3);
    await waitFor(async () => (await row())?.journal_id === j, 'the journal taken by the cursor');
    expect(Number((await row())?.applied_seq)).toBe(5);
    await sendIn(j, 6);
    await acked(j, 6);
  });

  it('an event whose board or lock number is not an integer matches no locker: stored and acknowledged; the terminal is not held', async () => {
    const j = journal();
    await status(j);
    await waitFor(async () => (await live()) === j, 'live');
    await sendIn(j, 1);
    const bad = [await sendIn(j, 2, 'boardOffline', { bus: 'bus0', board: 1.5 }), await sendIn(j, 3, 'doorOpened', { bus: 'bus0', board: 0, lock: 3e9 })];
    await sendIn(j, 4, 'doorClosed', door);
    await acked(j, 4);
    // (PostgreSQL refused the integer comparison: the event failed on every retry and held seq 4 for good)
    expect(await outcomes(bad)).toEqual([
      [1, 0, 'stored'],
      [1, 0, 'stored'],
    ]);
  });

  it('an observed event with a value PostgreSQL cannot take (a bus name with U+0000) is refused as malformed and acknowledged, not retried for ever', async () => {
    const j = journal();
    await status(j);
    await waitFor(async () => (await live()) === j, 'live');
    const bad = await sendIn(j, 1, 'boardOffline', { bus: 'bus\u0000x', board: 0 });
    await sendIn(j, 2, 'doorClosed', door);
    await acked(j, 2);
    // SQLite takes the text (no locker of that bus); PostgreSQL's text cannot hold U+0000 (22021)
    expect(await outcomes([bad])).toEqual([[1, 0, engine === 'postgres' ? 'rejected:MalformedEvent' : 'stored']]);
  });
});

describeEngines('migration 413_edge_journals on a database with terminals and events', (engine) => {
  it("orders the journals known so far: the events' by their first arrival, the replaced one and the cursor's before the live one", async () => {
    const store = await migrationStore(engine);
    const { db, migrate } = store;
    try {
      expect((await migrate('412_edge_live_journal')).error).toBeUndefined();
      const ev = (terminal: string, journal: string | null, seq: number, receivedAt: string) => ({ event_id: crypto.randomUUID(), terminal_id: terminal, journal_id: journal, seq, type: 'doorOpened', at: receivedAt, received_at: receivedAt, payload: '{}', processed: 1 as const, outcome: 'stored', attempts: 0 });
      // term-1: journals b (first event at 10:00), a (at 11:00; a late event of b at 12:00); live c (no event), replaced d, cursor a
      // term-3: live and cursor c3 with events, the store it replaced (d3) sent a status and no event;
      // term-4: the replaced x4 and the live y4 with events, and a newer store z4 whose events came before its status
      await db.kysely
        .insertInto('edge_events')
        .values([
          ev('term-1', 'a', 1, '2026-01-01T11:00:00.000Z'),
          ev('term-1', 'b', 1, '2026-01-01T10:00:00.000Z'),
          ev('term-1', 'b', 2, '2026-01-01T12:00:00.000Z'),
          ev('term-1', null, 1, '2026-01-01T09:00:00.000Z'),
          ev('term-2', 'x', 1, '2026-01-01T10:30:00.000Z'),
          ev('term-3', 'c3', 1, '2026-01-01T10:00:00.000Z'),
          ev('term-4', 'x4', 1, '2026-01-01T10:00:00.000Z'),
          ev('term-4', 'y4', 1, '2026-01-01T11:00:00.000Z'),
          ev('term-4', 'z4', 1, '2026-01-01T12:00:00.000Z'),
        ])
        .execute();
      const term = (id: string, cursor: string | null, live: string | null, previous: string | null) => ({ terminal_id: id, epoch: 'e', codes_version: 0, online: 0 as const, status_at: null, last_status: null, last_seq: 0, updated_at: '2026-01-01T12:00:00.000Z', journal_id: cursor, live_journal_id: live, previous_live_journal_id: previous });
      await db.kysely.insertInto('edge_terminals').values([term('term-1', 'a', 'c', 'd'), term('term-2', 'x', null, null), term('term-3', 'c3', 'c3', 'd3'), term('term-4', 'y4', 'y4', 'x4')]).execute();
      expect((await migrate('999')).error).toBeUndefined();
      const rows = await db.kysely.selectFrom('edge_journals').select(['terminal_id', 'journal_id', 'generation']).orderBy('generation').execute();
      const order = (terminal: string) => rows.filter((r) => r.terminal_id === terminal).map((r) => r.journal_id);
      expect(order('term-1')).toEqual(['b', 'a', 'd', 'c']);
      expect(order('term-2')).toEqual(['x']);
      expect(order('term-3')).toEqual(['d3', 'c3']);
      expect(order('term-4')).toEqual(['x4', 'y4', 'z4']);
    } finally {
      await store.close();
    }
  });
});
