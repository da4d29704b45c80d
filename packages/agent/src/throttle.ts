// Failed-code throttling at the terminal (docs/agent.md, "access"). Failures are counted per
// reader and across the whole terminal within access.failureWindowSeconds; an accepted code does
// NOT reset them (a holder of one valid code could otherwise interleave guesses with it forever),
// they only age out of the window. Reaching the budget locks the reader (or, for the terminal
// budget, every reader) out; each lock-out that follows the previous one within
// access.escalationResetSeconds doubles the duration, up to access.maxLockoutSeconds.
// State lives in the store (meta + failures), so a restart does not reset it.
import type { AgentStore } from './store';
import type { AgentConfig } from './config';

/** The meta key suffix of the terminal-wide budget (reader names never contain '*'). */
export const TERMINAL = '*';

export class AccessThrottle {
  constructor(
    private readonly store: AgentStore,
    private readonly cfg: AgentConfig['access'],
  ) {}

  get terminalMaxFailures(): number {
    return this.cfg.terminalMaxFailures ?? this.cfg.maxFailures * 3;
  }

  private num(key: string): number {
    return Number(this.store.getMeta(key) ?? 0) || 0;
  }

  /** ms epoch until which codes from this reader are refused (the reader's or the terminal's lock-out); 0 when not throttled. */
  throttledUntil(reader: string, nowMs: number): number {
    const until = Math.max(this.num(`lockout.${reader}`), this.num(`lockout.${TERMINAL}`));
    return until > nowMs ? until : 0;
  }

  /** Records a failed attempt; returns the lock-outs it started (seconds), if any. */
  fail(reader: string, nowMs: number): { failures: number; terminalFailures: number; locked: { scope: string; seconds: number }[] } {
    const windowStart = nowMs - this.cfg.failureWindowSeconds * 1000;
    this.store.pruneFailures(windowStart);
    this.store.recordFailure(reader, nowMs);
    const failures = this.store.failuresSince(reader, Math.max(windowStart, this.num(`failuresFrom.${reader}`)));
    const terminalFailures = this.store.failuresSinceAll(Math.max(windowStart, this.num(`failuresFrom.${TERMINAL}`)));
    const locked: { scope: string; seconds: number }[] = [];
    if (failures >= this.cfg.maxFailures) locked.push({ scope: reader, seconds: this.lock(reader, nowMs) });
    if (terminalFailures >= this.terminalMaxFailures) locked.push({ scope: TERMINAL, seconds: this.lock(TERMINAL, nowMs) });
    return { failures, terminalFailures, locked };
  }

  private lock(scope: string, nowMs: number): number {
    const prevEnd = this.num(`lockout.${scope}`);
    const prevLevel = this.num(`lockoutLevel.${scope}`);
    // escalate when this lock-out follows the previous one without a quiet period in between
    const level = prevEnd && nowMs - prevEnd < this.cfg.escalationResetSeconds * 1000 ? prevLevel + 1 : 0;
    const seconds = Math.min(this.cfg.lockoutSeconds * 2 ** Math.min(level, 30), Math.max(this.cfg.maxLockoutSeconds, this.cfg.lockoutSeconds));
    this.store.setMeta(`lockout.${scope}`, String(nowMs + seconds * 1000));
    this.store.setMeta(`lockoutLevel.${scope}`, String(level));
    // the failures that caused this lock-out do not count towards the next one
    this.store.setMeta(`failuresFrom.${scope}`, String(nowMs + 1));
    return seconds;
  }
}
