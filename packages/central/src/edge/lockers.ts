// What a terminal is told about its lockers (down/lockers, docs/edge-protocol.md): each locker of
// its pick up point with its name, size, service state and where its lock sits, and the state of
// the shipment holding it. For the technician's page; nothing personal (no receiver, no codes).
import crypto from 'node:crypto';
import type { LockerEntry } from '@locker/common';
import type { ReadAll } from '../db/prepared-read';

const CURRENT_LOCKERS_SQL =
  'select l.uid, l.name, l.size_code, l.width, l.height, l.length, l.active, l.bus, l.board_address, l.lock_number, s.state_code from lockers as l left join shipments as s on s.uid = l.booked_shipment_uid where l.pup_uid = ?';

interface LockerRow {
  uid: string;
  name: string;
  size_code: string | null;
  width: number | string;
  height: number | string;
  length: number | string;
  active: number | string | boolean;
  bus: string;
  board_address: number | string;
  lock_number: number | string;
  state_code: string | null;
}

/** The lockers of a pick up point, in bus/board/lock order (a fixed text: db/prepared-read.ts). */
export async function currentLockers(read: ReadAll, pupUid: string): Promise<LockerEntry[]> {
  const rows = await read<LockerRow>(CURRENT_LOCKERS_SQL, [pupUid]);
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
