// Failed-login throttling of /connect/token, in memory per central instance (docs/api.md,
// "Throttling and limits"). Each key (a client id from one address, or one address across client
// ids) may fail `max` times within `windowMs`; then it is blocked for `blockMs`, and every further
// block of the same key (remembered for a day after its last failure) lasts twice as long as the
// one before, up to `maxBlockMs`. A blocked key is answered at once, without running scrypt.
//
// An attempt counts as a failure from the moment it is admitted (so a burst of concurrent attempts
// is throttled too, not only the ones after the first checks finished); a success takes it back.

export interface FailureThrottleOptions {
  /** failures within the window before the key is blocked; 0 turns the throttle off */
  max: number;
  windowMs: number;
  /** the first block; each further block of the same key doubles it */
  blockMs: number;
  maxBlockMs: number;
  now: () => number;
  /** most keys kept (the oldest idle ones are forgotten first) */
  maxKeys?: number;
}

interface Entry {
  /** failures (and attempts still running) in the current window */
  count: number;
  since: number;
  blockedUntil: number;
  /** blocks so far: the next block lasts blockMs * 2^blocks */
  blocks: number;
  lastFailure: number;
}

/** How long an idle key's escalation is remembered. */
const MEMORY_MS = 24 * 3_600_000;

export class FailureThrottle {
  private readonly entries = new Map<string, Entry>();
  private readonly maxKeys: number;

  constructor(private readonly o: FailureThrottleOptions) {
    this.maxKeys = o.maxKeys ?? 100_000;
  }

  get enabled(): boolean {
    return this.o.max > 0;
  }

  /** Milliseconds the key must still wait (0: it may try now). */
  retryAfterMs(key: string): number {
    if (!this.enabled) return 0;
    const e = this.entries.get(key);
    if (!e) return 0;
    const now = this.o.now();
    if (e.blockedUntil > now) return e.blockedUntil - now;
    // the budget is taken by attempts still running: try again in a moment
    if (now - e.since <= this.o.windowMs && e.count >= this.o.max) return 1000;
    return 0;
  }

  /** An attempt is admitted: it counts as a failure until succeeded() takes it back. */
  attempt(key: string): void {
    if (!this.enabled) return;
    const now = this.o.now();
    let e = this.entries.get(key);
    if (e) this.entries.delete(key); // re-inserted below: the map's order is least recently used first
    if (!e || now - e.lastFailure > MEMORY_MS) e = { count: 0, since: now, blockedUntil: 0, blocks: 0, lastFailure: now };
    if (now - e.since > this.o.windowMs) {
      e.count = 0;
      e.since = now;
    }
    e.count++;
    e.lastFailure = now;
    this.entries.set(key, e);
    this.prune(now);
  }

  /**
   * The attempt failed: blocks the key when its failures reached the limit. Returns the block's
   * length in milliseconds when this failure started one, else 0.
   */
  failed(key: string): number {
    if (!this.enabled) return 0;
    const e = this.entries.get(key);
    const now = this.o.now();
    if (!e || e.count < this.o.max || e.blockedUntil > now) return 0;
    const ms = Math.min(this.o.maxBlockMs, this.o.blockMs * 2 ** Math.min(e.blocks, 30));
    e.blockedUntil = now + ms;
    e.blocks++;
    // after the block, a fresh budget (the escalation is kept in `blocks`)
    e.count = 0;
    e.since = now;
    return ms;
  }

  /** The attempt succeeded: it no longer counts. */
  succeeded(key: string, forget: boolean): void {
    const e = this.entries.get(key);
    if (!e) return;
    if (forget) this.entries.delete(key);
    else if (e.count > 0) e.count--;
  }

  size(): number {
    return this.entries.size;
  }

  private prune(now: number): void {
    if (this.entries.size <= this.maxKeys) return;
    for (const [k, e] of this.entries) {
      if (this.entries.size <= this.maxKeys * 0.9) break;
      // oldest first; a key blocked right now is kept unless the map is far over its size
      if (e.blockedUntil > now && this.entries.size < this.maxKeys * 1.5) continue;
      this.entries.delete(k);
    }
  }
}
