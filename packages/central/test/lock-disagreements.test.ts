// The pure parts of issue 11 part 7 (edge/observations.ts): how terminal events become a lock's
// observed state (observe), and the table of disagreements between that state and the shipment
// holding the locker (disagreements), with the grace that keeps an in-flight event from counting.
import { describe, expect, it } from 'vitest';
import { disagreements, observe, type LockerHolding, type LockObservation, type ObservedEvent } from '../src/edge/observations';
import { formatDisagreements } from '../src/ops/disagreements-report';

const L = { lockerUid: 'locker-1', pupUid: 'pup-1' };
let n = 0;
const ev = (type: string, fields: Record<string, unknown> = {}, over: Partial<ObservedEvent> = {}): ObservedEvent => {
  n++;
  return { terminalId: 'term-1', seq: n, eventId: `e${n}`, type, at: `2026-03-01T10:00:${String(n % 60).padStart(2, '0')}.000Z`, receivedAt: '2026-03-01T10:01:00.000Z', fields, ...over };
};
const run = (...events: ObservedEvent[]) => events.reduce<LockObservation | null>((o, e) => observe(o, e, L) ?? o, null);

describe('observe: terminal events -> the lock observed state', () => {
  it('a drop-off door cycle: open, item placed, closed with the item', () => {
    const o = run(ev('doorOpened', { item: false, commanded: true }), ev('itemPlaced'), ev('doorClosed', { item: true }));
    expect(o).toMatchObject({ door: 'closed', item: true, leftOpenAt: null, jammedAt: null, boardOfflineAt: null, seq: n, terminalId: 'term-1' });
  });

  it('an item removed, a door closed on a lock without item sensor (item null: unknown)', () => {
    expect(run(ev('doorClosed', { item: true }), ev('itemRemoved'))).toMatchObject({ item: false });
    expect(run(ev('doorClosed', { item: true }), ev('doorClosed', { item: null }))).toMatchObject({ item: null });
    // a field not reported keeps what was known
    expect(run(ev('itemPlaced'), ev('doorClosed', {}))).toMatchObject({ item: true, door: 'closed' });
  });

  it('faults: left open until closed, jam until the door moves, board offline until online', () => {
    const opened = ev('doorOpened', { item: false });
    const left = ev('doorLeftOpen', { openMs: 130_000 });
    expect(run(opened, left)).toMatchObject({ door: 'open', leftOpenAt: left.at });
    expect(run(ev('doorOpened', { item: false }), ev('doorLeftOpen'), ev('doorClosed', { item: false }))).toMatchObject({ door: 'closed', leftOpenAt: null });
    const closed = ev('doorClosed', { item: false });
    const jam = ev('jam', { cause: 'latch-not-released' });
    expect(run(closed, jam)).toMatchObject({ jammedAt: jam.at, door: 'closed' });
    expect(run(ev('jam'), ev('doorOpened', { item: false }))).toMatchObject({ jammedAt: null, door: 'open' });
    const off = ev('boardOffline', { error: 'timeout' });
    expect(run(off, ev('boardOffline'))).toMatchObject({ boardOfflineAt: off.at }); // since the first
    expect(run(ev('boardOffline'), ev('boardOnline'))).toMatchObject({ boardOfflineAt: null });
    expect(run(ev('forcedOpen', { reason: 'door' }))).toMatchObject({ door: 'open' });
    // an unlock the terminal could not watch (board unreadable, agent dead): the door is shut now
    expect(run(ev('doorOpened', { item: false }), ev('jam'), ev('unlockUnobserved', { item: true, afterMs: 9000 }))).toMatchObject({ door: 'closed', item: true, jammedAt: null });
    expect(run(ev('forcedOpen', { reason: 'item' }))).toBeNull();
  });

  it('only a newer event of the terminal (by seq) replaces the observation; another terminal by its time', () => {
    const closed = run(ev('doorClosed', { item: true }))!;
    expect(observe(closed, ev('itemRemoved', {}, { seq: closed.seq }), L)).toBeNull(); // a repeat
    expect(observe(closed, ev('itemRemoved', {}, { seq: closed.seq - 1 }), L)).toBeNull(); // older
    expect(observe(closed, ev('itemRemoved', {}, { seq: closed.seq + 1 }), L)).toMatchObject({ item: false });
    // a replaced terminal starts its seq at 1: its events count by their time
    expect(observe(closed, ev('itemRemoved', {}, { terminalId: 'term-2', seq: 1, at: '2026-03-01T09:00:00.000Z' }), L)).toBeNull();
    expect(observe(closed, ev('itemRemoved', {}, { terminalId: 'term-2', seq: 1, at: '2026-03-01T11:00:00.000Z' }), L)).toMatchObject({ item: false, terminalId: 'term-2', seq: 1 });
    // so is a new journal of the same terminal (a new store starts its seq again at 1)
    const j1 = observe(null, ev('doorClosed', { item: true }, { journalId: 'j1', seq: 500 }), L)!;
    expect(observe(j1, ev('itemRemoved', {}, { journalId: 'j1', seq: 499 }), L)).toBeNull();
    expect(observe(j1, ev('itemRemoved', {}, { journalId: 'j2', seq: 1, at: '2026-03-01T09:00:00.000Z' }), L)).toBeNull();
    expect(observe(j1, ev('itemRemoved', {}, { journalId: 'j2', seq: 1, at: '2026-03-01T11:00:00.000Z' }), L)).toMatchObject({ item: false, journalId: 'j2', seq: 1 });
  });

  it('events that say nothing about the lock change nothing', () => {
    for (const t of ['credentialAccepted', 'credentialRefused', 'unlockSent', 'accessIncomplete', 'busPortLost']) expect(observe(null, ev(t), L)).toBeNull();
  });
});

describe('disagreements (table)', () => {
  const NOW = '2026-03-01T12:00:00.000Z';
  const OLD = '2026-03-01T11:00:00.000Z'; // long settled
  const RECENT = '2026-03-01T11:59:50.000Z'; // 10 s before NOW
  const GRACE = 60_000;
  const obs = (o: Partial<LockObservation>): LockObservation => ({
    lockerUid: 'locker-1', pupUid: 'pup-1', terminalId: 'term-1', journalId: null, seq: 5, eventId: 'e5', at: OLD, receivedAt: OLD,
    door: 'closed', doorAt: OLD, item: null, itemAt: OLD, leftOpenAt: null, jammedAt: null, boardOfflineAt: null, ...o,
  });
  const held = (state: string | null, changedAt = OLD): LockerHolding => ({ lockerUid: 'locker-1', lockerName: 'A1-01', pupUid: 'pup-1', pupName: 'Alpha', shipmentUid: state ? 'ship-1' : null, state, changedAt });

  const table: { name: string; o: Partial<LockObservation>; state: string | null; changedAt?: string; kinds: string[] }[] = [
    { name: 'item, ReadyForDropoff', o: { item: true }, state: 'ReadyForDropoff', kinds: ['item-without-dropoff'] },
    { name: 'item, LockerAssigned', o: { item: true }, state: 'LockerAssigned', kinds: ['item-without-dropoff'] },
    { name: 'item, no shipment', o: { item: true }, state: null, kinds: ['item-without-shipment'] },
    { name: 'item, the holder is no longer active', o: { item: true }, state: 'PickedUp', kinds: ['item-without-shipment'] },
    { name: 'empty, ReadyForPickup', o: { item: false }, state: 'ReadyForPickup', kinds: ['empty-but-ready-for-pickup'] },
    { name: 'empty, WaitForReceiver', o: { item: false }, state: 'WaitForReceiver', kinds: ['empty-but-ready-for-pickup'] },
    { name: 'item, ReadyForPickup (agree)', o: { item: true }, state: 'ReadyForPickup', kinds: [] },
    { name: 'item, WaitForReceiver (agree)', o: { item: true }, state: 'WaitForReceiver', kinds: [] },
    { name: 'empty, ReadyForDropoff (agree)', o: { item: false }, state: 'ReadyForDropoff', kinds: [] },
    { name: 'empty, no shipment (agree)', o: { item: false }, state: null, kinds: [] },
    { name: 'no item sensor: nothing to compare', o: { item: null }, state: 'ReadyForPickup', kinds: [] },
    { name: 'door open: a session under way', o: { item: true, door: 'open' }, state: 'ReadyForDropoff', kinds: [] },
    { name: 'the observation just arrived (the drop-off may be in flight)', o: { item: true, receivedAt: RECENT }, state: 'ReadyForDropoff', kinds: [] },
    { name: 'the shipment just changed (the door event may be in flight)', o: { item: false }, state: 'ReadyForPickup', changedAt: RECENT, kinds: [] },
    { name: 'door left open (no grace: the terminal concluded it)', o: { door: 'open', leftOpenAt: RECENT, receivedAt: RECENT }, state: 'ReadyForDropoff', kinds: ['door-left-open'] },
    { name: 'jammed', o: { jammedAt: OLD }, state: null, kinds: ['jammed'] },
    { name: 'board offline, with a stale item reading', o: { boardOfflineAt: OLD, item: true }, state: 'ReadyForDropoff', kinds: ['item-without-dropoff', 'board-offline'] },
  ];
  for (const row of table) {
    it(`${row.name}: ${row.kinds.join(', ') || 'none'}`, () => {
      const got = disagreements([obs(row.o)], [held(row.state, row.changedAt)], { now: NOW, graceMs: GRACE });
      expect(got.map((d) => d.kind).sort()).toEqual([...row.kinds].sort());
    });
  }

  it('names the pick up point, the locker and the shipment; since = when both sides said so', () => {
    const [d] = disagreements([obs({ item: true, itemAt: '2026-03-01T10:30:00.000Z' })], [held('ReadyForDropoff', '2026-03-01T10:00:00.000Z')], { now: NOW, graceMs: GRACE });
    expect(d).toEqual({ pupUid: 'pup-1', pupName: 'Alpha', lockerUid: 'locker-1', lockerName: 'A1-01', kind: 'item-without-dropoff', shipmentUid: 'ship-1', state: 'ReadyForDropoff', since: '2026-03-01T10:30:00.000Z' });
    const [e] = disagreements([obs({ item: true, itemAt: '2026-03-01T10:30:00.000Z' })], [{ ...held(null), changedAt: '2026-03-01T10:45:00.000Z' }], { now: NOW, graceMs: GRACE });
    expect(e).toMatchObject({ kind: 'item-without-shipment', since: '2026-03-01T10:45:00.000Z' });
    expect(e).not.toHaveProperty('shipmentUid');
  });

  it('the grace ends: the same disagreement counts once both sides were still that long', () => {
    const args = [[obs({ item: true, receivedAt: RECENT })], [held('ReadyForDropoff')]] as const;
    expect(disagreements(...args, { now: NOW, graceMs: GRACE })).toEqual([]);
    expect(disagreements(...args, { now: '2026-03-01T12:00:50.000Z', graceMs: GRACE })).toHaveLength(1);
    expect(disagreements(...args, { now: NOW, graceMs: 0 })).toHaveLength(1);
  });

  it('an observed lock that no locker row names is skipped; several are sorted by pick up point and locker', () => {
    const lockers: LockerHolding[] = [
      { ...held('ReadyForDropoff'), lockerUid: 'b', lockerName: 'B-02', pupUid: 'p2', pupName: 'Beta' },
      { ...held('ReadyForDropoff'), lockerUid: 'a', lockerName: 'A-02', pupUid: 'p1', pupName: 'Alpha' },
      { ...held(null), lockerUid: 'c', lockerName: 'A-01', pupUid: 'p1', pupName: 'Alpha' },
    ];
    const got = disagreements([obs({ lockerUid: 'b', item: true }), obs({ lockerUid: 'a', item: true }), obs({ lockerUid: 'c', item: true }), obs({ lockerUid: 'gone', item: true })], lockers, { now: NOW, graceMs: GRACE });
    expect(got.map((d) => `${d.pupName}/${d.lockerName}/${d.kind}`)).toEqual(['Alpha/A-01/item-without-shipment', 'Alpha/A-02/item-without-dropoff', 'Beta/B-02/item-without-dropoff']);
    expect(formatDisagreements(got)).toMatch(/^Alpha \(p1\): 2 disagreements\n {2}A-01 .*item-without-shipment .*since .*\n {2}A-02 .*shipment ship-1 ReadyForDropoff.*\nBeta \(p2\): 1 disagreement\n/);
    expect(formatDisagreements([])).toBe('no disagreements\n');
  });
});
