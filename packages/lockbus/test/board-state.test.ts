// The pure per-board state machine: (state, input) -> { state, events }.
import { describe, expect, it } from 'vitest';
import { boardStep, initialBoard, viewLocks, type BoardConfig, type BoardInput, type BoardState } from '../src/index';

// the table's polls stand for a steady poll loop (nothing changed between two rows), so the gap
// that makes a pending unlock blind is set far out; the rows of that rule use GAP_CFG
const cfg: BoardConfig = { offlineAfter: 3, releaseGraceMs: 600, jamWindowMs: 10_000, doorLeftOpenMs: 60_000, commandWindowMs: 10_000, unwatchedGapMs: 60_000 };
/** the driver's default for a 500 ms poll interval */
const GAP_CFG: BoardConfig = { ...cfg, unwatchedGapMs: 1500 };
const closedAll = (n: number, open: number[] = []) => Array.from({ length: n }, (_, i) => !open.includes(i + 1));
const items = (n: number, full: number[] = []) => Array.from({ length: n }, (_, i) => full.includes(i + 1));

function run(s: BoardState, inputs: BoardInput[], config: BoardConfig = cfg) {
  const events: string[] = [];
  for (const i of inputs) {
    const r = boardStep(s, i, config);
    s = r.state;
    for (const e of r.events) {
      events.push(
        e.type +
          ('lock' in e ? `:${e.lock}` : '') +
          ('cause' in e ? `:${e.cause}` : '') +
          ('reason' in e ? `:${e.reason}` : '') +
          ('commanded' in e && e.commanded ? ':cmd' : '') +
          (e.type === 'unlockUnobserved' ? `:item=${e.item}` : ''),
      );
    }
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
    expect(events).toEqual(['boardOnline', 'doorOpened:1:cmd', 'itemPlaced:1', 'doorClosed:1']);
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

  it('a latch seen engaged throughout the grace window is a jam (latch-not-released)', () => {
    const { events } = run(initialBoard(0, 1), [
      { kind: 'poll', at: 0, closed: [true], items: [false] },
      { kind: 'unlockSent', at: 0, lock: 1 },
      { kind: 'poll', at: 200, closed: [true], items: [false] },
      { kind: 'poll', at: 500, closed: [true], items: [false] },
      { kind: 'tick', at: 10_000 },
    ]);
    expect(events).toEqual(['boardOnline', 'jam:1:latch-not-released']);
  });

  /** a poll every 500 ms from `from` to `to`, the door shut, the item as `item(at)` says */
  const steadyPolls = (from: number, to: number, item: (at: number) => boolean): BoardInput[] =>
    Array.from({ length: Math.floor((to - from) / 500) + 1 }, (_, k) => from + k * 500).map((at) => ({ kind: 'poll', at, closed: [true], items: [item(at)] }));

  it.each([false, true])('an item reading that flickers while a jammed door is read shut at a steady poll proves nothing: a jam, never an outcome (uncertain unlock: %s)', (uncertain) => {
    // a customer tugging at a door whose latch released but which did not open shifts the parcel
    // off its sensor for one poll: no door cycle fits between two polls 500 ms apart
    const { events } = run(
      initialBoard(0, 1),
      [
        { kind: 'poll', at: 0, closed: [true], items: [true] },
        { kind: 'unlockSent', at: 100, lock: 1, uncertain },
        { kind: 'poll', at: 300, closed: [false], items: [true] },
        ...steadyPolls(800, 10_300, (at) => at !== 1300),
      ],
      GAP_CFG,
    );
    expect(events).toEqual(['boardOnline', 'itemRemoved:1', 'itemPlaced:1', 'jam:1:door-did-not-open']);
  });

  it.each([false, true])('a poll loop stalled past unwatchedGapMs with an unlock pending: blind, so the door shut again with the item moved is unlockUnobserved with the item, no jam (uncertain unlock: %s)', (uncertain) => {
    // the latch seen released, then no good poll for 2 s (a stalled loop): a courier opened the
    // door, put the parcel in and shut it unseen; the item proves it
    const { events } = run(
      initialBoard(0, 1),
      [
        { kind: 'poll', at: 0, closed: [true], items: [false] },
        { kind: 'unlockSent', at: 100, lock: 1, uncertain },
        { kind: 'poll', at: 300, closed: [false], items: [false] },
        ...steadyPolls(2300, 10_300, () => true),
      ],
      GAP_CFG,
    );
    expect(events).toEqual(['boardOnline', 'itemPlaced:1', 'unlockUnobserved:1:item=true']);
  });

  it('a door cycle inside the release grace and the next poll (under unwatchedGapMs): not taken for an opening, a jam', () => {
    // the latch seen released at 300, the door shut with a parcel in at 800: 700 ms of door unseen,
    // less than any door cycle with a parcel; the item alone proves nothing (the row above)
    const { events } = run(
      initialBoard(0, 1),
      [{ kind: 'poll', at: 0, closed: [true], items: [false] }, { kind: 'unlockSent', at: 100, lock: 1 }, { kind: 'poll', at: 300, closed: [false], items: [false] }, ...steadyPolls(800, 10_300, () => true)],
      GAP_CFG,
    );
    expect(events).toEqual(['boardOnline', 'itemPlaced:1', 'jam:1:door-did-not-open']);
  });

  it('a release grace as long as unwatchedGapMs (a long pulse): the low bits inside it do not show the door, so the unlock is blind and the item settles it', () => {
    // pulse 1,500 ms, grace 1,600: the door opened, the parcel went in and the door shut while only
    // the latch could be read
    const { events } = run(
      initialBoard(0, 1),
      [
        { kind: 'poll', at: 0, closed: [true], items: [false] },
        { kind: 'unlockSent', at: 100, lock: 1 },
        { kind: 'poll', at: 300, closed: [false], items: [false] },
        { kind: 'poll', at: 800, closed: [false], items: [false] },
        { kind: 'poll', at: 1300, closed: [false], items: [true] },
        ...steadyPolls(1800, 11_800, () => true),
      ],
      { ...GAP_CFG, releaseGraceMs: 1600 },
    );
    expect(events).toEqual(['boardOnline', 'itemPlaced:1', 'unlockUnobserved:1:item=true']);
  });

  it('a latch seen engaged again inside a long grace shows the door shut: not blind, a jam', () => {
    // grace 1,600: the low bit at 300 is the latch; the high bits at 800 and 1,300 show the door
    // shut (latched), so the door was never unseen for the gap
    const { events } = run(
      initialBoard(0, 1),
      [{ kind: 'poll', at: 0, closed: [true], items: [false] }, { kind: 'unlockSent', at: 100, lock: 1 }, { kind: 'poll', at: 300, closed: [false], items: [false] }, ...steadyPolls(800, 10_300, () => false)],
      { ...GAP_CFG, releaseGraceMs: 1600 },
    );
    expect(events).toEqual(['boardOnline', 'jam:1:door-did-not-open']);
  });

  it('a lock the board does not report: its unlock is settled unobserved once the gap has passed, not left pending', () => {
    // two locks configured, the answer carries one bit
    const { events, s } = run(
      initialBoard(0, 2),
      [{ kind: 'poll', at: 0, closed: [true], items: [false] }, { kind: 'unlockSent', at: 100, lock: 2 }, ...steadyPolls(300, 2300, () => false)],
      GAP_CFG,
    );
    expect(events).toEqual(['boardOnline', 'unlockUnobserved:2:item=null']);
    expect(s.locks[1]?.unlockAt).toBeNull();
  });

  it('no good poll for unwatchedGapMs since the unlock: blind; a tick in the gap concludes no jam, the next poll settles it', () => {
    const { events } = run(
      initialBoard(0, 1),
      [
        { kind: 'poll', at: 0, closed: [true], items: [false] },
        { kind: 'unlockSent', at: 100, lock: 1 },
        { kind: 'tick', at: 10_100 },
        { kind: 'poll', at: 10_200, closed: [true], items: [true] },
        { kind: 'poll', at: 10_700, closed: [true], items: [true] },
      ],
      GAP_CFG,
    );
    expect(events).toEqual(['boardOnline', 'itemPlaced:1', 'unlockUnobserved:1:item=true']);
  });

  it('polls steady, nothing moved: the same unlock is a jam under the gap rule too', () => {
    const { events } = run(
      initialBoard(0, 1),
      [{ kind: 'poll', at: 0, closed: [true], items: [false] }, { kind: 'unlockSent', at: 100, lock: 1 }, ...steadyPolls(300, 10_300, () => false)],
      GAP_CFG,
    );
    expect(events).toEqual(['boardOnline', 'jam:1:latch-not-released']);
  });

  // An unlock whose write broke off (lock-bus.ts sendUnlock, WRITE_FAILED): the board may not have
  // got it. Nothing is invented: no jam while that is unknown; once a poll shows the latch
  // released, the board got the pulse and a door that did not open is a jam again.
  it.each([
    {
      name: 'never seen released, door shut past the grace: unlockUnobserved, no jam',
      polls: [
        [700, true],
        [10_200, true],
        [20_000, true],
      ] as const,
      events: ['boardOnline', 'unlockUnobserved:1:item=false'],
    },
    {
      name: 'released inside the grace (the board got it), door never opened: jam door-did-not-open',
      polls: [
        [300, false],
        [900, true],
        [10_100, true],
      ] as const,
      events: ['boardOnline', 'jam:1:door-did-not-open'],
    },
    {
      name: 'latch seen engaged inside the grace, shut past it: unlockUnobserved (no latch-not-released jam: the board may not have got it)',
      polls: [
        [300, true],
        [900, true],
        [10_200, true],
      ] as const,
      events: ['boardOnline', 'unlockUnobserved:1:item=false'],
    },
    {
      name: 'released inside the grace, then a failed poll: blind, so unlockUnobserved, no jam',
      polls: [[300, false], [600, null], [900, true], [10_200, true]] as const,
      events: ['boardOnline', 'unlockUnobserved:1:item=false'],
    },
    {
      name: 'the door opened: doorOpened commanded, nothing forced',
      polls: [
        [900, false],
        [5_000, true],
      ] as const,
      events: ['boardOnline', 'doorOpened:1:cmd', 'doorClosed:1'],
    },
  ])('an unlock of uncertain delivery: $name', ({ polls, events: want }) => {
    const { events } = run(initialBoard(0, 1), [
      { kind: 'poll', at: 0, closed: [true], items: [false] },
      { kind: 'unlockSent', at: 100, lock: 1, uncertain: true },
      ...polls.map(([at, closed]): BoardInput => (closed === null ? { kind: 'pollFailed', at, error: 'NO_REPLY' } : { kind: 'poll', at, closed: [closed], items: [false] })),
    ]);
    expect(events).toEqual(want);
  });

  it('an unlock of a door already open starts no jam timer', () => {
    const { events } = run(initialBoard(0, 1), [
      { kind: 'poll', at: 0, closed: [false], items: [false] },
      { kind: 'unlockSent', at: 10, lock: 1 },
      { kind: 'tick', at: 20_000 },
    ]);
    expect(events).toEqual(['boardOnline']);
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
    expect(events).toEqual(['boardOnline', 'doorOpened:1:cmd', 'doorLeftOpen:1', 'doorClosed:1']);
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
});

// Issue 11: a board that cannot be read during a door cycle must not invent a jam nor lose the
// cycle. grace = 600 ms, jam window = command window = 10 s. Every run starts from a good poll at
// 0 (door closed, empty) and an unlock of lock 1 at 1000.
const C = (item = false) => ({ closed: [true], items: [item] });
const O = (item = false) => ({ closed: [false], items: [item] });
const good = (at: number, v: { closed: boolean[]; items: boolean[] }): BoardInput => ({ kind: 'poll', at, ...v });
const fail = (at: number): BoardInput => ({ kind: 'pollFailed', at, error: 'NO_REPLY' });
const offline = (from: number) => [fail(from), fail(from + 500), fail(from + 1000)];

describe('blind locks: only what was observed is concluded', () => {
  const cases: { name: string; inputs: BoardInput[]; events: string[] }[] = [
    {
      name: 'blind during the window (offline), back closed with the item: itemPlaced then unlockUnobserved; no jam, no forced',
      inputs: [...offline(1200), good(3000, C(true)), { kind: 'tick', at: 30_000 }, good(30_000, C(true))],
      events: ['boardOffline', 'boardOnline', 'itemPlaced:1', 'unlockUnobserved:1:item=true'],
    },
    {
      name: 'blind past the command window, back closed with the item: still not forced, no jam',
      inputs: [...offline(1200), good(40_000, C(true)), { kind: 'tick', at: 60_000 }],
      events: ['boardOffline', 'boardOnline', 'itemPlaced:1', 'unlockUnobserved:1:item=true'],
    },
    {
      name: 'one failed poll is enough: latch seen released, a poll lost, closed with the item',
      inputs: [good(1200, O()), fail(1700), good(2200, C(true)), { kind: 'tick', at: 20_000 }],
      events: ['itemPlaced:1', 'unlockUnobserved:1:item=true'],
    },
    {
      name: 'grace-window polls failed, then the latch reads engaged: unlockUnobserved (empty), never latch-not-released',
      inputs: [fail(1200), fail(1500), good(1700, C()), good(2200, C()), { kind: 'tick', at: 12_000 }],
      events: ['unlockUnobserved:1:item=false'],
    },
    {
      name: 'a good poll after the gap but still inside the grace settles nothing; the first past it does',
      inputs: [fail(1100), good(1300, C()), good(1800, C(true))],
      events: ['itemPlaced:1', 'unlockUnobserved:1:item=true'],
    },
    {
      name: 'unlock sent while the board is offline, back closed with the item',
      inputs: [...offline(200), { kind: 'unlockSent', at: 1500, lock: 1 }, good(5000, C(true)), { kind: 'tick', at: 20_000 }],
      events: ['boardOffline', 'boardOnline', 'itemPlaced:1', 'unlockUnobserved:1:item=true'],
    },
    {
      name: 'blind then open: doorOpened (commanded), no jam; the item seen across the gap is not forced',
      inputs: [...offline(1200), good(40_000, O(true)), { kind: 'tick', at: 60_000 }, good(60_000, C(true))],
      events: ['boardOffline', 'boardOnline', 'itemPlaced:1', 'doorOpened:1:cmd', 'doorClosed:1'],
    },
    {
      name: 'seen open, then blind, then closed with the item: itemPlaced then doorClosed',
      inputs: [good(1700, O()), ...offline(2000), good(40_000, C(true)), { kind: 'tick', at: 60_000 }],
      events: ['doorOpened:1:cmd', 'boardOffline', 'boardOnline', 'itemPlaced:1', 'doorClosed:1'],
    },
    {
      name: 'not blind, latch engaged in the grace window, never opened: jam latch-not-released',
      inputs: [good(1200, C()), good(1700, C()), good(6000, C()), good(11_000, C())],
      events: ['jam:1:latch-not-released'],
    },
    {
      name: 'not blind, latch released in the grace window, never opened: jam door-did-not-open',
      inputs: [good(1200, O()), good(1700, C()), good(11_000, C())],
      events: ['jam:1:door-did-not-open'],
    },
    {
      name: 'not blind, no poll fell inside the grace window: jam latch-not-seen',
      inputs: [good(1700, C()), good(6000, C()), good(11_000, C())],
      events: ['jam:1:latch-not-seen'],
    },
    {
      name: 'not blind, opened and closed normally: doorOpened, itemPlaced, doorClosed',
      inputs: [good(1200, O()), good(1700, O()), good(2200, C(true)), { kind: 'tick', at: 20_000 }],
      events: ['doorOpened:1:cmd', 'itemPlaced:1', 'doorClosed:1'],
    },
  ];
  it.each(cases)('$name', ({ inputs, events }) => {
    const r = run(initialBoard(0, 1), [good(0, C()), { kind: 'unlockSent', at: 1000, lock: 1 }, ...inputs]);
    expect(r.events).toEqual(['boardOnline', ...events]);
    expect(r.events.filter((e) => e.startsWith('forcedOpen'))).toEqual([]);
  });

  it('unlockUnobserved carries afterMs and the item; the pending unlock is cleared', () => {
    let s = initialBoard(3, 2);
    const step = (i: BoardInput) => {
      const r = boardStep(s, i, cfg);
      s = r.state;
      return r.events;
    };
    step({ kind: 'poll', at: 0, closed: [true, true], items: [false, false] });
    step({ kind: 'unlockSent', at: 1000, lock: 2 });
    for (const at of [1200, 1700, 2200]) step(fail(at));
    expect(step({ kind: 'poll', at: 4500, closed: [true, true], items: [false, true] })).toEqual([
      { type: 'boardOnline', board: 3 },
      { type: 'itemPlaced', board: 3, lock: 2 },
      { type: 'unlockUnobserved', board: 3, lock: 2, afterMs: 3500, item: true },
    ]);
    expect(s.locks[1]!.unlockAt).toBeNull();
    expect(step({ kind: 'tick', at: 50_000 })).toEqual([]);
    // a board without item sensors reports item: null
    step({ kind: 'unlockSent', at: 60_000, lock: 1 });
    step(fail(60_100));
    expect(step({ kind: 'poll', at: 61_000, closed: [true, true], items: null })).toEqual([{ type: 'unlockUnobserved', board: 3, lock: 1, afterMs: 1000, item: null }]);
  });
});
