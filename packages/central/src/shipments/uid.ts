// Uids for the rows the shipments area writes on the booking path (shipments, access codes):
// still 32 lower-case hex characters, but time-ordered: 48 bits of milliseconds since the epoch,
// then 80 random bits (the layout of a UUIDv7, without version bits and dashes). Random uids land
// on a random leaf page of every index keyed by them (the primary key, and the access-code,
// transition and outbox indexes led by shipment_uid), so a group commit of N bookings dirtied
// and wrote ~N pages per such index; time-ordered ones append to the rightmost page. 80 random
// bits keep them unguessable enough (and every lookup is tenant-scoped anyway).
//
// Randomness comes from a pooled crypto.randomFillSync buffer (one call per 4 KiB instead of one
// per value); the values are as random as crypto.randomBytes.
import crypto from 'node:crypto';

const POOL_SIZE = 4096;
const pool = Buffer.alloc(POOL_SIZE);
let offset = POOL_SIZE;

/** `n` cryptographically random bytes (a copy, from the pool). */
export function randomBytes(n: number): Buffer {
  if (n > POOL_SIZE) return crypto.randomBytes(n);
  if (offset + n > POOL_SIZE) {
    crypto.randomFillSync(pool);
    offset = 0;
  }
  const b = Buffer.from(pool.subarray(offset, offset + n));
  pool.fill(0, offset, offset + n);
  offset += n;
  return b;
}

/** A time-ordered 32-hex uid (48-bit ms timestamp + 80 random bits). */
export function newSeqUid(now = Date.now()): string {
  return now.toString(16).padStart(12, '0').slice(-12) + randomBytes(10).toString('hex');
}
