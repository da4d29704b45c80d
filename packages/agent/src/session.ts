// Access sessions as a pure state machine: (sessions, input) -> { sessions, effects }.
// A session starts when a presented code is accepted and its lock pulsed, and ends when that
// door closes (or jams). At the close the session's codes and the item sensor decide (product.md):
// drop-off = opened with a drop-off code and closed with an item; pick-up = opened with a pick-up
// code and closed empty. A session holding both kinds (a swap, whose codes are shared) gives the
// pick-up first, then the drop-off, when it closes with an item.
//
// Sessions survive the agent (docs/agent.md, "What survives what"): every input that changes them
// is journalled in the same SQLite transaction as their effects and a checkpoint of the open
// sessions, and at start the agent replays the journal rows after the checkpoint through
// `journalInput` + `sessionStep`. What happened while the doors could not be watched (the agent
// dead, the board unreadable) arrives as `unobserved`: the door is closed now, its opening was not
// seen; the item sensor then decides only when it moved since the code was accepted.
import type { LockRef } from '@locker/common';

export interface SessionCode {
  id: string;
  usage: 'DropOff' | 'PickUp';
  shipmentUid: string;
}

export interface Session {
  sessionId: string;
  lockerUid: string;
  at: LockRef;
  codes: SessionCode[];
  opened: boolean;
  sawItemRemoved: boolean;
  /** the item sensor when the code was accepted (null: no sensor, or not known) */
  itemAtStart?: boolean | null;
  /** when the code was accepted (ISO, terminal clock) */
  startedAt?: string;
  /**
   * the doors were not watched for part of the session (its board unreadable, the agent dead):
   * an item sensor that never showed the item out may have missed it
   */
  blind?: boolean;
}

export type Sessions = Readonly<Record<string, Session>>;

export const lockKey = (r: LockRef) => `${r.bus}/${r.board}/${r.lock}`;

export type SessionInput =
  /** `doorOpen`: the door was already open when the code was accepted */
  | { kind: 'start'; session: Omit<Session, 'opened' | 'sawItemRemoved'>; doorOpen?: boolean }
  | { kind: 'doorOpened'; at: LockRef }
  | { kind: 'itemRemoved'; at: LockRef }
  | { kind: 'doorClosed'; at: LockRef; item: boolean | null }
  | { kind: 'jam'; at: LockRef }
  /**
   * The door is closed now and was not watched meanwhile (the board could not be read, or the
   * agent was dead): whether it opened is known only from the item sensor having moved.
   */
  | { kind: 'unobserved'; at: LockRef; item: boolean | null }
  /** the unlock could not be sent: the session never began */
  | { kind: 'abort'; at: LockRef }
  /** a board stopped answering (boardOffline): its sessions are no longer watched */
  | { kind: 'blindBoard'; bus: string; board: number };

export type IncompleteReason = 'closed-empty' | 'item-still-present' | 'door-did-not-open' | 'superseded' | 'not-seen-open' | 'abandoned';

export type SessionEffect =
  | { type: 'dropOff' | 'pickUp'; fields: { sessionId: string; shipmentUid: string; codeId: string; lockerUid: string; item: boolean | null } & LockRef }
  | {
      type: 'accessIncomplete';
      fields: { sessionId: string; reason: IncompleteReason; shipmentUids: string[]; usages: string[]; lockerUid: string } & LockRef;
    };

function done(s: Session, usage: 'DropOff' | 'PickUp', item: boolean | null): SessionEffect[] {
  const seen = new Set<string>();
  const out: SessionEffect[] = [];
  for (const c of s.codes) {
    if (c.usage !== usage || seen.has(c.shipmentUid)) continue;
    seen.add(c.shipmentUid);
    out.push({ type: usage === 'DropOff' ? 'dropOff' : 'pickUp', fields: { sessionId: s.sessionId, shipmentUid: c.shipmentUid, codeId: c.id, lockerUid: s.lockerUid, item, ...s.at } });
  }
  return out;
}

function incomplete(s: Session, reason: IncompleteReason): SessionEffect {
  return {
    type: 'accessIncomplete',
    fields: {
      sessionId: s.sessionId,
      reason,
      shipmentUids: [...new Set(s.codes.map((c) => c.shipmentUid))],
      usages: [...new Set(s.codes.map((c) => c.usage))],
      lockerUid: s.lockerUid,
      ...s.at,
    },
  };
}

/** What the close of a session means. */
export function closeOutcome(s: Session, item: boolean | null): SessionEffect[] {
  const hasDrop = s.codes.some((c) => c.usage === 'DropOff');
  const hasPick = s.codes.some((c) => c.usage === 'PickUp');
  if (item === null) {
    // no item sensor on this board: the code decides
    return [...(hasPick ? done(s, 'PickUp', item) : []), ...(hasDrop ? done(s, 'DropOff', item) : [])];
  }
  if (!item) return hasPick ? done(s, 'PickUp', item) : [incomplete(s, 'closed-empty')];
  // a swap closed with an item in: the old parcel went out only if the sensor showed it out, or
  // could have missed it; a watched door that never saw the item leave swapped nothing
  if (hasDrop && hasPick && s.itemAtStart === true && !s.sawItemRemoved && !s.blind) return [incomplete(s, 'item-still-present')];
  if (hasDrop) return [...(hasPick ? done(s, 'PickUp', item) : []), ...done(s, 'DropOff', item)];
  return [incomplete(s, 'item-still-present')];
}

export function sessionStep(sessions: Sessions, input: SessionInput): { sessions: Sessions; effects: SessionEffect[]; session: Session | null } {
  if (input.kind === 'blindBoard') {
    const hit = Object.entries(sessions).filter(([, s]) => s.at.bus === input.bus && s.at.board === input.board && !s.blind);
    if (!hit.length) return { sessions, effects: [], session: null };
    const next: Record<string, Session> = { ...sessions };
    for (const [k, s] of hit) next[k] = { ...s, blind: true };
    return { sessions: next, effects: [], session: null };
  }
  const key = input.kind === 'start' ? lockKey(input.session.at) : lockKey(input.at);
  const cur = sessions[key] ?? null;
  const without = () => {
    const next = { ...sessions };
    delete next[key];
    return next;
  };
  switch (input.kind) {
    case 'start': {
      const s: Session = { itemAtStart: null, ...input.session, opened: input.doorOpen === true, sawItemRemoved: false };
      return { sessions: { ...sessions, [key]: s }, effects: cur ? [incomplete(cur, 'superseded')] : [], session: s };
    }
    case 'doorOpened':
      if (!cur) return { sessions, effects: [], session: null };
      return { sessions: { ...sessions, [key]: { ...cur, opened: true } }, effects: [], session: cur };
    case 'itemRemoved':
      if (!cur) return { sessions, effects: [], session: null };
      return { sessions: { ...sessions, [key]: { ...cur, sawItemRemoved: true } }, effects: [], session: cur };
    case 'doorClosed':
      if (!cur || !cur.opened) return { sessions, effects: [], session: cur };
      return { sessions: without(), effects: closeOutcome(cur, input.item), session: cur };
    case 'jam':
      if (!cur) return { sessions, effects: [], session: null };
      return { sessions: without(), effects: [incomplete(cur, 'door-did-not-open')], session: cur };
    case 'unobserved': {
      if (!cur) return { sessions, effects: [], session: null };
      // seen open before the gap, or the item moved since the code: the door opened and is closed
      const itemMoved = input.item !== null && cur.itemAtStart !== undefined && cur.itemAtStart !== null && input.item !== cur.itemAtStart;
      if (cur.opened || itemMoved) return { sessions: without(), effects: closeOutcome({ ...cur, blind: true }, input.item), session: cur };
      // nothing shows the door ever opened: no drop-off or pick-up is invented
      return { sessions: without(), effects: [incomplete(cur, 'not-seen-open')], session: cur };
    }
    case 'abort':
      if (!cur) return { sessions, effects: [], session: null };
      return { sessions: without(), effects: [], session: cur };
  }
}

/**
 * Ends the sessions begun before `beforeIso` (a door whose close never came within the documented
 * limit, access.sessionMaxHours): accessIncomplete `abandoned`, so the journal and the replay stay bounded.
 */
export function expireSessions(sessions: Sessions, beforeIso: string): { sessions: Sessions; effects: SessionEffect[] } {
  const next: Record<string, Session> = {};
  const effects: SessionEffect[] = [];
  for (const [k, s] of Object.entries(sessions)) {
    if (s.startedAt !== undefined && s.startedAt < beforeIso) effects.push(incomplete(s, 'abandoned'));
    else next[k] = s;
  }
  return { sessions: effects.length ? next : sessions, effects };
}

/** A journalled event as the session input it was (for the replay at start); null when it is none. */
export function journalInput(type: string, f: Record<string, any>): SessionInput | null {
  if (type === 'boardOffline' && typeof f.bus === 'string' && typeof f.board === 'number') return { kind: 'blindBoard', bus: f.bus, board: f.board };
  if (typeof f.bus !== 'string' || typeof f.board !== 'number' || typeof f.lock !== 'number') return null;
  const at: LockRef = { bus: f.bus, board: f.board, lock: f.lock };
  switch (type) {
    case 'credentialAccepted': {
      if (!Array.isArray(f.codes) || typeof f.sessionId !== 'string') return null;
      const session = { sessionId: f.sessionId, lockerUid: f.lockerUid, at, codes: f.codes as SessionCode[], itemAtStart: f.itemAtStart ?? null, startedAt: f.startedAt };
      return { kind: 'start', session, doorOpen: f.doorOpen === true };
    }
    case 'credentialRefused':
      return typeof f.sessionId === 'string' ? { kind: 'abort', at } : null;
    case 'doorOpened':
      return { kind: 'doorOpened', at };
    case 'itemRemoved':
      return { kind: 'itemRemoved', at };
    case 'doorClosed':
      return { kind: 'doorClosed', at, item: f.item ?? null };
    case 'unlockUnobserved':
      return { kind: 'unobserved', at, item: f.item ?? null };
    case 'jam':
      return { kind: 'jam', at };
    default:
      return null;
  }
}
