import crypto from 'node:crypto';

// Randomness comes from a pooled crypto.randomFillSync buffer (one call per 4 KiB instead of one
// per value); the values are as random as crypto.randomBytes, at a fraction of the cost per call.
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

/** Opaque identifiers: 128 random bits as 32 lower-case hex characters. */
export function newUid(): string {
  return randomBytes(16).toString('hex');
}

/**
 * A time-ordered uid, for rows written at a high rate (shipments, access codes, callback events):
 * still 32 lower-case hex characters, but 48 bits of milliseconds since the epoch, then 80 random
 * bits (the layout of a UUIDv7, without version bits and dashes). Random uids land on a random
 * leaf page of every index keyed by them, so a group commit of N bookings dirtied and wrote ~N
 * pages per such index; time-ordered ones append to the rightmost page. 80 random bits keep them
 * unguessable enough (and every lookup is tenant-scoped anyway).
 */
export function newSeqUid(now = Date.now()): string {
  return now.toString(16).padStart(12, '0').slice(-12) + randomBytes(10).toString('hex');
}

/** Stored timestamps: ISO 8601 UTC with milliseconds and Z (sorts as text on both engines). */
export function toDbTime(d: Date): string {
  return d.toISOString();
}

/** API timestamps: "ISO 8601 without zone" (the API document); the values are UTC. */
export function toApiTime(stored: string | Date | null | undefined): string | null {
  if (stored == null) return null;
  const iso = typeof stored === 'string' ? stored : stored.toISOString();
  return iso.endsWith('Z') ? iso.slice(0, -1) : iso;
}

/** Parses an API timestamp; a value without zone is taken as UTC. Returns null when invalid. */
export function parseApiTime(v: string): Date | null {
  const s = /([zZ]|[+-]\d\d:?\d\d)$/.test(v) ? v : v + 'Z';
  const d = new Date(s);
  return Number.isNaN(d.getTime()) ? null : d;
}
