// Per-board lock state as a pure state machine: boardStep(state, input, cfg) -> { state, events }.
// The driver feeds it poll results, failed polls and sent unlocks (a `tick` input also runs the
// timers, for a caller with a clock of its own); it never does I/O.
//
// One wire bit per lock says "latched / closed" (after polarity). A released latch is not an open
// door: right after an unlock the bit drops for the pulse time even when the door does not move
// (jammed), so a low bit seen within `releaseGraceMs` of an unlock only counts as "latch
// released". A low bit seen later, or with no unlock pending, is an open door.
//
// Only what was observed is concluded. A lock whose board could not be read at some point since
// its pending unlock was sent (a failed poll, or the board offline), or whose door was not seen for
// `unwatchedGapMs` or longer (no good poll that long; a low bit inside the release grace shows the
// latch, not the door: a stalled poll loop, or a grace that long), is "blind": the door may have
// opened and shut again unseen, so it never yields a jam. Its first good poll at or after the
// release grace settles the unlock: door open = doorOpened (commanded); door closed =
// unlockUnobserved with what the item sensor shows now (item events of that poll come first).
// An item sensor that changes while the door is seen steadily proves nothing about the door (a
// parcel shifted by a customer tugging at a jammed door, a flickering sensor): no door cycle with
// a parcel put in or taken out fits in less than unwatchedGapMs.
// An unlock whose write broke off is "uncertain": the board may not have got it, so it yields no
// jam either, settled the same way, until a poll inside the grace sees the latch released (the
// board got it: watched as any unlock from there).

export type DoorState = 'open' | 'closed' | 'unknown';
export type LatchState = 'engaged' | 'released' | 'unknown';

export interface LockView {
  lock: number;
  door: DoorState;
  latch: LatchState;
  item: boolean | null;
}

interface LockMem {
  door: 'open' | 'closed' | null; // last known (null = never seen)
  latch: 'engaged' | 'released' | null;
  item: boolean | null;
  unlockAt: number | null; // pending unlock, not yet confirmed by an opening
  sawRelease: boolean; // latch seen released since that unlock
  graceSeen: boolean; // a good poll fell inside the release grace window of that unlock
  blind: boolean; // a poll failed (or the board was offline), or the door went unseen for unwatchedGapMs, since that unlock: its outcome may be unseen
  uncertain: boolean; // that unlock's write broke off: the board may not have got it (until a poll sees the latch released)
  doorSeenAt: number | null; // the last good poll that showed the door (not a low bit inside an unlock's release grace: that is the latch)
  lastCommandAt: number | null;
  openSince: number | null;
  leftOpenReported: boolean;
}

export interface BoardState {
  board: number;
  online: boolean | null; // null = not polled yet
  failures: number;
  locks: LockMem[];
}

export interface BoardConfig {
  /** Consecutive failed polls before the board is declared offline. */
  offlineAfter: number;
  /** A low bit within this long after an unlock is the latch, not yet the door. */
  releaseGraceMs: number;
  /** No opening within this long after an unlock: jam. */
  jamWindowMs: number;
  /** A door open longer than this: doorLeftOpen (null = never). */
  doorLeftOpenMs: number | null;
  /** An item or door change within this long after a command is not "forced". */
  commandWindowMs: number;
  /**
   * A pending unlock whose door was not seen for this long (since it was sent, or since the last
   * good poll that showed the door) is blind: a door cycle (open, parcel in or out, shut) fits in
   * the gap unseen. Above the release grace plus a poll interval, below the quickest door cycle
   * with a parcel.
   */
  unwatchedGapMs: number;
}

/**
 * What a jam saw (a blind lock never yields one):
 * - `latch-not-released`: good polls inside the release grace window saw the latch engaged throughout;
 * - `door-did-not-open`: the latch was seen released, the door never read open;
 * - `latch-not-seen`: no good poll fell inside the grace window (latch unseen); the door read closed afterwards.
 */
export type JamCause = 'latch-not-released' | 'door-did-not-open' | 'latch-not-seen';

export type BoardInput =
  | { kind: 'poll'; at: number; closed: boolean[]; items: boolean[] | null }
  | { kind: 'pollFailed'; at: number; error: string }
  /** uncertain: the write broke off, so whether the board got the pulse is not known (no jam until a poll shows it did) */
  | { kind: 'unlockSent'; at: number; lock: number | 'all'; uncertain?: boolean }
  | { kind: 'tick'; at: number };

export type BoardEvent =
  | { type: 'doorOpened'; board: number; lock: number; commanded: boolean }
  | { type: 'doorClosed'; board: number; lock: number }
  | { type: 'itemPlaced'; board: number; lock: number }
  | { type: 'itemRemoved'; board: number; lock: number }
  | { type: 'jam'; board: number; lock: number; afterMs: number; cause: JamCause }
  | { type: 'unlockUnobserved'; board: number; lock: number; afterMs: number; item: boolean | null }
  | { type: 'doorLeftOpen'; board: number; lock: number; openMs: number }
  | { type: 'forcedOpen'; board: number; lock: number; reason: 'door' | 'item' }
  | { type: 'boardOffline'; board: number; failures: number; error: string }
  | { type: 'boardOnline'; board: number };

export function initialBoard(board: number, lockCount: number): BoardState {
  return {
    board,
    online: null,
    failures: 0,
    locks: Array.from({ length: lockCount }, () => ({
      door: null,
      latch: null,
      item: null,
      unlockAt: null,
      sawRelease: false,
      graceSeen: false,
      blind: false,
      uncertain: false,
      doorSeenAt: null,
      lastCommandAt: null,
      openSince: null,
      leftOpenReported: false,
    })),
  };
}

export function viewLocks(s: BoardState): LockView[] {
  const known = s.online === true;
  return s.locks.map((l, i) => ({
    lock: i + 1,
    door: known && l.door ? l.door : 'unknown',
    latch: known && l.latch ? l.latch : 'unknown',
    item: known ? l.item : null,
  }));
}

function commanded(l: LockMem, at: number, cfg: BoardConfig): boolean {
  return l.lastCommandAt !== null && at - l.lastCommandAt <= cfg.commandWindowMs;
}

function clearUnlock(l: LockMem): void {
  l.unlockAt = null;
  l.sawRelease = false;
  l.graceSeen = false;
  l.blind = false;
  l.uncertain = false;
}

export function boardStep(s: BoardState, input: BoardInput, cfg: BoardConfig): { state: BoardState; events: BoardEvent[] } {
  const events: BoardEvent[] = [];
  const board = s.board;
  const locks = s.locks.map((l) => ({ ...l }));
  let { online, failures } = s;

  // a pending unlock whose door was not seen for unwatchedGapMs (since it was sent, or since the
  // last good poll that showed the door: a low bit inside the release grace shows the latch only):
  // its door may have opened and shut in the gap, unseen
  const markUnwatched = (at: number) => {
    for (const l of locks) {
      if (l.unlockAt !== null && at - Math.max(l.unlockAt, l.doorSeenAt ?? l.unlockAt) >= cfg.unwatchedGapMs) l.blind = true;
    }
  };

  const checkTimers = (at: number) => {
    markUnwatched(at);
    locks.forEach((l, i) => {
      const lock = i + 1;
      // while the board is offline nothing can be concluded: the jam waits for the next good poll;
      // a blind lock never jams (its next good poll past the grace settles it, see 'poll'), nor
      // one whose unlock may never have reached the board
      if (l.unlockAt !== null && !l.blind && !l.uncertain && online === true && at - l.unlockAt >= cfg.jamWindowMs) {
        const cause: JamCause = l.sawRelease ? 'door-did-not-open' : l.graceSeen ? 'latch-not-released' : 'latch-not-seen';
        events.push({ type: 'jam', board, lock, afterMs: at - l.unlockAt, cause });
        clearUnlock(l);
      }
      if (cfg.doorLeftOpenMs !== null && l.door === 'open' && l.openSince !== null && !l.leftOpenReported && online === true && at - l.openSince >= cfg.doorLeftOpenMs) {
        events.push({ type: 'doorLeftOpen', board, lock, openMs: at - l.openSince });
        l.leftOpenReported = true;
      }
    });
  };

  switch (input.kind) {
    case 'unlockSent': {
      const targets = input.lock === 'all' ? locks.map((_, i) => i) : [input.lock - 1];
      for (const i of targets) {
        const l = locks[i];
        if (!l) continue;
        l.lastCommandAt = input.at;
        // A door already open cannot "fail to open": nothing to confirm.
        if (l.door !== 'open') {
          clearUnlock(l);
          l.unlockAt = input.at;
          // sent while the board cannot be read: its outcome is not watched from the start
          l.blind = online === false;
          // maybe not sent at all: no jam either, until a poll sees the latch released (the board
          // got the pulse); a shut door past the grace is unlockUnobserved
          l.uncertain = input.uncertain === true;
        }
      }
      break;
    }
    case 'pollFailed': {
      failures += 1;
      for (const l of locks) if (l.unlockAt !== null) l.blind = true;
      if (failures >= cfg.offlineAfter && online !== false) {
        online = false;
        events.push({ type: 'boardOffline', board, failures, error: input.error });
      }
      checkTimers(input.at);
      break;
    }
    case 'poll': {
      const at = input.at;
      const baseline = online === null || locks.every((l) => l.door === null);
      if (online !== true) {
        online = true;
        events.push({ type: 'boardOnline', board });
      }
      failures = 0;
      markUnwatched(at);
      locks.forEach((l, i) => {
        const lock = i + 1;
        const closedBit = input.closed[i];
        if (closedBit === undefined) {
          // a lock the board's answer does not carry (more locks configured than it reports): its
          // door is never seen, so an unlock of it is settled, unobserved, once the gap has passed
          if (l.unlockAt !== null && l.blind && at - l.unlockAt >= cfg.releaseGraceMs) {
            events.push({ type: 'unlockUnobserved', board, lock, afterMs: at - l.unlockAt, item: null });
            clearUnlock(l);
          }
          return;
        }
        // a low bit inside the release grace is the latch: the door itself is not seen by it
        if (closedBit || l.unlockAt === null || at - l.unlockAt >= cfg.releaseGraceMs) l.doorSeenAt = at;
        const wasOpen = l.door === 'open';
        // items first: an item placed and the door closed between two polls is a normal delivery
        const item = input.items ? (input.items[i] ?? null) : null;
        if (!baseline && item !== null && l.item !== null && item !== l.item) {
          events.push({ type: item ? 'itemPlaced' : 'itemRemoved', board, lock });
          // an unlock pending means the door was commanded open (maybe seen, maybe not): not forced
          if (!wasOpen && l.unlockAt === null && !commanded(l, at, cfg)) events.push({ type: 'forcedOpen', board, lock, reason: 'item' });
        }
        l.item = item;
        if (closedBit) {
          l.latch = 'engaged';
          if (wasOpen) events.push({ type: 'doorClosed', board, lock });
          l.door = 'closed';
          l.openSince = null;
          l.leftOpenReported = false;
          if (l.unlockAt === null) return;
          if (at - l.unlockAt < cfg.releaseGraceMs) {
            l.graceSeen = true; // latch seen engaged inside the grace window
          } else if (l.blind || l.uncertain) {
            // the unlock played out while the board could not be read, or may never have reached
            // it; the door is shut now
            events.push({ type: 'unlockUnobserved', board, lock, afterMs: at - l.unlockAt, item });
            clearUnlock(l);
          }
          return;
        }
        l.latch = 'released';
        if (l.unlockAt !== null && at - l.unlockAt < cfg.releaseGraceMs) {
          l.sawRelease = true; // latch released by our pulse; the door may or may not follow
          l.graceSeen = true;
          l.uncertain = false; // the board got the pulse: watched as any unlock from here
          if (l.door === null) l.door = 'closed';
          return;
        }
        if (!wasOpen) {
          l.door = 'open';
          l.openSince = at;
          l.leftOpenReported = false;
          if (!baseline) {
            const cmd = l.unlockAt !== null || commanded(l, at, cfg);
            events.push({ type: 'doorOpened', board, lock, commanded: cmd });
            if (!cmd) events.push({ type: 'forcedOpen', board, lock, reason: 'door' });
          }
        }
        clearUnlock(l);
      });
      checkTimers(at);
      break;
    }
    case 'tick':
      checkTimers(input.at);
      break;
  }
  return { state: { board, online, failures, locks }, events };
}
