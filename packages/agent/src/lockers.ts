// down/lockers on the terminal (docs/edge-protocol.md): the pick up point's locker list as the
// central service knows it (names, sizes, service state, the holding shipment's state), kept in
// the store for the technician's page (store.lockerInfo). A full list each time: the newest wins;
// a list of the held epoch with a lower version (late, redelivered) is ignored.
import type { Logger } from 'pino';
import { LockersMessage, parseMessage } from '@locker/common';
import type { AgentStore, LockersMeta } from './store';

export type LockersDecision = { action: 'replace' } | { action: 'ignore'; why: 'stale' | 'same' };

export function decideLockers(held: Pick<LockersMeta, 'epoch' | 'version'>, msg: Pick<LockersMessage, 'epoch' | 'version'>): LockersDecision {
  if (held.epoch !== msg.epoch) return { action: 'replace' };
  if (msg.version < held.version) return { action: 'ignore', why: 'stale' };
  if (msg.version === held.version) return { action: 'ignore', why: 'same' };
  return { action: 'replace' };
}

/** Parses and stores a down/lockers message; true when the held list changed. */
export function takeLockers(store: AgentStore, payload: Buffer, log: Logger): boolean {
  const msg = parseMessage(LockersMessage, payload);
  if (!msg) {
    log.warn({ bytes: payload.length }, 'malformed lockers message dropped');
    return false;
  }
  const held = store.lockersMeta();
  const d = decideLockers(held, msg);
  if (d.action === 'ignore') {
    log.debug({ version: msg.version, held: held.version, why: d.why }, 'locker list ignored');
    return false;
  }
  store.replaceLockers(msg.epoch, msg.version, msg.at, msg.lockers);
  log.info({ version: msg.version, count: msg.lockers.length }, 'locker list applied');
  return true;
}
