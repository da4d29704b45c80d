// A terminal's clock, seen from the central service (docs/edge-protocol.md, "Clock skew and door
// time"; docs/state-machine.md, "Door time"). Pure functions: the edge sync measures at every
// online status (onStatus) and corrects each door event's time (processEvent); the expiry sweep
// decides from the same numbers whether a terminal may still hold an unreported drop-off.
//
// - offset = central receive time - status.at. It includes the message's transit time (and, for a
//   retained status redelivered to a central instance that just subscribed, its age: at most one
//   status interval), so it is only an upper bound of the terminal being behind; hence small
//   offsets are ignored and only one beyond the limit counts.
// - skewed = |offset| > edge.maxClockSkewSeconds: the terminal is flagged and the times it reports
//   are corrected by the offset (time + offset). Within the limit, its times are taken as they are.
// - a door time is never later than the event's arrival (an event cannot arrive before it
//   happened): a terminal ahead of the central clock, within the limit, is clamped to arrival.

export interface ClockMeasurement {
  /** central receive time - terminal time, milliseconds (positive: the terminal is behind) */
  offsetMs: number;
  /** |offsetMs| exceeds the limit: flagged, and its times are corrected */
  skewed: boolean;
}

/** What the central service keeps of a terminal's clock (edge_terminals.clock_offset_ms / clock_skewed). */
export interface StoredClock {
  offsetMs: number | string | null | undefined;
  skewed: number | boolean | null | undefined;
}

const ms = (t: Date | string): number => (typeof t === 'string' ? Date.parse(t) : t.getTime());

/** Measures the offset of a status that arrived at `receivedAt` and says `terminalAt`. */
export function measureClock(receivedAt: Date, terminalAt: Date | string, maxSkewSeconds: number): ClockMeasurement {
  const t = ms(terminalAt);
  if (!Number.isFinite(t)) return { offsetMs: 0, skewed: false };
  const offsetMs = receivedAt.getTime() - t;
  return { offsetMs, skewed: Math.abs(offsetMs) > maxSkewSeconds * 1000 };
}

/** The offset to apply to the terminal's times: the measured one when flagged, else 0. */
export function correctionMs(stored: StoredClock | null | undefined): number {
  if (!stored) return 0;
  const skewed = stored.skewed === true || Number(stored.skewed) === 1;
  const off = Number(stored.offsetMs ?? 0);
  return skewed && Number.isFinite(off) ? off : 0;
}

/** A terminal time in central time (corrected when the terminal is flagged). */
export function correctTime(terminalAt: Date | string, stored: StoredClock | null | undefined): Date {
  return new Date(ms(terminalAt) + correctionMs(stored));
}

/**
 * The door time of an event: its terminal time, corrected, and never later than its arrival.
 * An `at` that does not parse (the protocol's schema refuses those) falls back to the arrival.
 */
export function doorTime(terminalAt: Date | string, receivedAt: Date, stored: StoredClock | null | undefined): Date {
  const t = ms(terminalAt);
  if (!Number.isFinite(t)) return new Date(receivedAt.getTime());
  const corrected = t + correctionMs(stored);
  return new Date(Math.min(corrected, receivedAt.getTime()));
}

// ---------------------------------------------------------------------------------- expiry proof

/** What a status tells about the terminal's journal, and what the central service holds. */
export interface ReportedInput {
  /** the status' time, corrected (central time) */
  statusAt: Date;
  /** journal.unsent of the status */
  unsent: number;
  /** journal.lastSeq of the status: every event the terminal had journalled by statusAt */
  lastSeq: number;
  /** the highest seq the central service has received from the terminal */
  receivedSeq: number;
}

/**
 * Whether a status proves that every event the terminal journalled up to its time has reached the
 * central service: nothing was unsent, or the central service already holds its last seq.
 */
export function statusProvesReported(s: ReportedInput): boolean {
  return s.unsent === 0 || s.receivedSeq >= s.lastSeq;
}

/** A terminal of a pick up point, as the expiry sweep sees it. */
export interface TerminalEvidence {
  /** never heard from (no status ever): it has no codes of this central service, so no drop-off */
  heardAt: Date | null;
  /** central time up to which every event of the terminal has arrived (null: no proof yet) */
  reportedThrough: Date | null;
  /** a status with unsent events: proven once the central service holds pendingSeq */
  pendingAt: Date | null;
  pendingSeq: number | null;
  /** highest seq received from the terminal */
  receivedSeq: number;
  /** the earliest door time (corrected) of its stored door events not yet applied, if any */
  earliestUnprocessed: Date | null;
}

/**
 * The latest drop-off deadline the expiry sweep may act on at a pick up point: a booking whose
 * deadline is at or before this time cannot have a drop-off before its deadline still on its way
 * from any of the point's terminals. `null`: no limit (no terminal can hold one).
 *
 * Per terminal:
 * - never heard from: no limit (it never held this central service's codes);
 * - silent for longer than `maxOfflineMs` (now - heardAt): no limit; the sweep stops waiting (a
 *   drop-off that still comes in wins the expiry race, docs/state-machine.md);
 * - otherwise: the time through which all its events have arrived (reportedThrough, or the time of
 *   a pending status whose last seq has arrived since), and before any of its stored door events
 *   that are not applied yet (they are applied first).
 * The point's limit is the earliest of its terminals' limits.
 */
export function expirySafeThrough(terminals: TerminalEvidence[], now: Date, maxOfflineMs: number): Date | null {
  let limit: number | null = null;
  const min = (v: number) => {
    limit = limit === null ? v : Math.min(limit, v);
  };
  for (const t of terminals) {
    if (!t.heardAt) continue;
    if (now.getTime() - t.heardAt.getTime() > maxOfflineMs) continue;
    let through = t.reportedThrough ? t.reportedThrough.getTime() : Number.NEGATIVE_INFINITY;
    if (t.pendingAt && t.pendingSeq !== null && t.receivedSeq >= t.pendingSeq) through = Math.max(through, t.pendingAt.getTime());
    if (t.earliestUnprocessed) through = Math.min(through, t.earliestUnprocessed.getTime() - 1);
    min(through);
  }
  if (limit === null) return null;
  return limit === Number.NEGATIVE_INFINITY ? new Date(-8.64e15) : new Date(limit);
}

/**
 * The seq up to which the central service holds every event of the terminal: applied_seq where
 * events are applied in order (nothing before it is missing), else the highest seq received.
 * `journalId`: of that journal (a status's journal.id): applied_seq counts the cursor's journal
 * only, so for another one (a new store whose events have not come, the cursor still on the old
 * one) nothing is known to have arrived (0). Null: a status of an agent that names no journal.
 */
export function receivedThrough(row: { last_seq?: number | string | null; applied_seq?: number | string | null; journal_id?: string | null }, journalId: string | null = null): number {
  if (journalId !== null && (row.journal_id ?? null) !== journalId) return 0;
  return Number(row.applied_seq ?? row.last_seq ?? 0);
}

/** The edge_terminals columns of the clock and the expiry proof. */
export interface TerminalClockColumns {
  clock_offset_ms: number;
  clock_skewed: 0 | 1;
  clock_measured_at: string;
  reported_through: string | null;
  pending_through_at: string | null;
  pending_through_seq: number | null;
  pending_through_journal: string | null;
}

/** What edge_terminals held before an online status arrived. */
export interface TerminalClockRow {
  /** highest seq stored (written by the apply that follows the store: edge/ingest.ts) */
  last_seq: number | string;
  /** every event up to this seq is stored and applied (ordered delivery, migration 405): preferred */
  applied_seq?: number | string | null;
  reported_through?: string | null;
  pending_through_at?: string | null;
  pending_through_seq?: number | string | null;
  /** the journal whose seq pending_through_seq counts (migration 413; null: the status named none) */
  pending_through_journal?: string | null;
  /** the cursor's journal: the one applied_seq counts */
  journal_id?: string | null;
}

/**
 * An online status arrived at `receivedAt`: the new clock measurement and expiry proof of its
 * terminal. A pending proof whose last seq has arrived meanwhile is promoted first; then this
 * status proves its own (corrected) time when nothing older is unsent, or becomes the pending one.
 * reported_through never moves back.
 */
export function onlineStatusColumns(
  prev: TerminalClockRow,
  status: { at: string; journal: { unsent: number; lastSeq: number; id?: string } },
  receivedAt: Date,
  maxSkewSeconds: number,
): { columns: TerminalClockColumns; measurement: ClockMeasurement } {
  const m = measureClock(receivedAt, status.at, maxSkewSeconds);
  const statusAt = doorTime(status.at, receivedAt, { offsetMs: m.offsetMs, skewed: m.skewed });
  // a seq proves something only about the journal it counts (the status's, the pending proof's)
  let through = prev.reported_through ? Date.parse(prev.reported_through) : Number.NEGATIVE_INFINITY;
  if (prev.pending_through_at && prev.pending_through_seq != null && receivedThrough(prev, prev.pending_through_journal ?? null) >= Number(prev.pending_through_seq)) through = Math.max(through, Date.parse(prev.pending_through_at));
  let pendingAt: string | null = null;
  let pendingSeq: number | null = null;
  const journal = status.journal.id ?? null;
  if (statusProvesReported({ statusAt, unsent: status.journal.unsent, lastSeq: status.journal.lastSeq, receivedSeq: receivedThrough(prev, journal) })) through = Math.max(through, statusAt.getTime());
  else {
    pendingAt = statusAt.toISOString();
    pendingSeq = status.journal.lastSeq;
  }
  return {
    measurement: m,
    columns: {
      clock_offset_ms: m.offsetMs,
      clock_skewed: m.skewed ? 1 : 0,
      clock_measured_at: receivedAt.toISOString(),
      reported_through: Number.isFinite(through) ? new Date(through).toISOString() : null,
      pending_through_at: pendingAt,
      pending_through_seq: pendingSeq,
      pending_through_journal: pendingAt === null ? null : journal,
    },
  };
}
