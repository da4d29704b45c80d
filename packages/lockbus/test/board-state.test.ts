// The pure per-board state machine: (state, input) -> { state, events }.
import { describe, expect, it } from 'vitest';
import { boardStep, initialBoard, viewLocks, type BoardConfig, type BoardInput, type BoardState } from '../src/index';

const cfg: BoardConfig = { offlineAfter: 3, releaseGraceMs: 600, jamWindowMs: 10_000, doorLeftOpenMs: 60_000, commandWindowMs: 10_000 };
const closedAll = (n: number, open: number[] = []) => Array.from({ length: n }, (_, i) => !open.includes(i + 1));
const items = (n: number, full: number[] = []) => Array.from({ length: n }, (_, i) => full.includes(i + 1));

function run(s: BoardState, inputs: BoardInput[]) {
  const events: string[] = [];
  for (const i of inputs) {
    const r = boardStep(s, i, cfg);
    s = r.state;
    for (const e of r.events) events.push(e.type + ('lock' in e ? `:${e.lock}` : '') + ('cause' in e ? `:${e.cause}` : '') + ('reason' in e ? `:${e.reason}` : ''));
  }
  return { s, events };
}

describe('board state machine', () => {
  it('first poll is a silent baseline except boardOnline; a door found open is open', () => {
    const { s, events } = run(initialBoard(0, 4), [{ kind: 'poll', at: 0, closed: closedAll(4, [2]), items: items(4, [3]) }]);
    expect(events).toEqual(['boardOnline']);
    expect(viewLocks(s).map((l) => l.door)).toEqual(['closed', 'open', 'closed', 'closed']);
    expect(viewLocks(s)[2]!.item).toBe(true);
  });

  it('unlock then a low bit after the grace time: doorOpened (commanded), then doorClosed', () => {
    const { events } = run(initialBoard(0, 2), [
      { kind: 'poll', at: 0, closed: closedAll(2), items: items(2) },
      { kind: 'unlockSent', at: 1000, lock: 1 },
      { kind: 'poll', at: 1200, closed: closedAll(2, [1]), items: items(2) }, // within grace: latch only
      { kind: 'poll', at: 1700, closed: closedAll(2, [1]), items: items(2) },
      { kind: 'poll', at: 5000, closed: closedAll(2), items: items(2, [1]) },
    ]);
    expect(events).toEqual(['boardOnline', 'doorOpened:1', 'itemPlaced:1', 'doorClosed:1']);
  });

  it('a released latch that re-engages without the door opening is a jam (door-did-not-open)', () => {
    const { events, s } = run(initialBoard(0, 1), [
      { kind: 'poll', at: 0, closed: [true], items: [false] },
      { kind: 'unlockSent', at: 100, lock: 1 },
      { kind: 'poll', at: 300, closed: [false], items: [false] },
      { kind: 'poll', at: 900, closed: [true], items: [false] },
      { kind: 'poll', at: 10_099, closed: [true], items: [false] },
      { kind: 'poll', at: 10_100, closed: [true], items: [false] },
      { kind: 'poll', at: 20_000, closed: [true], items: [false] },
    ]);
    expect(events).toEqual(['boardOnline', 'jam:1:door-did-not-open']);
    expect(viewLocks(s)[0]!.latch).toBe('engaged');
  });

  it('a latch that never releases is a jam (latch-not-released)', () => {
    const { events } = run(initialBoard(0, 1), [
      { kind: 'poll', at: 0, closed: [true], items: [false] },
      { kind: 'unlockSent', at: 0, lock: 1 },
      { kind: 'tick', at: 10_000 },
    ]);
    expect(events).toEqual(['boardOnline', 'jam:1:latch-not-released']);
  });

  it('door or item change with no command is forced', () => {
    const { events } = run(initialBoard(0, 2), [
      { kind: 'poll', at: 0, closed: closedAll(2), items: items(2, [2]) },
      { kind: 'poll', at: 500, closed: closedAll(2, [1]), items: items(2, [2]) },
      { kind: 'poll', at: 1000, closed: closedAll(2, [1]), items: items(2) },
    ]);
    expect(events).toEqual(['boardOnline', 'doorOpened:1', 'forcedOpen:1:door', 'itemRemoved:2', 'forcedOpen:2:item']);
  });

  it('door left open fires once per opening', () => {
    const { events } = run(initialBoard(0, 1), [
      { kind: 'poll', at: 0, closed: [true], items: [false] },
      { kind: 'unlockSent', at: 0, lock: 1 },
      { kind: 'poll', at: 1000, closed: [false], items: [false] },
      { kind: 'poll', at: 61_000, closed: [false], items: [false] },
      { kind: 'poll', at: 62_000, closed: [false], items: [false] },
      { kind: 'poll', at: 63_000, closed: [true], items: [false] },
    ]);
    expect(events).toEqual(['boardOnline', 'doorOpened:1', 'doorLeftOpen:1', 'doorClosed:1']);
  });

  it('three failed polls: offline and unknown; back: online, changes since reported', () => {
    const { s, events } = run(initialBoard(0, 1), [
      { kind: 'poll', at: 0, closed: [true], items: [false] },
      { kind: 'pollFailed', at: 500, error: 'NO_REPLY' },
      { kind: 'pollFailed', at: 1000, error: 'NO_REPLY' },
    ]);
    expect(events).toEqual(['boardOnline']);
    const r = run(s, [{ kind: 'pollFailed', at: 1500, error: 'NO_REPLY' }]);
    expect(r.events).toEqual(['boardOffline']);
    expect(viewLocks(r.s)[0]).toEqual({ lock: 1, door: 'unknown', latch: 'unknown', item: null });
    const back = run(r.s, [{ kind: 'poll', at: 3000, closed: [false], items: [true] }]);
    expect(back.events).toEqual(['boardOnline', 'itemPlaced:1', 'forcedOpen:1:item', 'doorOpened:1', 'forcedOpen:1:door']);
  });

  it('an unlock of a door already open starts no jam timer', () => {
    const { events } = run(initialBoard(0, 1), [
      { kind: 'poll', at: 0, closed: [false], items: [false] },
      { kind: 'unlockSent', at: 10, lock: 1 },
      { kind: 'tick', at: 20_000 },
    ]);
    expect(events).toEqual(['boardOnline']);
  });
});
