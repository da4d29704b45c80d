// What a terminal is told about its lockers (down/lockers, docs/edge-protocol.md): each locker of
// its pick up point with its name, size, service state and where its lock sits, and the state of
// the shipment holding it. For the technician's page; nothing personal (no receiver, no codes).
import crypto from 'node:crypto';
import type { Kysely } from 'kysely';
import type { LockerEntry } from '@locker/common';
import type { Database } from '../db/schema';

/** The lockers of a pick up point, in bus/board/lock order. */
export async function currentLockers(db: Kysely<Database>, pupUid: string): Promise<LockerEntry[]> {
  const rows = await db
    .selectFrom('lockers as l')
    .leftJoin('shipments as s', 's.uid', 'l.booked_shipment_uid')
    .select(['l.uid', 'l.name', 'l.size_code', 'l.width', 'l.height', 'l.length', 'l.active', 'l.bus', 'l.board_address', 'l.lock_number', 's.state_code'])
    .where('l.pup_uid', '=', pupUid)
    .execute();
  return rows
    .map((r) => ({
      uid: r.uid,
      name: r.name,
      size: { code: r.size_code ?? null, width: Number(r.width), height: Number(r.height), length: Number(r.length) },
      serviceState: Number(r.active) === 1 ? ('active' as const) : ('outOfService' as const),
      bus: r.bus,
      board: Number(r.board_address),
      lock: Number(r.lock_number),
      shipmentState: r.state_code ?? null,
    }))
    .sort((a, b) => (a.bus < b.bus ? -1 : a.bus > b.bus ? 1 : a.board - b.board || a.lock - b.lock || (a.uid < b.uid ? -1 : 1)));
}

/** A digest of the whole list: any change of any field is a new list to push. */
export function lockersDigest(lockers: readonly LockerEntry[]): string {
  return crypto.createHash('sha256').update(JSON.stringify(lockers)).digest('hex').slice(0, 32);
}
