// Access sessions as a pure state machine: (sessions, input) -> { sessions, effects }.
// A session starts when a presented code is accepted and its lock pulsed, and ends when that
// door closes (or jams). At the close the session's codes and the item sensor decide (product.md):
// drop-off = opened with a drop-off code and closed with an item; pick-up = opened with a pick-up
// code and closed empty. A session holding both kinds (a swap, whose codes are shared) gives the
// pick-up first, then the drop-off, when it closes with an item.
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
  /** the unlock could not be sent: the session never began */
  | { kind: 'abort'; at: LockRef };

export type IncompleteReason = 'closed-empty' | 'item-still-present' | 'door-did-not-open' | 'superseded';

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
  if (hasDrop) return [...(hasPick ? done(s, 'PickUp', item) : []), ...done(s, 'DropOff', item)];
  return [incomplete(s, 'item-still-present')];
}

export function sessionStep(sessions: Sessions, input: SessionInput): { sessions: Sessions; effects: SessionEffect[]; session: Session | null } {
  const key = input.kind === 'start' ? lockKey(input.session.at) : lockKey(input.at);
  const cur = sessions[key] ?? null;
  const without = () => {
    const next = { ...sessions };
    delete next[key];
    return next;
  };
  switch (input.kind) {
    case 'start': {
      const s: Session = { ...input.session, opened: input.doorOpen === true, sawItemRemoved: false };
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
    case 'abort':
      if (!cur) return { sessions, effects: [], session: null };
      return { sessions: without(), effects: [], session: cur };
  }
}
