// Access codes: a numeric PIN (type Code) and a Qr value for drop-off and for pick-up, plus
// LinkCode Qr values (the newest valid). PINs are unique among the valid codes of one pick up
// point (a partial unique index; an insert that collides is retried with a new PIN). Qr values
// carry 144 random bits. The table is what a terminal needs to validate codes offline.
import { sql } from 'kysely';
import { newSeqUid as newUid, randomBytes } from '../ids';
import type { Trx } from './tx';
import type { Db } from '../db/database';
import { rawQuery, type Exec } from './sqlq';

export const PIN_DIGITS = 6;

const PIN_RANGE = 10 ** PIN_DIGITS;
const PIN_LIMIT = Math.floor(2 ** 32 / PIN_RANGE) * PIN_RANGE;

/** A uniform random PIN (rejection sampling over 32 random bits, from the pooled CSPRNG). */
export const newPin = (): string => {
  for (;;) {
    const v = randomBytes(4).readUInt32BE(0);
    if (v < PIN_LIMIT) return String(v % PIN_RANGE).padStart(PIN_DIGITS, '0');
  }
};
export const newQr = (): string => randomBytes(18).toString('base64url');

/** Where new PINs come from; tests replace next() to force a collision and watch the retry. */
export const pinSource = { next: newPin };

export interface CodeOwner {
  shipmentUid: string;
  tenantUid: string;
  pupUid: string;
  lockerUid: string | null;
}

const COLS = '(uid, shipment_uid, tenant_uid, pup_uid, locker_uid, usage, type, value, valid, shared, created_at, invalidated_at)';
const ROW = '(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)';
const rowParams = (o: CodeOwner, usage: string, type: 'Code' | 'Qr', value: string, now: string) => [newUid(), o.shipmentUid, o.tenantUid, o.pupUid, o.lockerUid, usage, type, value, 1, 0, now, null];
// ON CONFLICT names the partial unique index by its columns and predicate (both engines): a PIN
// row that collides with a valid PIN of the PUP is skipped (and retried), the other rows go in.
const insertRows = (n: number) =>
  `INSERT INTO access_codes ${COLS} VALUES ${Array.from({ length: n }, () => ROW).join(', ')} ON CONFLICT (pup_uid, value) WHERE valid = 1 AND shared = 0 AND type = 'Code' DO NOTHING RETURNING uid`;
const INSERT_N = [0, 1, 2, 3, 4, 5].map(insertRows);
/** the same without ON CONFLICT: a colliding PIN fails the statement (23505 on access_codes_pin_unique) */
const INSERT_STRICT_N = [0, 1, 2, 3, 4, 5].map((n) => `INSERT INTO access_codes ${COLS} VALUES ${Array.from({ length: n }, () => ROW).join(', ')} RETURNING uid`);

/**
 * A new shipment's codes in one multi-row INSERT: PIN + Qr for each usage given, and a LinkCode
 * Qr. A PIN that collides with a valid PIN of the PUP is not inserted (RETURNING tells which);
 * only those are retried with new PINs. `exec`: a StatementBatch's run (the first INSERT then
 * travels with the shipment's other rows on PostgreSQL). `strict` (a batch written with the
 * COMMIT, whose answer comes too late to draw again): a collision fails the statement instead
 * (23505 on access_codes_pin_unique), and PgTxRunner runs the whole job again with new PINs.
 */
export async function insertNewShipmentCodes(trx: Trx, db: Db, o: CodeOwner, usages: ('DropOff' | 'PickUp')[], now: string, exec?: Exec, strict = false): Promise<void> {
  const run: Exec = exec ?? ((text, params) => rawQuery(trx, db, text, params));
  let pins = usages.map((u) => rowParams(o, u, 'Code', pinSource.next(), now));
  const rows = [...pins, ...usages.map((u) => rowParams(o, u, 'Qr', newQr(), now)), rowParams(o, 'LinkCode', 'Qr', newQr(), now)];
  let res = await run<{ uid: string }>((strict ? INSERT_STRICT_N : INSERT_N)[rows.length]!, rows.flat());
  // strict: every row is in, or the statement failed (its answer may come after the COMMIT: never draw again then)
  if (strict && res.rows.length < rows.length) throw new Error(`a strict insert of ${rows.length} codes answered ${res.rows.length}`);
  for (let attempt = 0; res.rows.length < rows.length; attempt++) {
    if (attempt > 50) throw new Error('could not find a free PIN at this pick up point');
    const inserted = new Set(res.rows.map((r) => r.uid));
    const retry = pins.filter((p) => !inserted.has(p[0] as string)).map((p) => rowParams(o, p[5] as string, 'Code', pinSource.next(), now));
    rows.length = 0;
    rows.push(...retry);
    pins = retry;
    res = await run<{ uid: string }>(INSERT_N[rows.length]!, rows.flat());
  }
}

/** Inserts a fresh PIN + Qr pair for a usage (DropOff or PickUp). */
export async function insertCodePair(trx: Trx, o: CodeOwner, usage: 'DropOff' | 'PickUp', now: string): Promise<{ pin: string; qr: string }> {
  const row = { shipment_uid: o.shipmentUid, tenant_uid: o.tenantUid, pup_uid: o.pupUid, locker_uid: o.lockerUid, usage, valid: 1 as const, shared: 0 as const, created_at: now, invalidated_at: null };
  let pin = '';
  for (let attempt = 0; ; attempt++) {
    pin = pinSource.next();
    const res = await trx
      .insertInto('access_codes')
      .values({ ...row, uid: newUid(), type: 'Code', value: pin })
      .onConflict((oc) => oc.columns(['pup_uid', 'value']).where(sql.ref('valid'), '=', sql.lit(1)).where(sql.ref('shared'), '=', sql.lit(0)).where(sql.ref('type'), '=', sql.lit('Code')).doNothing())
      .executeTakeFirst();
    if (Number(res.numInsertedOrUpdatedRows ?? 0) === 1) break;
    if (attempt > 50) throw new Error('could not find a free PIN at this pick up point');
  }
  const qr = newQr();
  await trx.insertInto('access_codes').values({ ...row, uid: newUid(), type: 'Qr', value: qr }).execute();
  return { pin, qr };
}

export async function insertLinkCode(trx: Trx, o: CodeOwner, now: string): Promise<string> {
  const value = newQr();
  await trx
    .insertInto('access_codes')
    .values({ uid: newUid(), shipment_uid: o.shipmentUid, tenant_uid: o.tenantUid, pup_uid: o.pupUid, locker_uid: o.lockerUid, usage: 'LinkCode', type: 'Qr', value, valid: 1, shared: 0, created_at: now, invalidated_at: null })
    .execute();
  return value;
}

/** Copies another shipment's valid codes of one usage as this shipment's codes of another usage (swap). */
export async function copyCodes(trx: Trx, fromShipment: string, fromUsage: 'DropOff' | 'PickUp', to: CodeOwner, toUsage: 'DropOff' | 'PickUp', now: string): Promise<void> {
  const src = await trx.selectFrom('access_codes').select(['type', 'value']).where('shipment_uid', '=', fromShipment).where('usage', '=', fromUsage).where('valid', '=', 1).execute();
  if (src.length === 0) return;
  await trx
    .insertInto('access_codes')
    .values(src.map((c) => ({ uid: newUid(), shipment_uid: to.shipmentUid, tenant_uid: to.tenantUid, pup_uid: to.pupUid, locker_uid: to.lockerUid, usage: toUsage, type: c.type, value: c.value, valid: 1 as const, shared: 1 as const, created_at: now, invalidated_at: null })))
    .execute();
}

const INVALIDATE_ALL = 'UPDATE access_codes SET valid = 0, invalidated_at = ? WHERE shipment_uid = ? AND valid = 1';
const INVALIDATE_USAGE = `${INVALIDATE_ALL} AND usage = ?`;

export async function invalidateCodes(trx: Trx, db: Db, shipmentUid: string, usage: 'DropOff' | 'PickUp' | 'LinkCode' | 'all', now: string): Promise<void> {
  if (usage === 'all') await rawQuery(trx, db, INVALIDATE_ALL, [now, shipmentUid]);
  else await rawQuery(trx, db, INVALIDATE_USAGE, [now, shipmentUid, usage]);
}
