// The crash test's randomness and its ledger of what the doors physically did.
// A seeded PRNG (mulberry32) decides every cycle's kind, the code presented (QR or keypad PIN), the
// kill point and the small delays, so a failing run can be repeated with LOCKER_CRASH_SEED.

export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export class Rng {
  private readonly next: () => number;
  constructor(readonly seed: number) {
    this.next = mulberry32(seed);
  }
  float(): number {
    return this.next();
  }
  /** integer in [lo, hi] */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
  /** a shuffled copy (Fisher-Yates) */
  shuffle<T>(xs: readonly T[]): T[] {
    const out = [...xs];
    for (let i = out.length - 1; i > 0; i--) {
      const j = Math.floor(this.next() * (i + 1));
      [out[i], out[j]] = [out[j]!, out[i]!];
    }
    return out;
  }
  pick<T>(xs: readonly T[]): T {
    if (xs.length === 0) throw new Error('pick from an empty list');
    return xs[Math.floor(this.next() * xs.length)]!;
  }
}

/**
 * Where in a door cycle the agent is SIGKILLed (issue 11, "What must work" 1):
 * - code:     a random 0-250 ms after the code was presented (before or after it was accepted and
 *             the lock pulsed; if the door stayed shut, the person presents the code again once the
 *             agent is back)
 * - unlocked: the moment the simulator's door springs open (the pulse went out), usually before
 *             the agent has polled the opening
 * - open:     the agent has seen the door open, nothing moved yet
 * - item:     a random 0-200 ms after the parcel was put in / taken out, door still open
 * - dead:     the door is open; kill, then the person moves the parcel and shuts the door while the
 *             agent is dead, then the agent is restarted
 * - close:    just after the door was shut: at once (before the agent can have polled the close) or
 *             a random 0-300 ms later
 */
export const KILL_POINTS = ['code', 'unlocked', 'open', 'item', 'dead', 'close'] as const;
export type KillPoint = (typeof KILL_POINTS)[number];

/**
 * - drop:   drop-off code, door opens, parcel in, door shut
 * - giveup: drop-off code, door opens, the person changes their mind: shut empty (no drop-off)
 * - pick:   pick-up code, door opens, parcel out, door shut
 * - swap:   the pick-up code of the parcel inside, which is also the drop-off code of its swap:
 *           old parcel out, new parcel in, door shut (pick-up of the old + drop-off of the new)
 */
export type CycleKind = 'drop' | 'giveup' | 'pick' | 'swap';

export interface Codes {
  dropQr: string;
  dropPin: string;
  pickQr: string;
  pickPin: string;
}

/** One shipment as the doors saw it. */
export interface ShipTruth {
  uid: string;
  locker: string;
  codes: Codes;
  /** the shipment this one swaps (its drop-off is that one's pick-up) */
  swaps: string | null;
  /** physical drop-offs (parcel in, door shut) and pick-ups (parcel out, door shut) */
  dropped: number;
  picked: number;
  gaveUp: number;
  /** what happened to it, cycle by cycle: "#12 drop (kill: item)" */
  history: string[];
}

export interface CycleRecord {
  no: number;
  kind: CycleKind;
  locker: string;
  shipments: string[];
  kill: KillPoint | null;
  /** what the doors did: done | door-never-opened */
  outcome: string;
  presentations: number;
  ms: number;
  /** the drop-offs and pick-ups the doors did in this cycle */
  effects: { type: 'dropOff' | 'pickUp'; uid: string }[];
}

/** The states a shipment may be in, given what its door did (the swap's arrives by rule 7). */
export function expectedStates(s: ShipTruth): string[] {
  if (s.picked > 0) return ['PickedUp'];
  if (s.dropped > 0) return ['ReadyForPickup'];
  return s.swaps ? ['LockerAssigned'] : ['ReadyForDropoff'];
}
