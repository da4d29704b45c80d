// The pure part of a terminal's clock (src/edge/clock.ts): the offset measured at a status, the
// flag beyond edge.maxClockSkewSeconds, the correction of event times, the door time never after
// arrival, the expiry proof a status gives, and the expiry cutoff of a pick up point.
import { describe, expect, it } from 'vitest';
import { correctTime, doorTime, expirySafeThrough, measureClock, onlineStatusColumns, receivedThrough, statusProvesReported, type TerminalEvidence } from '../src/edge/clock';

const T = (s: string) => new Date(`2026-03-01T${s}Z`);
const MIN = 60_000;
const H = 3_600_000;

describe('terminal clock (pure)', () => {
  it('offset = receive time - status.at; flagged only beyond the limit, either direction', () => {
    expect(measureClock(T('10:00:00.000'), '2026-03-01T09:59:59.500Z', 120)).toEqual({ offsetMs: 500, skewed: false });
    expect(measureClock(T('10:00:00.000'), '2026-03-01T10:10:00.000Z', 120)).toEqual({ offsetMs: -10 * MIN, skewed: true }); // 10 min ahead
    expect(measureClock(T('10:00:00.000'), '2026-03-01T09:57:00.000Z', 120)).toEqual({ offsetMs: 3 * MIN, skewed: true }); // 3 min behind
    expect(measureClock(T('10:00:00.000'), '2026-03-01T09:58:00.000Z', 120).skewed).toBe(false); // exactly the limit
    expect(measureClock(T('10:00:00.000'), 'garbage', 120)).toEqual({ offsetMs: 0, skewed: false });
  });

  it('times of a flagged terminal are corrected by its offset; within the limit they are taken as they are', () => {
    expect(correctTime('2026-03-01T10:10:00.000Z', { offsetMs: -10 * MIN, skewed: 1 })).toEqual(T('10:00:00.000'));
    expect(correctTime('2026-03-01T10:10:00.000Z', { offsetMs: '-600000', skewed: true })).toEqual(T('10:00:00.000')); // bigint from PostgreSQL
    expect(correctTime('2026-03-01T10:00:30.000Z', { offsetMs: -30_000, skewed: 0 })).toEqual(T('10:00:30.000'));
    expect(correctTime('2026-03-01T10:00:30.000Z', null)).toEqual(T('10:00:30.000'));
  });

  it('a door time is never later than the arrival', () => {
    // unflagged terminal a little ahead: clamped to arrival
    expect(doorTime('2026-03-01T10:00:30.000Z', T('10:00:10.000'), { offsetMs: -30_000, skewed: 0 })).toEqual(T('10:00:10.000'));
    // flagged terminal 10 min ahead, event 5 min before arrival in central time
    expect(doorTime('2026-03-01T10:05:00.000Z', T('10:00:00.000'), { offsetMs: -10 * MIN, skewed: 1 })).toEqual(T('09:55:00.000'));
    // a day-old event of a terminal with a good clock keeps its time
    expect(doorTime('2026-02-28T10:00:00.000Z', T('10:00:00.000'), null)).toEqual(new Date('2026-02-28T10:00:00.000Z'));
  });

  it('a status proves everything up to its time has arrived when nothing was unsent or its last seq is here', () => {
    const base = { statusAt: T('10:00:00.000'), unsent: 0, lastSeq: 10, receivedSeq: 3 };
    expect(statusProvesReported(base)).toBe(true);
    expect(statusProvesReported({ ...base, unsent: 7 })).toBe(false);
    expect(statusProvesReported({ ...base, unsent: 7, receivedSeq: 10 })).toBe(true);
    expect(receivedThrough({ last_seq: 12, applied_seq: 9 })).toBe(9); // a gap: 10, 11 held or missing
    expect(receivedThrough({ last_seq: '12' })).toBe(12);
  });

  it('onlineStatusColumns: measures, flags, proves or leaves a pending proof, promotes it later, never moves back', () => {
    const st = (at: string, unsent: number, lastSeq: number) => ({ at, journal: { unsent, lastSeq } });
    // reconnect after a day: 2 events unsent
    const a = onlineStatusColumns({ last_seq: 5, reported_through: '2026-02-28T10:00:00.000Z' }, st('2026-03-01T10:00:00.000Z', 2, 7), T('10:00:00.200'), 120);
    expect(a.measurement).toEqual({ offsetMs: 200, skewed: false });
    expect(a.columns).toMatchObject({ clock_offset_ms: 200, clock_skewed: 0, reported_through: '2026-02-28T10:00:00.000Z', pending_through_at: '2026-03-01T10:00:00.000Z', pending_through_seq: 7 });
    // the next status: seq 7 has arrived meanwhile -> the pending proof is promoted, this one proves itself
    const b = onlineStatusColumns({ last_seq: 7, ...a.columns }, st('2026-03-01T10:01:00.000Z', 0, 7), T('10:01:00.100'), 120);
    expect(b.columns).toMatchObject({ reported_through: '2026-03-01T10:01:00.000Z', pending_through_at: null, pending_through_seq: null });
    // a terminal 10 min ahead: flagged, its status time corrected (clamped to arrival)
    const c = onlineStatusColumns({ last_seq: 0 }, st('2026-03-01T10:10:00.000Z', 0, 0), T('10:00:00.000'), 120);
    expect(c.columns).toMatchObject({ clock_offset_ms: -10 * MIN, clock_skewed: 1, reported_through: '2026-03-01T10:00:00.000Z' });
    // a stale (retained) status does not move the proof back
    const d = onlineStatusColumns({ last_seq: 7, reported_through: '2026-03-01T10:01:00.000Z' }, st('2026-03-01T09:00:00.000Z', 0, 7), T('10:02:00.000'), 7200);
    expect(d.columns.reported_through).toBe('2026-03-01T10:01:00.000Z');
  });

  it("a seq proves arrival only of its own journal: a new store's status is not proven by the old store's count", () => {
    expect(receivedThrough({ applied_seq: 812, journal_id: 'old' }, 'new')).toBe(0);
    expect(receivedThrough({ applied_seq: 812, journal_id: 'old' }, 'old')).toBe(812);
    expect(receivedThrough({ applied_seq: 812, journal_id: null }, null)).toBe(812);
    const st = (at: string, unsent: number, lastSeq: number, id?: string) => ({ at, journal: { unsent, lastSeq, ...(id ? { id } : {}) } });
    // the cursor on the old store at 812; the new store's first status: 3 unsent, its last seq 3
    const prev = { last_seq: 812, applied_seq: 812, journal_id: 'old', reported_through: '2026-03-01T09:00:00.000Z' };
    const a = onlineStatusColumns(prev, st('2026-03-01T10:00:00.000Z', 3, 3, 'new'), T('10:00:00.000'), 120);
    expect(a.columns).toMatchObject({ reported_through: '2026-03-01T09:00:00.000Z', pending_through_at: '2026-03-01T10:00:00.000Z', pending_through_seq: 3, pending_through_journal: 'new' });
    // still on the old journal at the next status (3 unsent still): the pending proof is not promoted by 812 >= 3
    const b = onlineStatusColumns({ ...prev, ...a.columns }, st('2026-03-01T10:01:00.000Z', 3, 3, 'new'), T('10:01:00.000'), 120);
    expect(b.columns.reported_through).toBe('2026-03-01T09:00:00.000Z');
    // the cursor moved to the new journal and holds its seq 3: promoted
    const c = onlineStatusColumns({ ...prev, ...a.columns, journal_id: 'new', applied_seq: 3 }, st('2026-03-01T10:02:00.000Z', 1, 4, 'new'), T('10:02:00.000'), 120);
    expect(c.columns.reported_through).toBe('2026-03-01T10:00:00.000Z');
    // the same status naming the old journal (whose count is here) proves itself, as before
    const d = onlineStatusColumns(prev, st('2026-03-01T10:00:00.000Z', 3, 700, 'old'), T('10:00:00.000'), 120);
    expect(d.columns.reported_through).toBe('2026-03-01T10:00:00.000Z');
  });

  describe('expirySafeThrough: how far the sweep may expire at a pick up point', () => {
    const now = T('12:00:00.000');
    const ev = (p: Partial<TerminalEvidence>): TerminalEvidence => ({ heardAt: T('11:59:00.000'), reportedThrough: null, pendingAt: null, pendingSeq: null, receivedSeq: 0, earliestUnprocessed: null, ...p });
    it('no terminal, or one never heard from: no limit', () => {
      expect(expirySafeThrough([], now, 72 * H)).toBeNull();
      expect(expirySafeThrough([ev({ heardAt: null })], now, 72 * H)).toBeNull();
    });
    it('a terminal that reported through a time limits the sweep to it; the earliest terminal counts', () => {
      expect(expirySafeThrough([ev({ reportedThrough: T('11:59:00.000') })], now, 72 * H)).toEqual(T('11:59:00.000'));
      expect(expirySafeThrough([ev({ reportedThrough: T('11:59:00.000') }), ev({ reportedThrough: T('08:00:00.000') })], now, 72 * H)).toEqual(T('08:00:00.000'));
    });
    it('a heard terminal without any proof holds everything; a pending proof counts once its seq arrived', () => {
      expect(expirySafeThrough([ev({})], now, 72 * H)!.getTime()).toBeLessThan(0);
      expect(expirySafeThrough([ev({ pendingAt: T('11:00:00.000'), pendingSeq: 9, receivedSeq: 8 })], now, 72 * H)!.getTime()).toBeLessThan(0);
      expect(expirySafeThrough([ev({ pendingAt: T('11:00:00.000'), pendingSeq: 9, receivedSeq: 9 })], now, 72 * H)).toEqual(T('11:00:00.000'));
    });
    it('a stored door event not applied yet holds deadlines from its door time on', () => {
      expect(expirySafeThrough([ev({ reportedThrough: T('11:59:00.000'), earliestUnprocessed: T('09:00:00.000') })], now, 72 * H)).toEqual(new Date(T('09:00:00.000').getTime() - 1));
    });
    it('a terminal silent for longer than the cap no longer holds the sweep', () => {
      expect(expirySafeThrough([ev({ heardAt: new Date(now.getTime() - 73 * H) })], now, 72 * H)).toBeNull();
      expect(expirySafeThrough([ev({ heardAt: new Date(now.getTime() - 71 * H) })], now, 72 * H)!.getTime()).toBeLessThan(0);
    });
  });
});
