// The booking engine: choose and take a locker for a package. lockers.booked_shipment_uid is the
// single source of truth for "booked"; a locker is taken only by a conditional UPDATE ... WHERE
// booked_shipment_uid IS NULL whose affected-row count is checked, so two concurrent bookings can
// never hold the same locker on either engine. On PostgreSQL that UPDATE locks the candidate with
// FOR UPDATE SKIP LOCKED so concurrent bookers do not queue behind each other.
import { ApiError } from '../errors';
import type { TenantPrincipal } from '../context';
import type { Db } from '../db/database';
import type { Trx } from './tx';
import { rawQuery } from './sqlq';

export interface Dim {
  width: number;
  height: number;
  length: number;
}

/** A package fits a locker when its sides, in some orientation, fit the locker's sides. */
export function fits(pkg: Dim, locker: Dim): boolean {
  const a = [pkg.width, pkg.height, pkg.length].sort((x, y) => x - y);
  const b = [locker.width, locker.height, locker.length].sort((x, y) => x - y);
  return a[0]! <= b[0]! && a[1]! <= b[1]! && a[2]! <= b[2]!;
}

export interface LockerCandidate extends Dim {
  uid: string;
  name: string;
  type_code: string;
  booked_shipment_uid: string | null;
}

const sizeKey = (l: Dim) => [l.width, l.height, l.length].sort((x, y) => x - y).join('x');
const volume = (l: Dim) => l.width * l.height * l.length;

/**
 * The free lockers to try, best first: the smallest fitting size first (normal lockers before
 * special kinds such as cooled, then by name). Without allowLarger only lockers of the smallest
 * size that fits (free or not) are candidates.
 */
export function chooseCandidates(lockers: LockerCandidate[], pkg: Dim, allowLarger: boolean): LockerCandidate[] {
  const fitting = lockers
    .filter((l) => fits(pkg, l))
    .sort((x, y) => volume(x) - volume(y) || Number(x.type_code !== 'normal') - Number(y.type_code !== 'normal') || (x.name < y.name ? -1 : x.name > y.name ? 1 : 0));
  if (fitting.length === 0) return [];
  const allowed = allowLarger ? fitting : fitting.filter((l) => sizeKey(l) === sizeKey(fitting[0]!));
  return allowed.filter((l) => l.booked_shipment_uid === null);
}

export interface BookRequest {
  pupUid: string;
  dimension: Dim;
  allowLarger: boolean;
  allowOverflow: boolean;
  lockerUid?: string | null;
  /**
   * Accounts the caller must be able to manage (ShipmentService.checkUser), checked in the
   * booking's first statement on PostgreSQL (one round trip less per account) and in the given
   * order before its outcome is looked at: a refused account is InvalidUserUid whatever the
   * booking found (the transaction then rolls back whatever it took). Only for a booking with
   * allowLarger and no lockerUid; set by the route instead of calling checkUser first.
   */
  userChecks?: UserCheck[];
}

export interface UserCheck {
  uid: string;
  field: string;
}

/**
 * canManageAccount (accounts/access.ts) as ShipmentService.checkUser decides it: the account is
 * linked to a PUP of the tenant, and it is not another tenant's dispatcher main account.
 */
export function assertManageable(tenant: TenantPrincipal, check: UserCheck, linkedPups: readonly string[], foreignMain: boolean): void {
  if (!linkedPups.some((p) => tenant.pupUids.has(p)) || foreignMain) {
    throw new ApiError('InvalidUserUid', `${check.field}: ${check.uid} is not an account this client can manage`);
  }
}

export interface Booked {
  pupUid: string;
  lockerUid: string;
  lockerName: string;
}

/** Takes one locker if it is still free; true when this call took it. */
export async function takeLocker(trx: Trx, db: Db, lockerUid: string, shipmentUid: string, now: string): Promise<boolean> {
  // PostgreSQL: the row is locked with SKIP LOCKED inside the same statement (one round trip), so
  // a booker never waits behind another one that holds this locker and moves on to the next.
  const res = await rawQuery(
    trx,
    db,
    db.engine === 'postgres'
      ? 'UPDATE lockers SET booked_shipment_uid = ?, updated_at = ? WHERE uid = (SELECT uid FROM lockers WHERE uid = ? AND booked_shipment_uid IS NULL AND active = 1 FOR UPDATE SKIP LOCKED) AND booked_shipment_uid IS NULL AND active = 1'
      : 'UPDATE lockers SET booked_shipment_uid = ?, updated_at = ? WHERE uid = ? AND booked_shipment_uid IS NULL AND active = 1',
    [shipmentUid, now, lockerUid],
  );
  return res.numAffectedRows === 1;
}

/** Frees a locker held by this shipment (no-op when another holds it). */
export async function releaseLocker(trx: Trx, db: Db, lockerUid: string, shipmentUid: string, now: string): Promise<void> {
  await rawQuery(trx, db, 'UPDATE lockers SET booked_shipment_uid = NULL, updated_at = ? WHERE uid = ? AND booked_shipment_uid = ?', [now, lockerUid, shipmentUid]);
}

/** Hands a locker from one shipment to the next one of its chain. */
export async function transferLocker(trx: Trx, db: Db, lockerUid: string, fromUid: string, toUid: string, now: string): Promise<boolean> {
  const res = await rawQuery(trx, db, 'UPDATE lockers SET booked_shipment_uid = ?, updated_at = ? WHERE uid = ? AND booked_shipment_uid = ?', [toUid, now, lockerUid, fromUid]);
  return res.numAffectedRows === 1;
}

const noLocker = (msg: string) => new ApiError('NoLockerAvailable', msg);

const COLS = 'uid, name, width, height, length, type_code, booked_shipment_uid';
/** candidate order in SQL, as chooseCandidates orders (and lockers_free_candidates indexes on SQLite) */
const candidateOrder = (engine: 'sqlite' | 'postgres') => `width * height * length, CASE WHEN type_code = 'normal' THEN 0 ELSE 1 END, ${engine === 'postgres' ? 'name COLLATE "C"' : 'name'}`;
// smallest, middle and largest side of a locker (exact: no arithmetic on the values)
const MIN_SIDE = 'LEAST(width, height, length)';
const MID_SIDE = 'GREATEST(LEAST(width, height), LEAST(GREATEST(width, height), length))';
const MAX_SIDE = 'GREATEST(width, height, length)';
const PG_TAKE_FIRST_FITTING = `UPDATE lockers SET booked_shipment_uid = ?, updated_at = ? WHERE uid = (SELECT uid FROM lockers WHERE pup_uid = ? AND active = 1 AND booked_shipment_uid IS NULL AND ${MIN_SIDE} >= ? AND ${MID_SIDE} >= ? AND ${MAX_SIDE} >= ? ORDER BY ${candidateOrder('postgres')} LIMIT 1 FOR UPDATE SKIP LOCKED) AND booked_shipment_uid IS NULL RETURNING uid, name`;
const FIRST = 4;
/** PG_TAKE_FIRST_FITTING plus n account checks (userChecks) in one statement */
const pgTakeChecked = (n: number) =>
  `WITH t AS (${PG_TAKE_FIRST_FITTING}) SELECT (SELECT uid FROM t) AS uid, (SELECT name FROM t) AS name${Array.from(
    { length: n },
    (_, i) => `, ARRAY(SELECT pup_uid FROM account_pups WHERE account_uid = ?) AS p${i}, EXISTS (SELECT 1 FROM tenants WHERE main_account_uid = ? AND uid <> ?) AS f${i}`,
  ).join('')}`;
const PG_TAKE_CHECKED = [1, 2].map(pgTakeChecked);
/** the first few free lockers in candidate order, per engine (one text, built once) */
const firstCandidates = (engine: 'sqlite' | 'postgres') =>
  `SELECT ${COLS} FROM lockers WHERE pup_uid = ? AND active = 1 AND booked_shipment_uid IS NULL AND width * height * length >= ? ORDER BY ${candidateOrder(engine)} LIMIT ${FIRST}`;
const FIRST_CANDIDATES = { sqlite: firstCandidates('sqlite'), postgres: firstCandidates('postgres') };

/** Takes the first of the lockers that chooseCandidates keeps and that is still free. */
async function takeFirst(trx: Trx, db: Db, pupUid: string, lockers: LockerCandidate[], req: BookRequest, shipmentUid: string, now: string): Promise<Booked | null> {
  for (const c of chooseCandidates(lockers, req.dimension, req.allowLarger)) {
    if (await takeLocker(trx, db, c.uid, shipmentUid, now)) return { pupUid, lockerUid: c.uid, lockerName: c.name };
  }
  return null;
}

async function bookAt(trx: Trx, db: Db, tenant: TenantPrincipal, pupUid: string, req: BookRequest, shipmentUid: string, now: string): Promise<Booked | null> {
  if (req.allowLarger && db.engine === 'postgres') {
    // One round trip: choose the first free fitting locker in candidate order (the rule of
    // chooseCandidates, with the sides sorted in SQL), lock it skipping rows other bookers hold,
    // and take it.
    const [a, b, c] = [req.dimension.width, req.dimension.height, req.dimension.length].sort((x, y) => x - y) as [number, number, number];
    const checks = req.userChecks;
    if (checks?.length) {
      // the accounts checked in the same round trip (an overflow attempt does not repeat them)
      req.userChecks = undefined;
      const params: unknown[] = [shipmentUid, now, pupUid, a, b, c];
      for (const ch of checks) params.push(ch.uid, ch.uid, tenant.uid);
      const res = await rawQuery<Record<string, unknown>>(trx, db, PG_TAKE_CHECKED[checks.length - 1] ?? pgTakeChecked(checks.length), params);
      const row = res.rows[0]!;
      checks.forEach((ch, i) => assertManageable(tenant, ch, row[`p${i}`] as string[], row[`f${i}`] === true));
      return row.uid ? { pupUid, lockerUid: row.uid as string, lockerName: row.name as string } : null;
    }
    const res = await rawQuery<{ uid: string; name: string }>(trx, db, PG_TAKE_FIRST_FITTING, [shipmentUid, now, pupUid, a, b, c]);
    const got = res.rows[0];
    return got ? { pupUid, lockerUid: got.uid, lockerName: got.name } : null;
  }
  if (req.allowLarger) {
    // Only free lockers matter. Fetch the first few in candidate order (a locker smaller in
    // volume than the package cannot fit); the whole PUP only when none of those fits.
    const d = req.dimension;
    const first = (await rawQuery<LockerCandidate>(trx, db, FIRST_CANDIDATES[db.engine], [pupUid, d.width * d.height * d.length])).rows;
    const got = await takeFirst(trx, db, pupUid, first, req, shipmentUid, now);
    if (got || first.length < FIRST) return got;
    return takeFirst(trx, db, pupUid, (await rawQuery<LockerCandidate>(trx, db, `SELECT ${COLS} FROM lockers WHERE pup_uid = ? AND active = 1 AND booked_shipment_uid IS NULL`, [pupUid])).rows, req, shipmentUid, now);
  }
  // The smallest fitting size is decided over all lockers, booked or not.
  return takeFirst(trx, db, pupUid, (await rawQuery<LockerCandidate>(trx, db, `SELECT ${COLS} FROM lockers WHERE pup_uid = ? AND active = 1`, [pupUid])).rows, req, shipmentUid, now);
}

/** Books a locker for a new shipment or throws NoLockerAvailable / InvalidPupUid / InvalidRequest. */
export async function bookLocker(trx: Trx, db: Db, tenant: TenantPrincipal, req: BookRequest, shipmentUid: string, now: string): Promise<Booked> {
  if (!tenant.pupUids.has(req.pupUid)) throw new ApiError('InvalidPupUid', `PupUid ${req.pupUid} is not a pick up point of this client`);
  if (req.lockerUid) {
    const l = await trx.selectFrom('lockers').select(['uid', 'name', 'pup_uid', 'width', 'height', 'length', 'active']).where('uid', '=', req.lockerUid).executeTakeFirst();
    if (!l || l.pup_uid !== req.pupUid) throw new ApiError('InvalidRequest', `LockerUid: ${req.lockerUid} is not a locker of pick up point ${req.pupUid}`);
    if (!l.active) throw noLocker(`locker ${l.name} is out of service`);
    if (!fits(req.dimension, l)) throw noLocker(`the package does not fit locker ${l.name}`);
    if (!(await takeLocker(trx, db, l.uid, shipmentUid, now))) throw noLocker(`locker ${l.name} is already booked`);
    return { pupUid: req.pupUid, lockerUid: l.uid, lockerName: l.name };
  }
  const here = await bookAt(trx, db, tenant, req.pupUid, req, shipmentUid, now);
  if (here) return here;
  if (req.allowOverflow) {
    const pup = await trx.selectFrom('pups').select('overflow_pup_uid').where('uid', '=', req.pupUid).executeTakeFirst();
    const overflow = pup?.overflow_pup_uid;
    if (overflow && tenant.pupUids.has(overflow)) {
      const there = await bookAt(trx, db, tenant, overflow, req, shipmentUid, now);
      if (there) return there;
      throw noLocker(`no fitting locker is free at pick up point ${req.pupUid} nor at its overflow pick up point ${overflow}`);
    }
  }
  throw noLocker(
    `no fitting locker is free at pick up point ${req.pupUid}${req.allowLarger ? '' : ' in the smallest fitting size (AllowLargerLockers is false)'}`,
  );
}
