// What a terminal must hold to validate codes offline: the valid DropOff / PickUp codes of its
// pick up point that have a locker, each with where the lock sits, the value only as a hash.
import crypto from 'node:crypto';
import { hashCode, type CodeEntry } from '@locker/common';
import type { ReadAll } from '../db/prepared-read';

/**
 * The valid drop-off and pick-up codes of a pick up point with their locks, as a fixed text
 * (db/prepared-read.ts; one parameter: the point's uid). Reads only the point's valid codes (index
 * access_codes_pup_valid_value), not its whole history. Exported for the plan's test.
 */
export const CURRENT_CODES_SQL =
  "select c.uid, c.shipment_uid, c.usage, c.type, c.value, l.uid as locker_uid, l.bus, l.board_address, l.lock_number from access_codes as c inner join lockers as l on l.uid = c.locker_uid where c.pup_uid = ? and c.valid = 1 and c.usage in ('DropOff', 'PickUp') order by c.uid";

interface CodeRow {
  uid: string;
  shipment_uid: string;
  usage: string;
  type: string;
  value: string;
  locker_uid: string;
  bus: string;
  board_address: number | string;
  lock_number: number | string;
}

export async function currentCodes(read: ReadAll, pupUid: string): Promise<CodeEntry[]> {
  const rows = await read<CodeRow>(CURRENT_CODES_SQL, [pupUid]);
  return rows.map((r) => ({
    id: r.uid,
    shipmentUid: r.shipment_uid,
    usage: r.usage as CodeEntry['usage'],
    type: r.type as CodeEntry['type'],
    hash: hashCode(r.value),
    locker: { uid: r.locker_uid, bus: r.bus, board: Number(r.board_address), lock: Number(r.lock_number) },
  }));
}

/** A digest of everything a terminal sees of a code: a change of any field is an upsert. */
export function entryDigest(e: CodeEntry): string {
  const canon = [e.id, e.shipmentUid, e.usage, e.type, e.hash, e.locker.uid, e.locker.bus, e.locker.board, e.locker.lock].join('\u0000');
  return crypto.createHash('sha256').update(canon).digest('hex').slice(0, 32);
}

export interface CodeDiff {
  upserts: CodeEntry[];
  revoke: string[];
}

/** The change from the pushed set (code uid -> digest) to the current entries. */
export function diffCodes(pushed: Map<string, string>, current: CodeEntry[]): CodeDiff {
  const upserts: CodeEntry[] = [];
  const seen = new Set<string>();
  for (const e of current) {
    seen.add(e.id);
    if (pushed.get(e.id) !== entryDigest(e)) upserts.push(e);
  }
  const revoke = [...pushed.keys()].filter((id) => !seen.has(id)).sort();
  return { upserts, revoke };
}
