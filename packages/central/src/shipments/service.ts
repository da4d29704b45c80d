// The shipments service: creating, chaining, managing shipments and applying door events. Every
// write runs in one transaction (TxRunner: group commit on SQLite) and every state change goes
// through the pure state machine, is stored with its cause (shipment_transitions) and queues a
// ShipmentStatusUpdate in the same transaction (enqueueShipmentStatus).
import { sql, type Selectable } from 'kysely';
import type { AppContext, TenantPrincipal } from '../context';
import type { Db } from '../db/database';
import type { Logger } from '../logger';
import type { ShipmentsTable } from '../db/schema-shipments';
import { ApiError } from '../errors';
import { newSeqUid, toDbTime } from '../ids';
import { enqueueShipmentStatus } from '../callbacks/outbox';
import { assertManageable, bookLocker, chooseCandidates, fits, releaseLocker, takeLocker, transferLocker, type BookRequest, type Dim, type LockerCandidate } from './booking';
import { copyCodes, insertCodePair, insertLinkCode, insertNewShipmentCodes, invalidateCodes, type CodeOwner } from './codes';
import { initial, transition, type Input, type MachineState } from './state-machine';
import { createTxRunner, type Trx, type TxJob, type TxRunner } from './tx';
import { notifyCodesChanged } from '../edge/notify';
import { currentReservation, markIdempotentRun } from '../http/idempotency';
import { rawQuery, StatementBatch, type Exec } from './sqlq';
import { isActive, type Cause, type Flow, type StateCode, type TypeCode, type WaitKind } from './types';
import { correctTime, expirySafeThrough, receivedThrough, type TerminalEvidence } from '../edge/clock';
import { centralMetrics } from '../ops/metrics';

export type ShipmentRow = Selectable<ShipmentsTable>;

export interface Details {
  referenceNo?: string | null;
  referenceCaseNo?: string | null;
  description?: string | null;
}

export interface CreateSpec {
  typeCode: TypeCode;
  flow: Flow;
  fromUserUid: string | null;
  toUserUid: string | null;
  receiverDelayed?: boolean;
  keepBooked?: boolean;
  details: Details;
  dimension: Dim;
  /** book a new locker ... */
  booking?: BookRequest;
  /** ... or wait on another shipment's locker */
  waitOn?: { row: ShipmentRow; kind: WaitKind };
  swapsShipmentUid?: string | null;
  priorShipmentUid?: string | null;
  /** endpoint name, stored as the cause detail of the first transition */
  origin: string;
}

export interface Created {
  row: ShipmentRow;
  lockerName: string | null;
}

/** A door event reported by a terminal (edge sync) or simulated on staging. */
export interface LockerAccessEvent {
  pupUid: string;
  lockerUid?: string;
  lockerName?: string;
  /** the PIN or Qr value the door was opened with */
  code: string;
  /** item sensor at door close; undefined/null: unknown (simulation assumes the action happened) */
  itemPresent?: boolean | null;
  cause: 'door' | 'simulate';
  /** only shipments of this tenant match (SimulateLockerAccess) */
  tenantUid?: string;
  /**
   * door time: when it happened at the locker (a terminal's event time, already corrected for its
   * clock skew: edge/clock.ts). The transition, its history row, state_start and the callback's
   * stateStart carry it. Default: the arrival time.
   */
  at?: Date;
  /** when the central service received the event (kept on the history row for audit). Default: now */
  receivedAt?: Date;
  /** the access code the terminal matched (its uid): finds an expired booking's code (the expiry race) */
  codeId?: string;
  /**
   * the shipment of that code when the code is no longer valid (and not a swap's shared copy): a
   * PIN is unique among a point's valid PINs only, so an invalidated one may have been drawn again
   * for another booking of the same locker. That booking's code matches only when it existed at
   * the door time (`at`), edge.maxClockSkewSeconds before it: a late event of the old code's
   * courier must not move it, while a terminal whose cache still held the old row opened the
   * locker for the new booking's courier.
   */
  codeShipmentUid?: string;
  /**
   * run first in the transaction that applies the event (the edge sync marks its event applied
   * there): false means another instance applied it already, and nothing is done (`skipped`)
   */
  claim?: (trx: Trx) => Promise<boolean>;
}

/** When a state was entered (door time) and when the central service learned of it; both stored times. */
export interface When {
  at?: string;
  receivedAt?: string;
}

export interface LockerAccessResult {
  shipmentUid: string;
  action: 'DropOff' | 'PickUp';
  changed: boolean;
  stateCode: StateCode;
  /** the event's claim said another instance applied it: nothing was done (the other fields are empty) */
  skipped?: boolean;
}

/** the INSERT of a new shipment row for these columns (create's row always has the same keys: the text is reused) */
let lastInsert: { cols: string[]; text: string } | undefined;
const insertShipmentSql = (cols: string[]) => {
  const l = lastInsert;
  if (l && l.cols.length === cols.length && l.cols.every((c, i) => c === cols[i])) return l.text;
  const text = `INSERT INTO shipments (${cols.join(', ')}) VALUES (${cols.map(() => '?').join(', ')})`;
  lastInsert = { cols, text };
  return text;
};

const ROTATE_WINDOW_MS = 15 * 60_000;
export const UNLOCK_MAX_FAILURES = 5;

const THROTTLE_MS = ROTATE_WINDOW_MS;

/** Pick up points whose codes a transaction changed (SQLite: every job of a group-commit batch shares it). */
const codesTouched = new WeakMap<Trx, Set<string>>();
/** ... and those the job running in it now changed (a transaction runs one job at a time) */
const jobTouched = new WeakMap<Trx, Set<string>>();
/** ... and those of them whose version the job already raised (create, on PostgreSQL: in its statement batch) */
const jobBumped = new WeakMap<Trx, Set<string>>();
/** metrics the job running in a transaction counts once it committed (ops/metrics.ts) */
const jobCounted = new WeakMap<Trx, (() => void)[]>();

/** Counts a metric once the job running in `trx` committed (at once outside ServiceTxRunner). */
export function countOnCommit(trx: Trx, count: () => void): void {
  const l = jobCounted.get(trx);
  if (l) l.push(count);
  else count();
}

/**
 * Notes that `trx` changes codes of a pick up point: the job raises the point's code version
 * before it ends (in its transaction), and its terminals get a push once it committed.
 */
export function touchCodes(trx: Trx, pupUid: string): void {
  let s = codesTouched.get(trx);
  if (!s) codesTouched.set(trx, (s = new Set()));
  s.add(pupUid);
  jobTouched.get(trx)?.add(pupUid);
}

const bumpSql = (n: number) =>
  `INSERT INTO pup_code_versions (pup_uid, version) VALUES ${Array.from({ length: n }, () => '(?, 1)').join(', ')} ON CONFLICT (pup_uid) DO UPDATE SET version = pup_code_versions.version + 1`;
const BUMP_1 = bumpSql(1);

/**
 * Raises the code version of these pick up points (edge/sync.ts reads them as its change marker),
 * in sorted order: concurrent PostgreSQL jobs lock the rows in one order.
 */
async function bumpCodeVersions(trx: Trx, db: AppContext['db'], pups: Set<string>, done?: Set<string>): Promise<void> {
  if (pups.size === 0) return;
  const list = done?.size ? [...pups].filter((p) => !done.has(p)).sort() : [...pups].sort();
  if (list.length === 0) return;
  await rawQuery(trx, db, list.length === 1 ? BUMP_1 : bumpSql(list.length), list);
}

// The door transition's statements as fixed texts (shipments/sqlq.ts rawQuery: prepared once; no
// Kysely query built per call): a door event's transition runs about ten of them.
const FIND_WAITER = "SELECT * FROM shipments WHERE waits_on_uid = ? AND state_code = 'LockerAssigned'";
const INSERT_TRANSITION = 'INSERT INTO shipment_transitions (shipment_uid, seq, tenant_uid, from_state, to_state, cause, detail, at, received_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)';
const ACCESS_LOCKER_BY_UID = 'SELECT uid, name FROM lockers WHERE pup_uid = ? AND uid = ?';
const ACCESS_LOCKER_BY_NAME = 'SELECT uid, name FROM lockers WHERE pup_uid = ? AND name = ?';
const ACCESS_CODES = "SELECT shipment_uid, usage, created_at FROM access_codes WHERE pup_uid = ? AND value = ? AND valid = 1 AND shared = 0 AND locker_uid = ? AND usage IN ('DropOff', 'PickUp')";
const ACCESS_CODES_OF_TENANT = `${ACCESS_CODES} AND tenant_uid = ?`;

/** UPDATE shipments SET <the defined keys of upd> WHERE uid = ?, one text per set of keys (a few, fixed by the code). */
const updateTexts = new Map<string, string>();
async function updateShipment(trx: Trx, db: Db, uid: string, upd: Partial<ShipmentsTable>): Promise<void> {
  const keys: string[] = [];
  const values: unknown[] = [];
  for (const [k, v] of Object.entries(upd)) {
    if (v === undefined) continue; // as Kysely's set(): an undefined value is no change
    keys.push(k);
    values.push(v);
  }
  if (keys.length === 0) return;
  const key = keys.join(',');
  let text = updateTexts.get(key);
  if (!text) {
    for (const k of keys) if (!/^[a-z_]+$/.test(k)) throw new Error(`updateShipment: not a column name: ${k}`);
    text = `UPDATE shipments SET ${keys.map((k) => `${k} = ?`).join(', ')} WHERE uid = ?`;
    updateTexts.set(key, text);
  }
  values.push(uid);
  await rawQuery(trx, db, text, values);
}

/**
 * Runs the shipment service's jobs on `inner` (the engine's runner):
 * - a job queued by a request that holds an Idempotency-Key marks that reservation `committed`
 *   in the job's own transaction (http/idempotency.ts markIdempotentRun). The reservation is read
 *   here, where the request queues the job: a SQLite batch runs in the async context of the
 *   request that started it, not of each job's;
 * - a job that changed codes of pick up points (touchCodes) raises their code versions at its end,
 *   in its transaction: the change marker other central instances poll (edge/sync.ts);
 * - once a job settled (committed, or rolled back: a push then finds nothing to send), it calls
 *   notifyCodesChanged for every pick up point its transaction touched. The first job of a batch
 *   to settle notifies for the whole batch.
 */
export class ServiceTxRunner implements TxRunner {
  constructor(
    readonly inner: TxRunner,
    private readonly db: AppContext['db'],
  ) {}
  async run<T>(job: TxJob<T>): Promise<T> {
    const reservation = currentReservation();
    const seen = new Set<Trx>();
    const settle = () => {
      for (const trx of seen) {
        const pups = codesTouched.get(trx);
        if (!pups) continue;
        const list = [...pups];
        pups.clear();
        for (const p of list) notifyCodesChanged(p);
      }
    };
    let counted: (() => void)[] = [];
    try {
      const v = await this.inner.run(async (trx) => {
        seen.add(trx); // a PostgreSQL retry runs the job again in a new transaction
        if (reservation) await markIdempotentRun(trx, reservation);
        const touched = new Set<string>();
        const bumped = new Set<string>();
        jobTouched.set(trx, touched);
        jobBumped.set(trx, bumped);
        jobCounted.set(trx, (counted = []));
        try {
          const v = await job(trx);
          // last, so a PostgreSQL job holds the point's version row only until its COMMIT
          await bumpCodeVersions(trx, this.db, touched, bumped);
          return v;
        } finally {
          jobTouched.delete(trx);
          jobBumped.delete(trx);
          jobCounted.delete(trx);
        }
      });
      for (const c of counted) c();
      return v;
    } finally {
      settle();
    }
  }
}

export class ShipmentService {
  /** the write runner (its `inner` is the engine's: SQLite group commit or PostgreSQL) */
  readonly tx: ServiceTxRunner;
  private readonly log: Logger;

  constructor(readonly ctx: AppContext) {
    this.tx = new ServiceTxRunner(createTxRunner(ctx.db), ctx.db);
    this.log = ctx.log.child({ ns: 'central.shipments' });
  }

  private nowDb(d?: Date): string {
    return toDbTime(d ?? this.ctx.clock.now());
  }

  private deadline(now: string): string {
    return toDbTime(new Date(new Date(now).getTime() + this.ctx.config.shipments.dropOffDeadlineHours * 3_600_000));
  }

  // ---- loading -------------------------------------------------------------------------------

  /**
   * Loads a shipment for a change (row-locked on PostgreSQL). A shipment waiting on another one is
   * locked after that one (the holder), in one statement: locks are always taken in the chain's
   * order (holder before waiter), as a holder's event does (findWaiter), so a job on a waiter that
   * ends up changing or locking its holder (a relink on cancel, rotateCodes) does not deadlock with
   * a concurrent event of the holder.
   */
  async load(trx: Trx, uid: string): Promise<ShipmentRow | undefined> {
    if (this.ctx.db.engine !== 'postgres') return (await rawQuery<ShipmentRow>(trx, this.ctx.db, 'SELECT * FROM shipments WHERE uid = ?', [uid])).rows[0];
    for (let attempt = 0; ; attempt++) {
      const rows = await trx
        .selectFrom('shipments')
        .selectAll()
        .where((eb) => eb.or([eb('uid', '=', uid), eb('uid', '=', eb.selectFrom('shipments as w').select('w.waits_on_uid').where('w.uid', '=', uid))]))
        .orderBy(sql`uid = ${uid}`) // false first: the holder, then the shipment (rows are locked in this order)
        .forUpdate()
        .execute();
      const row = rows.find((r) => r.uid === uid);
      // its holder changed between the statement's snapshot and the lock (a concurrent relink): lock the new one too
      if (!row || !row.waits_on_uid || rows.some((r) => r.uid === row.waits_on_uid) || attempt >= 2) return row;
    }
  }

  /** A shipment of this tenant; another tenant's shipment behaves as unknown (InvalidShipment). */
  async own(trx: Trx, tenant: TenantPrincipal, uid: string | null | undefined, field = 'shipmentUid'): Promise<ShipmentRow> {
    const row = uid ? await this.load(trx, uid) : undefined;
    if (!row || row.tenant_uid !== tenant.uid) throw new ApiError('InvalidShipment', `${field}: unknown shipment ${uid ?? '(none)'}`);
    return row;
  }

  /**
   * The shipment waiting on `uid`'s locker, row-locked on PostgreSQL like load(): a job that looks
   * at the waiter decides from it (the state machine's `waiter`) and may change it (hand-over,
   * relink, code copies). Under READ COMMITTED, FOR UPDATE waits for a concurrent change of that
   * row to commit and returns its committed version (re-checking the WHERE: a waiter cancelled
   * meanwhile is not returned). Lock order is always the holder (`uid`, locked by the caller)
   * before its waiter, the order of the chain.
   */
  async findWaiter(trx: Trx, uid: string): Promise<ShipmentRow | undefined> {
    const pg = this.ctx.db.engine === 'postgres';
    return (await rawQuery<ShipmentRow>(trx, this.ctx.db, pg ? `${FIND_WAITER} FOR UPDATE` : FIND_WAITER, [uid])).rows[0];
  }

  async checkUser(trx: Trx, tenant: TenantPrincipal, uid: string, field: string): Promise<void> {
    if (uid === tenant.mainAccountUid) return;
    // canManageAccount (accounts/access.ts) as one small cached statement: the account's PUP links
    // (usually one or two) checked against the tenant's set, instead of an IN list of all its PUPs;
    // and another tenant's dispatcher main account is never ours, even through a shared PUP.
    const links = await rawQuery<{ pup_uid: string; foreign_main: number | boolean }>(
      trx,
      this.ctx.db,
      'SELECT pup_uid, EXISTS (SELECT 1 FROM tenants WHERE main_account_uid = ? AND uid <> ?) AS foreign_main FROM account_pups WHERE account_uid = ?',
      [uid, tenant.uid, uid],
    );
    assertManageable(
      tenant,
      { uid, field },
      links.rows.map((l) => l.pup_uid),
      links.rows.some((l) => l.foreign_main === true || Number(l.foreign_main) === 1),
    );
  }

  private owner(row: ShipmentRow): CodeOwner {
    return { shipmentUid: row.uid, tenantUid: row.tenant_uid, pupUid: row.pup_uid, lockerUid: row.locker_uid };
  }

  private async emit(trx: Trx, row: ShipmentRow, stateCode: string, now: string, sequence?: number, exec?: Exec, stateStart: string = now): Promise<void> {
    await enqueueShipmentStatus(
      trx,
      {
        tenantUid: row.tenant_uid,
        shipmentUid: row.uid,
        stateCode,
        stateStart,
        shipmentType: row.type_code,
        referenceNo: row.reference_no,
        referenceCaseNo: row.reference_case_no,
        description: row.description,
        pupUid: row.pup_uid,
        fromUserUid: row.from_user_uid,
        toUserUid: row.to_user_uid,
      },
      now,
      { ...(sequence === undefined ? {} : { sequence }), exec: exec ?? ((text, params) => rawQuery(trx, this.ctx.db, text, params)) },
    );
  }

  private machine(row: ShipmentRow, waiter: ShipmentRow | undefined): MachineState {
    return {
      state: row.state_code as StateCode,
      hasReceiver: !!row.to_user_uid,
      keepBooked: !!row.keep_booked,
      waitKind: (row.wait_kind as WaitKind | null) ?? null,
      waiter: (waiter?.wait_kind as WaitKind | undefined) ?? null,
    };
  }

  /** Checks an input against the state machine without changing anything (error precedence). */
  check(row: ShipmentRow, input: Input): void {
    const r = transition(this.machine(row, undefined), input);
    if (!r.ok) throw new ApiError(r.error, r.reason);
  }

  // ---- applying an input ---------------------------------------------------------------------

  /**
   * Runs one input through the state machine and carries out its effects: stores the new state,
   * one audit row and one outbox event per entered state, code changes, locker release or
   * hand-over to the shipment waiting on this one (which gets its own input, same cause).
   *
   * `now` is when the central service makes the change (updated_at: updatedSince polling sees it;
   * code and locker times; a deadline started here runs from it). `when.at` is when the state was
   * entered (door time of a terminal's event; default now): state_start, the history row's `at`
   * and the callback's stateStart (never before the state it leaves began, except for a late drop-off).
   * `when.receivedAt` (default now) is stored on the history row.
   * A chained transition (waiter) gets the same `when`.
   */
  async apply(trx: Trx, row: ShipmentRow, input: Input, cause: Cause, detail: string, now: string, data: Partial<ShipmentsTable> = {}, when: When = {}): Promise<ShipmentRow> {
    const needsWaiter = input.type === 'DropOff' || input.type === 'PickUp' || input.type === 'Cancel' || input.type === 'Expire' || input.type === 'Displaced';
    const waiter = needsWaiter ? await this.findWaiter(trx, row.uid) : undefined;
    const r = transition(this.machine(row, waiter), input);
    if (!r.ok) throw new ApiError(r.error, r.reason);
    touchCodes(trx, row.pup_uid); // transitions invalidate, issue or copy codes
    // a state is not entered before the one it leaves (a terminal clock a little behind, a waiter
    // created after the door event); the expiry race is the exception: the door was first
    const at = when.at ?? now;
    const stateAt = input.type !== 'LateDropOff' && Date.parse(at) < Date.parse(row.state_start) ? row.state_start : at;
    const receivedAt = when.receivedAt ?? now;

    const upd: Partial<ShipmentsTable> = { ...data, updated_at: now };
    if (r.steps.length) {
      upd.state_code = r.state.state;
      upd.active = isActive(r.state.state) ? 1 : 0;
      upd.state_start = stateAt;
      upd.seq = row.seq + r.steps.length;
    }
    if (r.state.waitKind === null && row.wait_kind !== null) {
      upd.waits_on_uid = null;
      upd.wait_kind = null;
    }
    for (const e of r.effects) {
      if (e.type === 'StartDropOffDeadline') upd.drop_off_deadline = this.deadline(now);
      else if (e.type === 'ClearDropOffDeadline') upd.drop_off_deadline = null;
    }
    await updateShipment(trx, this.ctx.db, row.uid, upd);
    const next: ShipmentRow = { ...row, ...upd };

    let from: string = row.state_code;
    let seq = row.seq;
    for (const to of r.steps) {
      seq++;
      await rawQuery(trx, this.ctx.db, INSERT_TRANSITION, [row.uid, seq, row.tenant_uid, from, to, cause, detail, stateAt, receivedAt]);
      countOnCommit(trx, () => centralMetrics.transitions.inc({ cause, to }));
      await this.emit(trx, next, to, now, undefined, undefined, stateAt);
      from = to;
    }

    for (const e of r.effects) {
      switch (e.type) {
        case 'InvalidateCodes':
          await invalidateCodes(trx, this.ctx.db, row.uid, e.usage, now);
          break;
        case 'RenewDropOffCodes':
          // a circular stock waiting on this shipment holds copies of these codes: re-copied
          await this.replaceCodes(trx, next, 'DropOff', now);
          break;
        case 'NewLinkCode':
          await invalidateCodes(trx, this.ctx.db, row.uid, 'LinkCode', now);
          await insertLinkCode(trx, this.owner(next), now);
          break;
        case 'ReleaseLocker':
          if (!row.locker_uid) break;
          if (waiter) {
            await transferLocker(trx, this.ctx.db, row.locker_uid, row.uid, waiter.uid, now);
            const what = e.waiterInput === 'PriorPickedUp' ? 'picked up' : e.waiterInput === 'PriorDroppedOff' ? 'dropped off' : `${r.state.state.toLowerCase()}, locker handed over`;
            await this.apply(trx, waiter, { type: e.waiterInput }, cause, `${waiter.wait_kind}: ${row.uid} ${what}`, now, {}, when);
          } else {
            await releaseLocker(trx, this.ctx.db, row.locker_uid, row.uid, now);
          }
          break;
        case 'Unlink':
          if (waiter && row.waits_on_uid && row.wait_kind) await this.relink(trx, waiter, row.waits_on_uid, row.wait_kind as WaitKind, now);
          break;
        case 'ReclaimLocker':
          // the expiry race: the parcel is in the locker, which the caller found free (or freed)
          if (!row.locker_uid || !(await takeLocker(trx, this.ctx.db, row.locker_uid, row.uid, now))) throw new ApiError('LockerRebooked', `locker ${row.locker_uid ?? '?'} of shipment ${row.uid} is no longer free`);
          break;
        case 'ReinstatePickUpCodes':
          await this.reinstatePickUpCodes(trx, next, now);
          break;
        case 'MoveLocker':
          await this.moveLocker(trx, next, now);
          break;
        default:
          break;
      }
    }
    return next;
  }

  /**
   * A waiter whose shipment left the chain waits where that one waited, with its kind. As a swap it
   * now swaps that shipment (swaps_shipment_uid follows: rule 7 applies to it); waiting any other
   * way it swaps nothing. Its new drop-off codes are re-copied to a shipment waiting on it.
   */
  private async relink(trx: Trx, waiter: ShipmentRow, onUid: string, kind: WaitKind, now: string): Promise<void> {
    // The waiter now waits on `onUid`: a concurrent job on that shipment (its pick-up, which hands
    // its locker to its waiter) must see the new waiter, so it is locked too (PostgreSQL). It is
    // the holder of the cancelled shipment, which load() already locked before it (chain order).
    if (this.ctx.db.engine === 'postgres') await this.load(trx, onUid);
    const swaps = kind === 'swap' ? onUid : null;
    await updateShipment(trx, this.ctx.db, waiter.uid, { waits_on_uid: onUid, wait_kind: kind, swaps_shipment_uid: swaps, updated_at: now });
    const moved: ShipmentRow = { ...waiter, waits_on_uid: onUid, wait_kind: kind, swaps_shipment_uid: swaps };
    await invalidateCodes(trx, this.ctx.db, waiter.uid, 'DropOff', now);
    await this.assignDropOffCodes(trx, moved, now);
    await this.recopyToWaiter(trx, moved, 'DropOff', now);
  }

  /**
   * New codes for one usage of a shipment (AddShipmentObject changePickUpAccess /
   * changeDropOffAccess). A chained shipment's drop-off codes are copies: for a swap or circular
   * stock still waiting, the original (the holder's pick-up or drop-off codes) is renewed instead,
   * and the copies follow.
   */
  async rotateCodes(trx: Trx, row: ShipmentRow, usage: 'DropOff' | 'PickUp', now: string): Promise<void> {
    touchCodes(trx, row.pup_uid);
    if (usage === 'DropOff' && row.state_code === 'LockerAssigned' && row.waits_on_uid && (row.wait_kind === 'swap' || row.wait_kind === 'circular')) {
      const holder = await this.load(trx, row.waits_on_uid);
      if (holder) await this.rotateCodes(trx, holder, row.wait_kind === 'swap' ? 'PickUp' : 'DropOff', now);
      return;
    }
    await this.replaceCodes(trx, row, usage, now);
  }

  /** Invalidates a shipment's codes of one usage, gives it a fresh pair and re-copies it down the chain. */
  private async replaceCodes(trx: Trx, row: ShipmentRow, usage: 'DropOff' | 'PickUp', now: string): Promise<void> {
    await invalidateCodes(trx, this.ctx.db, row.uid, usage, now);
    await insertCodePair(trx, this.owner(row), usage, now);
    await this.recopyToWaiter(trx, row, usage, now);
  }

  /**
   * The codes of one usage of `row` changed: the shipment waiting on it that copies them (a swap
   * copies pick-up codes, a circular stock drop-off codes) gets the new ones as its drop-off codes,
   * and so on down the chain. Copies always equal their source.
   */
  private async recopyToWaiter(trx: Trx, row: ShipmentRow, usage: 'DropOff' | 'PickUp', now: string): Promise<void> {
    const waiter = await this.findWaiter(trx, row.uid);
    if (!waiter) return;
    if (!((waiter.wait_kind === 'swap' && usage === 'PickUp') || (waiter.wait_kind === 'circular' && usage === 'DropOff'))) return;
    await invalidateCodes(trx, this.ctx.db, waiter.uid, 'DropOff', now);
    await copyCodes(trx, row.uid, usage, this.owner(waiter), 'DropOff', now);
    await this.recopyToWaiter(trx, waiter, 'DropOff', now);
  }

  /** Drop-off codes: a swap's equal the swapped shipment's pick-up codes; circular stock's equal the intake's drop-off codes. */
  private async assignDropOffCodes(trx: Trx, row: ShipmentRow, now: string): Promise<void> {
    if (row.wait_kind === 'swap' && row.waits_on_uid) await copyCodes(trx, row.waits_on_uid, 'PickUp', this.owner(row), 'DropOff', now);
    else if (row.wait_kind === 'circular' && row.waits_on_uid) await copyCodes(trx, row.waits_on_uid, 'DropOff', this.owner(row), 'DropOff', now);
    else await insertCodePair(trx, this.owner(row), 'DropOff', now);
  }

  // ---- creating ------------------------------------------------------------------------------

  /** Creates a shipment (booking its locker) in `trx`; counted as a booking once committed, or as a refusal by its error code. */
  async createIn(trx: Trx, tenant: TenantPrincipal, spec: CreateSpec, now: string): Promise<Created> {
    try {
      const c = await this.create(trx, tenant, spec, now);
      countOnCommit(trx, () => {
        centralMetrics.bookings.inc({ flow: spec.flow });
        centralMetrics.transitions.inc({ cause: 'api', to: c.row.state_code });
      });
      return c;
    } catch (e) {
      // an account check deferred into the booking's statement (booking.ts userChecks) is the
      // caller's check, not a refusal of the booking (as when checkUser runs before createIn)
      if (e instanceof ApiError && e.code !== 'InvalidUserUid') centralMetrics.bookingRefusals.inc({ reason: e.code });
      throw e;
    }
  }

  private async create(trx: Trx, tenant: TenantPrincipal, spec: CreateSpec, now: string): Promise<Created> {
    const uid = newSeqUid();
    let pupUid: string;
    let lockerUid: string | null;
    let lockerName: string | null = null;
    if (spec.waitOn) {
      const w = spec.waitOn.row;
      if (!isActive(w.state_code as StateCode)) throw new ApiError('InvalidShipmentState', `shipment ${w.uid} is ${w.state_code}: nothing can be chained to it`);
      if (w.keep_booked) throw new ApiError('InvalidShipmentState', `shipment ${w.uid} keeps its locker booked after pick-up: nothing can be chained to it`);
      if (await this.findWaiter(trx, w.uid)) throw new ApiError('InvalidShipmentState', `shipment ${w.uid} already has a shipment waiting on its locker`);
      pupUid = w.pup_uid;
      lockerUid = w.locker_uid;
      if (lockerUid) {
        const l = await trx.selectFrom('lockers').select(['name', 'width', 'height', 'length']).where('uid', '=', lockerUid).executeTakeFirstOrThrow();
        if (!fits(spec.dimension, l)) throw new ApiError('NoLockerAvailable', `the package does not fit locker ${l.name} of shipment ${w.uid}`);
        lockerName = l.name;
      }
    } else {
      if (!spec.booking) throw new Error('createIn: booking or waitOn required');
      const b = await bookLocker(trx, this.ctx.db, tenant, spec.booking, uid, now);
      pupUid = b.pupUid;
      lockerUid = b.lockerUid;
      lockerName = b.lockerName;
    }
    const init = initial({ hasReceiver: !!spec.toUserUid, keepBooked: !!spec.keepBooked, waitKind: spec.waitOn?.kind ?? null });
    const row: ShipmentRow = {
      uid,
      tenant_uid: tenant.uid,
      type_code: spec.typeCode,
      flow: spec.flow,
      state_code: init.state.state,
      active: 1,
      state_start: now,
      created_at: now,
      updated_at: now,
      reference_no: spec.details.referenceNo ?? null,
      reference_case_no: spec.details.referenceCaseNo ?? null,
      description: spec.details.description ?? null,
      from_user_uid: spec.fromUserUid,
      to_user_uid: spec.toUserUid,
      from_address: null,
      to_address: null,
      receiver_delayed: spec.receiverDelayed ? 1 : 0,
      keep_booked: spec.keepBooked ? 1 : 0,
      pup_uid: pupUid,
      locker_uid: lockerUid,
      width: spec.dimension.width,
      height: spec.dimension.height,
      length: spec.dimension.length,
      swaps_shipment_uid: spec.swapsShipmentUid ?? null,
      prior_shipment_uid: spec.priorShipmentUid ?? null,
      waits_on_uid: spec.waitOn?.row.uid ?? null,
      wait_kind: spec.waitOn?.kind ?? null,
      drop_off_deadline: init.effects.some((e) => e.type === 'StartDropOffDeadline') ? this.deadline(now) : null,
      seq: 1,
      missed_deadline: null,
    };
    // The new shipment's rows are independent inserts: one statement on PostgreSQL (StatementBatch).
    const batch = new StatementBatch(trx, this.ctx.db);
    const cols = Object.keys(row) as (keyof ShipmentRow)[];
    const chained = row.wait_kind === 'swap' || row.wait_kind === 'circular';
    // PostgreSQL: that statement is written with the transaction's COMMIT (one round trip less per
    // booking), unless the job reads on after it (a chained shipment copies codes next). Nothing
    // here needs its answer: a colliding PIN fails it (strict codes) and the job runs again.
    const atCommit = this.ctx.db.engine === 'postgres' && !chained;
    const writes: Promise<unknown>[] = [
      batch.run(insertShipmentSql(cols), cols.map((c) => row[c])),
      batch.run('INSERT INTO shipment_transitions (shipment_uid, seq, tenant_uid, from_state, to_state, cause, detail, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)', [
        uid,
        1,
        tenant.uid,
        null,
        row.state_code,
        'api',
        spec.origin,
        now,
      ]),
      this.emit(trx, row, row.state_code, now, 1, batch.run), // a new shipment: its first event
      insertNewShipmentCodes(trx, this.ctx.db, this.owner(row), chained ? ['PickUp'] : ['DropOff', 'PickUp'], now, batch.run, atCommit),
    ];
    // PostgreSQL: the point's code version travels in the same statement (one round trip less),
    // when it is the first point the job touches (a plain booking's only one). Points the job
    // touches later are raised at its end (ServiceTxRunner); should two jobs then hold two points'
    // rows in opposite orders, PostgreSQL reports the deadlock and PgTxRunner runs the job again.
    const bumped = jobBumped.get(trx);
    if (this.ctx.db.engine === 'postgres' && bumped && bumped.size === 0 && (jobTouched.get(trx)?.size ?? 0) === 0) {
      writes.push(batch.run(BUMP_1, [pupUid]));
      bumped.add(pupUid);
    }
    if (atCommit) {
      // the writes settle at COMMIT; a failure of theirs fails the COMMIT, which reports it
      for (const w of writes) w.catch(() => {});
      await batch.flushAtCommit();
      touchCodes(trx, pupUid);
      return { row, lockerName };
    }
    await Promise.all([...writes, batch.flush()]); // (every rejection observed)
    touchCodes(trx, pupUid);
    // a swap's / circular stock's drop-off codes are copies of the chained shipment's
    if (chained) await this.assignDropOffCodes(trx, row, now);
    return { row, lockerName };
  }

  /** Runs a write job in a transaction (group commit on SQLite) with the current time. */
  write<T>(job: (trx: Trx, now: string) => Promise<T>): Promise<T> {
    return this.tx.run((trx) => job(trx, this.nowDb()));
  }

  // ---- door events ---------------------------------------------------------------------------

  /**
   * Applies a door event: the door of a locker was opened with a code and closed. A drop-off code
   * of a shipment ready for drop-off, closed with an item (or unknown), is a drop-off; a pick-up
   * code of a shipment ready for pick-up, closed empty (or unknown), is a pick-up (with a swap
   * waiting, the pick-up counts whatever the sensor says: rule 7). Runs the same transitions
   * whether the event comes from a terminal or from SimulateLockerAccess.
   */
  async applyLockerAccess(ev: LockerAccessEvent): Promise<LockerAccessResult> {
    return this.tx.run((trx) => this.applyLockerAccessIn(trx, ev));
  }

  /**
   * applyLockerAccess inside a job of this service's runner (`tx`) that is already running: the
   * edge sync applies a batch of terminal events in one transaction (edge/ingest.ts). `trx` must be
   * the transaction of a `tx.run` job, so the codes it touches are versioned and notified.
   */
  async applyLockerAccessIn(trx: Trx, ev: LockerAccessEvent): Promise<LockerAccessResult> {
    {
      // now: when the change is recorded here (updated_at, updatedSince); when.at: the door time
      const now = this.nowDb();
      const when: When = { at: ev.at ? toDbTime(ev.at) : now, receivedAt: ev.receivedAt ? toDbTime(ev.receivedAt) : now };
      if (ev.claim && !(await ev.claim(trx))) return { shipmentUid: '', action: 'DropOff', changed: false, stateCode: 'ReadyForDropoff', skipped: true };
      const db = this.ctx.db;
      const locker = (
        await rawQuery<{ uid: string; name: string }>(trx, db, ev.lockerUid ? ACCESS_LOCKER_BY_UID : ACCESS_LOCKER_BY_NAME, [ev.pupUid, ev.lockerUid ?? ev.lockerName ?? ''])
      ).rows[0];
      if (!locker) throw new ApiError('InvalidRequest', `lockerName: no locker ${ev.lockerName ?? ev.lockerUid ?? ''} at pick up point ${ev.pupUid}`);
      let codes = (
        await rawQuery<{ shipment_uid: string; usage: string; created_at: string }>(trx, db, ev.tenantUid ? ACCESS_CODES_OF_TENANT : ACCESS_CODES, ev.tenantUid ? [ev.pupUid, ev.code, locker.uid, ev.tenantUid] : [ev.pupUid, ev.code, locker.uid])
      ).rows;
      // the terminal matched a code invalidated since: another shipment's code of that value counts
      // only when it existed at the door time (a terminal still holding the old row opened the
      // locker for the new booking's courier), not when it was drawn after (the old booking's
      // courier, the event late)
      if (ev.codeShipmentUid) {
        // with a margin of edge.maxClockSkewSeconds: a terminal clock within it is not corrected,
        // so a door time may be that much late; within it the two are told apart by nothing, and
        // the other booking is left alone (the disagreement with the locker shows)
        const margin = this.ctx.config.edge.maxClockSkewSeconds * 1000;
        const before = when.at === undefined ? null : toDbTime(new Date(Date.parse(when.at) - margin));
        codes = codes.filter((c) => c.shipment_uid === ev.codeShipmentUid || (before !== null && c.created_at <= before));
      }
      if (codes.length === 0) {
        const late = await this.lateDropOff(trx, ev, locker, now, when);
        if (late) return late;
        throw new ApiError('InvalidAccessCode', `the code opens no shipment in locker ${locker.name}`);
      }
      let wrongState: ShipmentRow | undefined;
      for (const c of codes) {
        const row = await this.load(trx, c.shipment_uid);
        if (!row) continue;
        const action = c.usage as 'DropOff' | 'PickUp';
        const ready = action === 'DropOff' ? row.state_code === 'ReadyForDropoff' : row.state_code === 'ReadyForPickup';
        if (!ready) {
          wrongState = row;
          continue;
        }
        let happened = true;
        if (ev.itemPresent === false && action === 'DropOff') happened = false;
        if (ev.itemPresent === true && action === 'PickUp') happened = !!(await this.findWaiter(trx, row.uid));
        if (!happened) return { shipmentUid: row.uid, action, changed: false, stateCode: row.state_code as StateCode };
        const detail = ev.cause === 'simulate' ? `SimulateLockerAccess ${locker.name}` : `door ${locker.name}`;
        const next = await this.apply(trx, row, { type: action }, ev.cause, detail, now, {}, when);
        this.log.info({ shipment: row.uid, action, from: row.state_code, to: next.state_code, cause: ev.cause }, 'locker access');
        return { shipmentUid: row.uid, action, changed: true, stateCode: next.state_code as StateCode };
      }
      const late = await this.lateDropOff(trx, ev, locker, now, when);
      if (late) return late;
      throw new ApiError('InvalidShipmentState', `the code belongs to shipment ${wrongState?.uid ?? '?'} in state ${wrongState?.state_code ?? '?'}, which does not take this action now`);
    }
  }

  /**
   * The expiry race (docs/state-machine.md): a terminal reports a drop-off with the drop-off code
   * of a booking that the clock expired meanwhile. Door time before the deadline it missed: the
   * doors win, the booking takes its locker again (a plain booking that took the locker since is
   * moved to another free locker that fits it) and goes on to ReadyForPickup / WaitForReceiver
   * with its pick-up codes valid again. Door time at or after the deadline, or a locker that
   * cannot be had back: refused (DropOffAfterDeadline, LockerRebooked), logged with the reason.
   * Returns null when the code is no expired booking's drop-off code (the caller refuses as before).
   */
  private async lateDropOff(trx: Trx, ev: LockerAccessEvent, locker: { uid: string; name: string }, now: string, when: When): Promise<LockerAccessResult | null> {
    if (ev.cause !== 'door') return null;
    let q = trx
      .selectFrom('access_codes as c')
      .innerJoin('shipments as s', 's.uid', 'c.shipment_uid')
      .select('c.shipment_uid')
      .where('c.pup_uid', '=', ev.pupUid)
      .where('c.locker_uid', '=', locker.uid)
      .where('c.usage', '=', 'DropOff')
      .where('c.shared', '=', 0)
      .where('s.state_code', '=', 'Expired');
    q = ev.codeId ? q.where('c.uid', '=', ev.codeId) : q.where('c.value', '=', ev.code).where('c.valid', '=', 0);
    const hit = await q.orderBy('c.created_at', 'desc').executeTakeFirst();
    if (!hit) return null;
    const row = await this.load(trx, hit.shipment_uid);
    if (!row || row.state_code !== 'Expired') return null;
    if (ev.itemPresent === false) return { shipmentUid: row.uid, action: 'DropOff', changed: false, stateCode: 'Expired' };
    const at = when.at ?? now;
    const deadline = row.missed_deadline ?? null;
    const beforeDeadline = deadline !== null && Date.parse(at) < Date.parse(deadline);
    let lockerFree = false;
    let holderUid: string | null = null;
    if (beforeDeadline && row.locker_uid) {
      const l = await trx.selectFrom('lockers').select('booked_shipment_uid').where('uid', '=', row.locker_uid).executeTakeFirst();
      holderUid = l?.booked_shipment_uid ?? null;
      if (l && !holderUid) lockerFree = true;
      else if (holderUid) {
        // the locker was booked again after the expiry. A plain booking still waiting for its own
        // drop-off moves to another free locker (its codes follow); anything else keeps the locker
        const holder = await this.load(trx, holderUid);
        if (holder && transition(this.machine(holder, await this.findWaiter(trx, holder.uid)), { type: 'Displaced' }).ok) {
          await this.apply(trx, holder, { type: 'Displaced' }, 'door', `door ${locker.name}: moved to another locker; ${locker.name} holds the parcel of ${row.uid}, dropped off before its deadline`, now);
          lockerFree = true;
        }
      }
    }
    const input = { type: 'LateDropOff' as const, beforeDeadline, lockerFree };
    const r = transition(this.machine(row, undefined), input);
    if (!r.ok) {
      this.log.warn({ shipment: row.uid, locker: locker.name, doorTime: at, deadline, holder: holderUid, errorCode: r.error }, 'late drop-off refused: the parcel is in the locker, the booking stays Expired');
      throw new ApiError(r.error, `${r.reason} (shipment ${row.uid}, door time ${at}, deadline ${deadline ?? 'unknown'}, locker ${locker.name}${holderUid ? `, booked by ${holderUid}` : ''})`);
    }
    const next = await this.apply(trx, row, input, 'door', `door ${locker.name}: dropped off at ${at}, before the deadline ${deadline}; the expiry is undone`, now, {}, when);
    this.log.info({ shipment: row.uid, locker: locker.name, doorTime: at, deadline, to: next.state_code }, 'late drop-off: the doors win over the expiry');
    return { shipmentUid: row.uid, action: 'DropOff', changed: true, stateCode: next.state_code as StateCode };
  }

  /** ReinstatePickUpCodes: the newest pick-up pair valid again, or a fresh pair when its PIN was taken meanwhile. */
  private async reinstatePickUpCodes(trx: Trx, row: ShipmentRow, now: string): Promise<void> {
    const own = await trx.selectFrom('access_codes').select(['uid', 'usage', 'type', 'value', 'created_at']).where('shipment_uid', '=', row.uid).where('usage', 'in', ['PickUp', 'LinkCode']).where('shared', '=', 0).orderBy('created_at', 'desc').limit(8).execute();
    const newest = (usage: string, type: string) => own.find((c) => c.usage === usage && c.type === type);
    const link = own.find((c) => c.usage === 'LinkCode');
    if (link) await trx.updateTable('access_codes').set({ valid: 1, invalidated_at: null }).where('uid', '=', link.uid).execute();
    const pin = newest('PickUp', 'Code');
    const qr = newest('PickUp', 'Qr');
    if (pin && qr) {
      const clash = await trx.selectFrom('access_codes').select('uid').where('pup_uid', '=', row.pup_uid).where('valid', '=', 1).where('type', '=', 'Code').where('shared', '=', 0).where('value', '=', pin.value).executeTakeFirst();
      if (!clash) {
        await trx.updateTable('access_codes').set({ valid: 1, invalidated_at: null }).where('uid', 'in', [pin.uid, qr.uid]).execute();
        return;
      }
    }
    await insertCodePair(trx, this.owner(row), 'PickUp', now);
  }

  /** MoveLocker: the booking takes another free locker of its pick up point that fits; its valid codes follow. */
  private async moveLocker(trx: Trx, row: ShipmentRow, now: string): Promise<void> {
    const free = await trx
      .selectFrom('lockers')
      .select(['uid', 'name', 'width', 'height', 'length', 'type_code', 'booked_shipment_uid'])
      .where('pup_uid', '=', row.pup_uid)
      .where('active', '=', 1)
      .where('booked_shipment_uid', 'is', null)
      .execute();
    let got: LockerCandidate | undefined;
    for (const c of chooseCandidates(free as LockerCandidate[], row, true)) {
      if (await takeLocker(trx, this.ctx.db, c.uid, row.uid, now)) {
        got = c;
        break;
      }
    }
    if (!got) throw new ApiError('LockerRebooked', `no free locker fits shipment ${row.uid}, which booked locker ${row.locker_uid ?? '?'} after the expiry`);
    if (row.locker_uid) await releaseLocker(trx, this.ctx.db, row.locker_uid, row.uid, now);
    await trx.updateTable('shipments').set({ locker_uid: got.uid, updated_at: now }).where('uid', '=', row.uid).execute();
    await trx.updateTable('access_codes').set({ locker_uid: got.uid }).where('shipment_uid', '=', row.uid).where('valid', '=', 1).execute();
    this.log.info({ shipment: row.uid, from: row.locker_uid, to: got.name }, 'booking moved to another locker');
  }

  // ---- expiry --------------------------------------------------------------------------------

  /**
   * Expires every booking whose drop-off deadline has passed; returns how many. A pick up point's
   * bookings expire only as far as its terminals cannot still hold a drop-off made before the
   * deadline (expiryCutoff, docs/state-machine.md "The expiry race").
   */
  async expireDue(at?: Date): Promise<number> {
    const nowD = at ?? this.ctx.clock.now();
    const now = this.nowDb(nowD);
    const pups = await this.ctx.db.kysely
      .selectFrom('shipments')
      .select('pup_uid')
      .distinct()
      .where('state_code', '=', 'ReadyForDropoff')
      .where('drop_off_deadline', 'is not', null)
      .where('drop_off_deadline', '<=', now)
      .execute();
    let total = 0;
    for (const { pup_uid } of pups) {
      const cutoff = await this.expiryCutoff(pup_uid, nowD);
      if (cutoff === null || cutoff < now) this.log.debug({ pup: pup_uid, through: cutoff }, 'expiry held back: a terminal of the pick up point may still report drop-offs');
      if (cutoff !== null) total += await this.expireAt(pup_uid, cutoff, now);
    }
    return total;
  }

  /**
   * The latest deadline the sweep may act on at a pick up point (a stored time, at most now): the
   * point's terminals have reported everything they did up to it, or have been silent for longer
   * than edge.maxOfflineHours (edge/clock.ts expirySafeThrough). null: nothing may expire there yet.
   */
  async expiryCutoff(pupUid: string, nowD: Date): Promise<string | null> {
    const db = this.ctx.db.kysely;
    const terms = await db
      .selectFrom('terminals as t')
      .leftJoin('edge_terminals as e', 'e.terminal_id', 't.id')
      .select(['t.id', 'e.status_at', 'e.last_seq', 'e.applied_seq', 'e.reported_through', 'e.pending_through_at', 'e.pending_through_seq', 'e.pending_through_journal', 'e.journal_id', 'e.clock_offset_ms', 'e.clock_skewed'])
      .where('t.pup_uid', '=', pupUid)
      .execute();
    const evidence: TerminalEvidence[] = [];
    for (const t of terms) {
      let earliest: Date | null = null;
      if (t.status_at) {
        const open = await db.selectFrom('edge_events').select('at').where('terminal_id', '=', t.id).where('processed', '=', 0).where('type', 'in', ['dropOff', 'pickUp']).limit(100).execute();
        for (const o of open) {
          const d = correctTime(o.at, { offsetMs: t.clock_offset_ms, skewed: t.clock_skewed });
          if (!Number.isNaN(d.getTime()) && (!earliest || d < earliest)) earliest = d;
        }
      }
      const date = (v: string | null | undefined) => (v ? new Date(v) : null);
      evidence.push({
        heardAt: date(t.status_at),
        reportedThrough: date(t.reported_through),
        pendingAt: date(t.pending_through_at),
        pendingSeq: t.pending_through_seq == null ? null : Number(t.pending_through_seq),
        // the seq of the pending proof's journal that has arrived (nothing of another journal than the cursor's)
        receivedSeq: receivedThrough(t, t.pending_through_journal ?? null),
        earliestUnprocessed: earliest,
      });
    }
    const safe = expirySafeThrough(evidence, nowD, this.ctx.config.edge.maxOfflineHours * 3_600_000);
    if (safe === null || safe.getTime() >= nowD.getTime()) return toDbTime(nowD);
    // no proof at all (or a time before any deadline): stored times compare as text, so no odd years
    return safe.getTime() <= 0 ? null : toDbTime(safe);
  }

  private async expireAt(pupUid: string, cutoff: string, now: string): Promise<number> {
    let total = 0;
    for (;;) {
      const due = await this.ctx.db.kysely
        .selectFrom('shipments')
        .select('uid')
        .where('state_code', '=', 'ReadyForDropoff')
        .where('drop_off_deadline', 'is not', null)
        .where('drop_off_deadline', '<=', cutoff)
        .where('pup_uid', '=', pupUid)
        .orderBy('drop_off_deadline')
        .limit(200)
        .execute();
      if (due.length === 0) return total;
      let n = 0;
      for (const d of due) {
        n += await this.tx.run(async (trx) => {
          const row = await this.load(trx, d.uid);
          if (!row || row.state_code !== 'ReadyForDropoff' || !row.drop_off_deadline || row.drop_off_deadline > cutoff) return 0;
          // an Expired shipment keeps the deadline it missed: a late drop-off is judged by it
          await this.apply(trx, row, { type: 'Expire' }, 'clock', `drop-off deadline ${row.drop_off_deadline} passed`, now, { missed_deadline: row.drop_off_deadline });
          return 1;
        });
      }
      total += n;
      if (n === 0) return total;
    }
  }

  // ---- unlock throttling ---------------------------------------------------------------------

  private pinFailuresRecorded = 0;

  async recentUnlockFailures(shipmentUid: string): Promise<number> {
    const since = toDbTime(new Date(this.ctx.clock.now().getTime() - THROTTLE_MS));
    const r = await this.ctx.db.kysely
      .selectFrom('unlock_failures')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('shipment_uid', '=', shipmentUid)
      .where('at', '>', since)
      .executeTakeFirst();
    return Number(r?.n ?? 0);
  }

  /**
   * Records a wrong PIN: against its shipment ('' when it matched none) and, with a scope, against
   * the tenant, its pick up point and its locker (pinThrottle). Old rows are purged now and then.
   */
  async recordUnlockFailure(shipmentUid: string, scope?: PinScope): Promise<void> {
    const purge = ++this.pinFailuresRecorded % 256 === 0;
    await this.write(async (trx, now) => {
      await trx
        .insertInto('unlock_failures')
        .values({ shipment_uid: shipmentUid, at: now, tenant_uid: scope?.tenantUid ?? null, pup_uid: scope?.pupUid ?? null, locker_uid: scope?.lockerUid ?? null })
        .execute();
      if (purge) {
        const keepMs = Math.max(THROTTLE_MS, this.ctx.config.throttle.pinFailureWindowSeconds * 1000) + 3_600_000;
        await trx.deleteFrom('unlock_failures').where('at', '<', toDbTime(new Date(Date.parse(now) - keepMs))).execute();
      }
    });
  }

  /**
   * The wrong-PIN throttle per tenant and locker, per tenant and pick up point, and per tenant
   * (throttle.pinMaxFailuresPer*, within throttle.pinFailureWindowSeconds), counted in the
   * database so every central instance sees the same counts. null: a PIN may be checked now; else
   * how long until the tripped limit lets one through again. Scoped by tenant: one tenant's
   * guesses never lock another tenant out of a shared pick up point.
   */
  async pinThrottle(scope: PinScope): Promise<{ retryAfterSeconds: number; scope: 'locker' | 'pup' | 'tenant' } | null> {
    const t = this.ctx.config.throttle;
    if (t.pinMaxFailuresPerLocker <= 0 && t.pinMaxFailuresPerPup <= 0 && t.pinMaxFailuresPerTenant <= 0) return null;
    const windowMs = t.pinFailureWindowSeconds * 1000;
    const nowMs = this.ctx.clock.now().getTime();
    const since = toDbTime(new Date(nowMs - windowMs));
    const db = this.ctx.db.kysely;
    const r = await db
      .selectFrom('unlock_failures')
      .select([
        sql<number>`count(*)`.as('tenant'),
        sql<number>`coalesce(sum(case when pup_uid = ${scope.pupUid} then 1 else 0 end), 0)`.as('pup'),
        sql<number>`coalesce(sum(case when locker_uid = ${scope.lockerUid ?? ''} then 1 else 0 end), 0)`.as('locker'),
      ])
      .where('tenant_uid', '=', scope.tenantUid)
      .where('at', '>', since)
      .executeTakeFirst();
    const tripped: { scope: 'locker' | 'pup' | 'tenant'; max: number }[] = [];
    if (t.pinMaxFailuresPerLocker > 0 && scope.lockerUid && Number(r?.locker ?? 0) >= t.pinMaxFailuresPerLocker) tripped.push({ scope: 'locker', max: t.pinMaxFailuresPerLocker });
    if (t.pinMaxFailuresPerPup > 0 && Number(r?.pup ?? 0) >= t.pinMaxFailuresPerPup) tripped.push({ scope: 'pup', max: t.pinMaxFailuresPerPup });
    if (t.pinMaxFailuresPerTenant > 0 && Number(r?.tenant ?? 0) >= t.pinMaxFailuresPerTenant) tripped.push({ scope: 'tenant', max: t.pinMaxFailuresPerTenant });
    if (tripped.length === 0) return null;
    let worst: { retryAfterSeconds: number; scope: 'locker' | 'pup' | 'tenant' } | null = null;
    for (const x of tripped) {
      // the limit lets a PIN through again once the max-th newest failure leaves the window
      let q = db.selectFrom('unlock_failures').select('at').where('tenant_uid', '=', scope.tenantUid).where('at', '>', since);
      if (x.scope === 'locker') q = q.where('locker_uid', '=', scope.lockerUid ?? '');
      if (x.scope === 'pup') q = q.where('pup_uid', '=', scope.pupUid);
      const row = await q.orderBy('at', 'desc').limit(1).offset(x.max - 1).executeTakeFirst();
      const until = row ? Date.parse(row.at) + windowMs : nowMs + 1000;
      const secs = Math.max(1, Math.ceil((until - nowMs) / 1000));
      if (!worst || secs > worst.retryAfterSeconds) worst = { retryAfterSeconds: secs, scope: x.scope };
    }
    return worst;
  }
}

/** What a wrong PIN counts against besides its shipment. */
export interface PinScope {
  tenantUid: string;
  pupUid: string;
  /** null: the locker is unknown (a lockerName of no locker): only the PUP and tenant count */
  lockerUid: string | null;
}

const services = new WeakMap<AppContext, ShipmentService>();

/** The one ShipmentService of a running service (its group-commit queue is per database). */
export function shipmentService(ctx: AppContext): ShipmentService {
  let s = services.get(ctx);
  if (!s) {
    s = new ShipmentService(ctx);
    services.set(ctx, s);
  }
  return s;
}

/** A terminal's door event, as the edge sync hands it over. */
export interface DoorEvent {
  pupUid: string;
  lockerUid: string;
  /** the PIN or Qr value of the code the door was opened with */
  code: string;
  /** that code's uid (the event's codeId): finds an expired booking's code in the expiry race */
  codeId?: string;
  /** item sensor at door close; null: unknown */
  itemPresent: boolean | null;
  /** door time: the event's time at the terminal, already corrected for its clock skew (edge/clock.ts doorTime) */
  at: Date;
  /** when the central service received the event (edge_events.received_at) */
  receivedAt: Date;
  /** see LockerAccessEvent.claim */
  claim?: (trx: Trx) => Promise<boolean>;
}

/** Entry point for the edge sync (MQTT door events): applies a terminal's door event at its door time. */
export function handleDoorEvent(ctx: AppContext, ev: DoorEvent): Promise<LockerAccessResult> {
  return shipmentService(ctx).applyLockerAccess({ ...ev, cause: 'door' });
}
