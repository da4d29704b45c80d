// What the doors say, next to what the shipments say (issue 11 part 7; docs/state-machine.md,
// "Disagreements").
//
// 1. Observations. The edge sync hands every terminal event that is not a drop-off or pick-up to
//    recordObservation(): door, item and fault events update the last observed physical state of
//    their locker (lock_observations, one row per locker). A newer event of the same terminal (by
//    its seq) replaces an older one; an older or repeated one changes nothing.
// 2. disagreements(): a pure function of the observations and the lockers' holding shipments.
// 3. The DisagreementMonitor worker looks for disagreements every edge.disagreementCheckSeconds,
//    records the open ones (lock_disagreements) and logs each once when it appears (warn) and when
//    it is gone (info). The metrics endpoint (ops/metrics.ts) serves them as a gauge; the CLI
//    (`locker-central disagreements`) lists them per pick up point.
import { sql, type Kysely } from 'kysely';
import type { AppContext, Worker } from '../context';
import type { Database } from '../db/schema';
import type { LockObservationsTable } from '../db/schema-edge';
import { Periodic } from '../periodic';
import type { Logger } from '../logger';
import { toDbTime } from '../ids';
import { registerScrapeMetric } from '../ops/metrics';
import { registerWorkerFactory } from '../workers';

// ------------------------------------------------------------------ observations (pure)

export interface LockObservation {
  lockerUid: string;
  pupUid: string;
  /** the terminal whose event was applied last, its journal (null from older agents), seq and event id */
  terminalId: string;
  journalId: string | null;
  seq: number;
  eventId: string;
  /** the terminal's time of that event */
  at: string;
  /** central time it was received */
  receivedAt: string;
  door: 'open' | 'closed' | null;
  doorAt: string | null;
  /** true: an item; false: empty; null: unknown (no item sensor, or never seen) */
  item: boolean | null;
  itemAt: string | null;
  /** faults, by the terminal time they were seen; null when absent */
  leftOpenAt: string | null;
  jammedAt: string | null;
  boardOfflineAt: string | null;
}

/** A terminal event as the observation reducer sees it. */
export interface ObservedEvent {
  terminalId: string;
  /** the terminal journal the seq counts in (a new store starts again at 1); null from older agents */
  journalId?: string | null;
  seq: number;
  eventId: string;
  type: string;
  /** the terminal's time */
  at: string;
  /** central time of receipt */
  receivedAt: string;
  /** the event's own fields (item, reason, ...) */
  fields: Record<string, unknown>;
}

/** Event types that say something about a lock's physical state. */
export const OBSERVED_TYPES = new Set(['doorOpened', 'doorClosed', 'unlockUnobserved', 'itemPlaced', 'itemRemoved', 'doorLeftOpen', 'forcedOpen', 'jam', 'boardOffline', 'boardOnline']);
/** ... of these, the ones about a whole board (every lock on it) */
const BOARD_TYPES = new Set(['boardOffline', 'boardOnline']);

/**
 * Whether the event is newer than what the observation holds: by seq within the same terminal
 * journal; an event of another journal (a new store on the terminal, whose seq starts again) or of
 * another terminal of the pick up point (a replaced terminal) by the terminal's time.
 */
export function isNewer(prev: LockObservation | null, ev: Pick<ObservedEvent, 'terminalId' | 'journalId' | 'seq' | 'at'>): boolean {
  if (!prev) return true;
  if (prev.terminalId === ev.terminalId && prev.journalId === (ev.journalId ?? null)) return ev.seq > prev.seq;
  return Date.parse(ev.at) >= Date.parse(prev.at);
}

/**
 * The locker's observation after the event; null when the event changes nothing (not newer, or not
 * about the physical state). Pure.
 */
export function observe(prev: LockObservation | null, ev: ObservedEvent, locker: { lockerUid: string; pupUid: string }): LockObservation | null {
  if (!OBSERVED_TYPES.has(ev.type) || !isNewer(prev, ev)) return null;
  const o: LockObservation = prev
    ? { ...prev, pupUid: locker.pupUid }
    : { lockerUid: locker.lockerUid, pupUid: locker.pupUid, terminalId: ev.terminalId, journalId: ev.journalId ?? null, seq: ev.seq, eventId: ev.eventId, at: ev.at, receivedAt: ev.receivedAt, door: null, doorAt: null, item: null, itemAt: null, leftOpenAt: null, jammedAt: null, boardOfflineAt: null };
  const setItem = (v: unknown) => {
    if (v === undefined) return; // not reported: keep what was known
    o.item = typeof v === 'boolean' ? v : null; // null: the lock has no item sensor
    o.itemAt = ev.at;
  };
  // an event read from a lock's poll means its board answers
  const answered = () => {
    o.boardOfflineAt = null;
  };
  switch (ev.type) {
    case 'doorOpened':
      o.door = 'open';
      o.doorAt = ev.at;
      o.jammedAt = null; // it opened
      setItem(ev.fields.item);
      answered();
      break;
    case 'doorClosed':
    case 'unlockUnobserved': // an unlock the terminal could not watch: the door is shut now
      o.door = 'closed';
      o.doorAt = ev.at;
      o.leftOpenAt = null;
      o.jammedAt = null;
      setItem(ev.fields.item);
      answered();
      break;
    case 'itemPlaced':
    case 'itemRemoved':
      setItem(ev.type === 'itemPlaced');
      answered();
      break;
    case 'doorLeftOpen':
      if (o.door !== 'open') {
        o.door = 'open';
        o.doorAt = ev.at;
      }
      o.leftOpenAt = ev.at;
      answered();
      break;
    case 'forcedOpen':
      // reason 'item': the itemPlaced/itemRemoved event next to it carries the item
      if (ev.fields.reason !== 'door') return null;
      if (o.door !== 'open') {
        o.door = 'open';
        o.doorAt = ev.at;
      }
      answered();
      break;
    case 'jam':
      o.jammedAt = ev.at;
      break;
    case 'boardOffline':
      o.boardOfflineAt ??= ev.at;
      break;
    case 'boardOnline':
      o.boardOfflineAt = null;
      break;
  }
  o.terminalId = ev.terminalId;
  o.journalId = ev.journalId ?? null;
  o.seq = ev.seq;
  o.eventId = ev.eventId;
  o.at = ev.at;
  o.receivedAt = ev.receivedAt;
  return o;
}

// ------------------------------------------------------------------ observations (store)

type ObsRow = LockObservationsTable;

function fromRow(r: ObsRow): LockObservation {
  return {
    lockerUid: r.locker_uid,
    pupUid: r.pup_uid,
    terminalId: r.terminal_id,
    journalId: r.journal_id ?? null,
    seq: Number(r.seq),
    eventId: r.event_id,
    at: r.at,
    receivedAt: r.received_at,
    door: r.door === 'open' || r.door === 'closed' ? r.door : null,
    doorAt: r.door_at,
    item: r.item === null || r.item === undefined ? null : Number(r.item) === 1,
    itemAt: r.item_at,
    leftOpenAt: r.left_open_at,
    jammedAt: r.jammed_at,
    boardOfflineAt: r.board_offline_at,
  };
}

function toRow(o: LockObservation, now: string): ObsRow {
  return {
    locker_uid: o.lockerUid,
    pup_uid: o.pupUid,
    terminal_id: o.terminalId,
    journal_id: o.journalId,
    seq: o.seq,
    event_id: o.eventId,
    at: o.at,
    received_at: o.receivedAt,
    door: o.door,
    door_at: o.doorAt,
    item: o.item === null ? null : o.item ? 1 : 0,
    item_at: o.itemAt,
    left_open_at: o.leftOpenAt,
    jammed_at: o.jammedAt,
    board_offline_at: o.boardOfflineAt,
    updated_at: now,
  };
}

/**
 * Runs one portable SQL statement (`?` placeholders): inside the edge sync's batch transaction the
 * statements run as cached prepared statements (shipments/sqlq.ts rawQuery); recordObservation()
 * runs them through Kysely.
 */
export type ObsExec = <R>(text: string, params: readonly unknown[]) => Promise<{ rows: R[]; numAffectedRows: number }>;

const OBS_COLS = ['locker_uid', 'pup_uid', 'terminal_id', 'journal_id', 'seq', 'event_id', 'at', 'received_at', 'door', 'door_at', 'item', 'item_at', 'left_open_at', 'jammed_at', 'board_offline_at', 'updated_at'] as const;
const OBS_INSERT = `INSERT INTO lock_observations (${OBS_COLS.join(', ')}) VALUES (${OBS_COLS.map(() => '?').join(', ')}) ON CONFLICT (locker_uid) DO NOTHING`;
const OBS_UPDATE = `UPDATE lock_observations SET ${OBS_COLS.slice(1).map((c) => `${c} = ?`).join(', ')} WHERE locker_uid = ? AND terminal_id = ? AND seq = ? AND event_id = ?`;

/** A Kysely database (or transaction) as an ObsExec: the statement text with its values bound by Kysely. */
function kyselyExec(db: Kysely<Database>): ObsExec {
  return async <R>(text: string, params: readonly unknown[]) => {
    const parts = text.split('?');
    const strings = Object.assign([...parts], { raw: [...parts] }) as unknown as TemplateStringsArray;
    const r = await sql<R>(strings, ...params).execute(db);
    return { rows: r.rows, numAffectedRows: Number(r.numAffectedRows ?? r.rows.length) };
  };
}

/** A locker an event is about, with its observation row as read in the same statement (null: none yet). */
interface LockerObserved {
  uid: string;
  obs: ObsRow | null;
}

// the lockers with their observation rows, one statement per way of naming them (a round trip less
// per observed event on PostgreSQL than reading the locker, then its row)
const WITH_OBS = 'SELECT l.uid AS observed_locker, o.* FROM lockers l LEFT JOIN lock_observations o ON o.locker_uid = l.uid WHERE';
const OBS_OF_BOARD = `${WITH_OBS} l.pup_uid = ? AND l.bus = ? AND l.board_address = ?`;
const OBS_OF_UID = `${WITH_OBS} l.uid = ? AND l.pup_uid = ?`;
const OBS_OF_LOCK = `${WITH_OBS} l.pup_uid = ? AND l.bus = ? AND l.board_address = ? AND l.lock_number = ?`;

type ObservedRow = ObsRow & { observed_locker: string };
const observed = (rows: ObservedRow[]): LockerObserved[] =>
  rows.map(({ observed_locker, ...o }) => ({ uid: observed_locker, obs: o.locker_uid == null ? null : (o as ObsRow) }));

/**
 * A board address or lock number as the lockers table holds them (an integer column): anything
 * else in an event (1.5, 3e9) matches no locker. Passed on as it came, PostgreSQL refused the
 * whole statement (22P02, not a shipment's refusal), so the event failed on every retry and held
 * the terminal's later events for good; SQLite found no match.
 */
const lockNumber = (v: unknown): number | null => (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 && v <= 2_147_483_647 ? v : null);

/** The lockers an event is about: by its lockerUid (of the terminal's pick up point), else by bus/board/lock there. */
async function lockersOf(exec: ObsExec, pupUid: string, type: string, f: Record<string, unknown>): Promise<LockerObserved[]> {
  const bus = typeof f.bus === 'string' ? f.bus : null;
  const board = lockNumber(f.board);
  if (BOARD_TYPES.has(type)) {
    if (bus === null || board === null) return [];
    return observed((await exec<ObservedRow>(OBS_OF_BOARD, [pupUid, bus, board])).rows);
  }
  if (typeof f.lockerUid === 'string') {
    const r = observed((await exec<ObservedRow>(OBS_OF_UID, [f.lockerUid, pupUid])).rows);
    if (r.length) return r;
  }
  const lock = lockNumber(f.lock);
  if (bus === null || board === null || lock === null) return [];
  return observed((await exec<ObservedRow>(OBS_OF_LOCK, [pupUid, bus, board, lock])).rows).slice(0, 1);
}

/**
 * Applies the events, in order, to one locker's row: a compare-and-set on the row read, so
 * concurrent writers (several central instances) never go backwards. The first attempt works from
 * the row read with the locker (lockersOf); an attempt whose compare-and-set finds the row changed
 * reads it again and applies the events to what it finds.
 */
async function applyToLocker(exec: ObsExec, locker: LockerObserved, pupUid: string, events: readonly ObservedEvent[], now: string): Promise<void> {
  const lockerUid = locker.uid;
  for (let attempt = 0; attempt < 10; attempt++) {
    const cur = attempt === 0 ? (locker.obs ?? undefined) : (await exec<ObsRow>('SELECT * FROM lock_observations WHERE locker_uid = ?', [lockerUid])).rows[0];
    const prev = cur ? fromRow(cur) : null;
    let next: LockObservation | null = null;
    for (const ev of events) next = observe(next ?? prev, ev, { lockerUid, pupUid }) ?? next;
    if (!next) return;
    const row = toRow(next, now);
    const values = OBS_COLS.map((c) => row[c] ?? null);
    if (!cur) {
      if ((await exec(OBS_INSERT, values)).numAffectedRows === 1) return;
      continue;
    }
    if ((await exec(OBS_UPDATE, [...values.slice(1), lockerUid, cur.terminal_id, cur.seq, cur.event_id])).numAffectedRows === 1) return;
  }
  throw new Error(`lock observation of ${lockerUid} kept changing`);
}

/** the fields of an observed event's payload; null when it is not an observed type or unreadable */
function observedFields(row: StoredEventRow): Record<string, unknown> | null {
  if (!OBSERVED_TYPES.has(row.type)) return null;
  try {
    const parsed = JSON.parse(row.payload) as unknown;
    return parsed && typeof parsed === 'object' ? (parsed as Record<string, unknown>) : {};
  } catch {
    return null;
  }
}

const observedEvent = (terminalId: string, row: StoredEventRow, fields: Record<string, unknown>): ObservedEvent => ({
  terminalId,
  journalId: row.journal_id ?? null,
  seq: Number(row.seq),
  eventId: row.event_id,
  type: row.type,
  at: row.at,
  receivedAt: row.received_at,
  fields,
});

/** An edge_events row, as the edge sync stored it. */
export interface StoredEventRow {
  event_id: string;
  /** the terminal journal (edge_events.journal_id; absent before ordered delivery) */
  journal_id?: string | null;
  seq: number | string;
  type: string;
  at: string;
  received_at: string;
  payload: string;
}

/**
 * Records what a terminal event says about its lock(s), with the statements run by `exec` (the
 * edge sync's batch transaction). Throws on a failure (the caller rolls the event back and leaves
 * it unprocessed); resolves when recorded, or when there is nothing to record (another type, an
 * unreadable payload, a lock no locker sits at).
 */
export async function recordObservationWith(exec: ObsExec, log: Logger, terminalId: string, pupUid: string, row: StoredEventRow): Promise<void> {
  const fields = observedFields(row);
  if (!fields) return;
  const lockers = await lockersOf(exec, pupUid, row.type, fields);
  if (!lockers.length) {
    log.debug({ terminal: terminalId, seq: Number(row.seq), type: row.type }, 'event names no provisioned locker; no observation');
    return;
  }
  const ev = observedEvent(terminalId, row, fields);
  const now = new Date().toISOString();
  for (const l of lockers) await applyToLocker(exec, l, pupUid, [ev], now);
}

/** how many events an ObservationBatch holds before it writes them (the memory of a long advance) */
const FLUSH_EVENTS = 2000;

/**
 * What the events of one advance of a terminal (edge/ingest.ts, a batch without a savepoint per
 * event) say about their locks, kept in memory and written once per locker when the advance ends
 * (flush), inside the same transaction: a drop-off or pick-up session reports its door and item
 * two to four times on one lock, and on PostgreSQL every read and every write of a row was a round
 * trip (about 1,060 of the 3,450 queries per 1,000 events of bench/edge-ingest.ts, --sql).
 * A locker's row is taken from the first read that finds it (one read per way an event names its
 * lock: by uid, by bus/board/lock, a board) and its events are kept in order; flush applies them
 * to the row as read (observe, in memory) and writes each changed one by compare-and-set, or,
 * when another writer changed it meanwhile, applies them to the row it finds (applyToLocker): the
 * row ends as the events one by one would have left it. Nothing else in the
 * advance's transaction reads lock_observations (the door transitions do not). A long advance is
 * written every FLUSH_EVENTS events.
 */
export class ObservationBatch {
  /** per locker: its row as read and the events about it, in order */
  private readonly lockers = new Map<string, { read: LockerObserved; pupUid: string; events: ObservedEvent[] }>();
  /** the lockers a way of naming them found (lockersOf's statement and values) */
  private readonly named = new Map<string, string[]>();
  /** events recorded since the last flush */
  private held = 0;

  constructor(
    private readonly exec: ObsExec,
    private readonly log: Logger,
  ) {}

  /** as recordObservationWith, the write left to flush() */
  async record(terminalId: string, pupUid: string, row: StoredEventRow): Promise<void> {
    const fields = observedFields(row);
    if (!fields) return;
    // what lockersOf reads (a number as its text: JSON would write Infinity as null)
    const text = (v: unknown, type: 'string' | 'number') => (typeof v === type ? String(v) : null);
    const key = JSON.stringify([pupUid, BOARD_TYPES.has(row.type), text(fields.lockerUid, 'string'), text(fields.bus, 'string'), text(fields.board, 'number'), text(fields.lock, 'number')]);
    let uids = this.named.get(key);
    if (!uids) {
      const found = await lockersOf(this.exec, pupUid, row.type, fields);
      for (const l of found) if (!this.lockers.has(l.uid)) this.lockers.set(l.uid, { read: l, pupUid, events: [] });
      uids = found.map((l) => l.uid);
      this.named.set(key, uids);
    }
    if (!uids.length) {
      this.log.debug({ terminal: terminalId, seq: Number(row.seq), type: row.type }, 'event names no provisioned locker; no observation');
      return;
    }
    const ev = observedEvent(terminalId, row, fields);
    for (const uid of uids) this.lockers.get(uid)!.events.push(ev);
    if (++this.held >= FLUSH_EVENTS) await this.flush();
  }

  /** writes every locker the recorded events change (applyToLocker: none when no event is newer); the batch is empty afterwards */
  async flush(): Promise<void> {
    const now = new Date().toISOString();
    // in the order of their uids: two transactions writing the same lockers lock them in one order
    const lockers = [...this.lockers.values()].sort((a, b) => (a.read.uid < b.read.uid ? -1 : a.read.uid > b.read.uid ? 1 : 0));
    this.lockers.clear();
    this.named.clear();
    this.held = 0;
    for (const l of lockers) await applyToLocker(this.exec, l.read, l.pupUid, l.events, now);
  }
}

/**
 * Records what a terminal event says about its lock(s) (recordObservationWith, through Kysely).
 * True when done (recorded, or nothing to record: another type, a lock no locker sits at); false
 * after a failure (logged): the event then stays unprocessed and the edge sync's retry brings it back.
 */
export async function recordObservation(db: Kysely<Database>, log: Logger, terminalId: string, row: StoredEventRow): Promise<boolean> {
  if (!OBSERVED_TYPES.has(row.type)) return true;
  try {
    const t = await db.selectFrom('terminals').select('pup_uid').where('id', '=', terminalId).executeTakeFirst();
    if (!t) return true;
    await recordObservationWith(kyselyExec(db), log, terminalId, t.pup_uid, row);
    return true;
  } catch (err) {
    log.error({ terminal: terminalId, seq: Number(row.seq), type: row.type, err: (err as Error).message }, 'recording a lock observation failed; will retry');
    return false;
  }
}

// ------------------------------------------------------------------ disagreements (pure)

export const DISAGREEMENT_KINDS = ['item-without-dropoff', 'item-without-shipment', 'empty-but-ready-for-pickup', 'door-left-open', 'jammed', 'board-offline'] as const;
export type DisagreementKind = (typeof DISAGREEMENT_KINDS)[number];

/** A locker and the shipment holding it (lockers.booked_shipment_uid), if any. */
export interface LockerHolding {
  lockerUid: string;
  lockerName: string;
  pupUid: string;
  pupName?: string;
  shipmentUid: string | null;
  state: string | null;
  /** central time of the last change of the holding (the locker booked or released, the shipment changed) */
  changedAt: string;
}

export interface Disagreement {
  pupUid: string;
  pupName?: string;
  lockerUid: string;
  lockerName: string;
  kind: DisagreementKind;
  shipmentUid?: string;
  state?: string;
  /** since when both sides have said what they say (the later of the two) */
  since: string;
}

/** Shipment states in which the locker should be empty / hold the item. */
const EXPECT_EMPTY = new Set(['ReadyForDropoff', 'LockerAssigned']);
const EXPECT_ITEM = new Set(['ReadyForPickup', 'WaitForReceiver']);
const ACTIVE = new Set([...EXPECT_EMPTY, ...EXPECT_ITEM]);

const ms = (t: string | null | undefined) => (t ? Date.parse(t) : Number.NaN);
const later = (a: string, b: string) => (ms(b) > ms(a) ? b : a);

/**
 * The disagreements between what the locks were last seen to hold and what the shipments say.
 * Pure. Item comparisons (the first three kinds) are made only
 *  - when the item sensor reading is known and the door is not open (an open door is a session
 *    under way: its outcome is decided at the close), and
 *  - once both sides have been still for `graceMs`: the observation was received, and the holding
 *    last changed, at least that long before `now` (central time). A terminal reports the door
 *    close and the drop-off (or pick-up) as two events one after the other; between them the two
 *    sides disagree for a moment, which is not a disagreement.
 * Faults (door left open, jam, board offline) are the terminal's own conclusions after its own
 * thresholds and are reported at once.
 */
export function disagreements(observations: readonly LockObservation[], lockers: readonly LockerHolding[], opts: { now: Date | string | number; graceMs: number }): Disagreement[] {
  const now = new Date(opts.now).getTime();
  const byLocker = new Map(lockers.map((l) => [l.lockerUid, l]));
  const out: Disagreement[] = [];
  for (const o of observations) {
    const l = byLocker.get(o.lockerUid);
    if (!l) continue;
    const base = { pupUid: l.pupUid, ...(l.pupName !== undefined ? { pupName: l.pupName } : {}), lockerUid: l.lockerUid, lockerName: l.lockerName };
    const active = l.shipmentUid && l.state && ACTIVE.has(l.state) ? { shipmentUid: l.shipmentUid, state: l.state } : null;
    if (o.leftOpenAt) out.push({ ...base, kind: 'door-left-open', ...(active ?? {}), since: o.leftOpenAt });
    if (o.jammedAt) out.push({ ...base, kind: 'jammed', ...(active ?? {}), since: o.jammedAt });
    if (o.boardOfflineAt) out.push({ ...base, kind: 'board-offline', ...(active ?? {}), since: o.boardOfflineAt });
    if (o.item === null || o.door === 'open') continue;
    const settled = now - Math.max(ms(o.receivedAt), ms(l.changedAt)) >= opts.graceMs;
    if (!settled) continue;
    const since = later(o.itemAt ?? o.at, l.changedAt);
    if (o.item && !active) out.push({ ...base, kind: 'item-without-shipment', since });
    else if (o.item && active && EXPECT_EMPTY.has(active.state)) out.push({ ...base, kind: 'item-without-dropoff', ...active, since });
    else if (!o.item && active && EXPECT_ITEM.has(active.state)) out.push({ ...base, kind: 'empty-but-ready-for-pickup', ...active, since });
  }
  const order = (d: Disagreement) => [d.pupName ?? '', d.pupUid, d.lockerName, d.lockerUid, String(DISAGREEMENT_KINDS.indexOf(d.kind))];
  return out.sort((a, b) => {
    const x = order(a);
    const y = order(b);
    for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return x[i]! < y[i]! ? -1 : 1;
    return 0;
  });
}

// ------------------------------------------------------------------ disagreements (store)

/** The observed lockers (of one pick up point, or all) and their holdings, from the store. */
export async function loadObservedLockers(db: Kysely<Database>, pupUid?: string): Promise<{ observations: LockObservation[]; lockers: LockerHolding[] }> {
  let q = db
    .selectFrom('lock_observations as o')
    .innerJoin('lockers as l', 'l.uid', 'o.locker_uid')
    .innerJoin('pups as p', 'p.uid', 'l.pup_uid')
    .leftJoin('shipments as s', 's.uid', 'l.booked_shipment_uid')
    .selectAll('o')
    .select(['l.name as locker_name', 'l.pup_uid as locker_pup_uid', 'l.updated_at as locker_updated_at', 'p.name as pup_name', 's.uid as shipment_uid', 's.state_code as shipment_state', 's.updated_at as shipment_updated_at']);
  if (pupUid) q = q.where('l.pup_uid', '=', pupUid);
  const rows = await q.execute();
  return {
    observations: rows.map((r) => fromRow(r)),
    lockers: rows.map((r) => ({
      lockerUid: r.locker_uid,
      lockerName: r.locker_name,
      pupUid: r.locker_pup_uid,
      pupName: r.pup_name,
      shipmentUid: r.shipment_uid ?? null,
      state: r.shipment_state ?? null,
      changedAt: r.shipment_updated_at ? later(r.locker_updated_at, r.shipment_updated_at) : r.locker_updated_at,
    })),
  };
}

/** The disagreements now, read from the store. */
export async function currentDisagreements(db: Kysely<Database>, opts: { now: Date; graceMs: number; pupUid?: string }): Promise<Disagreement[]> {
  const { observations, lockers } = await loadObservedLockers(db, opts.pupUid);
  return disagreements(observations, lockers, opts);
}

const graceMs = (ctx: Pick<AppContext, 'config'>) => ctx.config.edge.disagreementGraceSeconds * 1000;

// ------------------------------------------------------------------ monitor, metric

/**
 * Looks for disagreements every edge.disagreementCheckSeconds; records the open ones in
 * lock_disagreements and logs each once when it appears (warn) and once when it is gone (info).
 * The insert decides who logs, so with several central instances each is logged once.
 */
export class DisagreementMonitor implements Worker {
  readonly name = 'lock-disagreements';
  private readonly log: Logger;
  private readonly loop: Periodic;

  constructor(private readonly ctx: AppContext) {
    this.log = ctx.log.child({ ns: 'central.disagreements' });
    this.loop = new Periodic(
      () => this.ctx.config.edge.disagreementCheckSeconds * 1000,
      () =>
        this.check().then(
          () => undefined,
          (err) => this.log.error({ err: (err as Error).message }, 'looking for lock disagreements failed'),
        ),
    );
  }

  async start(): Promise<void> {
    this.loop.start();
  }

  async stop(): Promise<void> {
    await this.loop.stop();
  }

  /** One look: returns the disagreements that appeared and those that are gone. */
  async check(): Promise<{ appeared: Disagreement[]; resolved: { lockerUid: string; kind: string }[] }> {
    const db = this.ctx.db.kysely;
    const now = this.ctx.clock.now();
    const list = await currentDisagreements(db, { now, graceMs: graceMs(this.ctx) });
    const open = await db.selectFrom('lock_disagreements').selectAll().execute();
    const key = (lockerUid: string, kind: string) => `${lockerUid}\u0000${kind}`;
    const openKeys = new Set(open.map((o) => key(o.locker_uid, o.kind)));
    const nowKeys = new Set(list.map((d) => key(d.lockerUid, d.kind)));
    const appeared: Disagreement[] = [];
    for (const d of list) {
      if (openKeys.has(key(d.lockerUid, d.kind))) continue;
      const r = await db
        .insertInto('lock_disagreements')
        .values({ locker_uid: d.lockerUid, kind: d.kind, pup_uid: d.pupUid, shipment_uid: d.shipmentUid ?? null, state: d.state ?? null, since: d.since, detected_at: toDbTime(now) })
        .onConflict((oc) => oc.columns(['locker_uid', 'kind']).doNothing())
        .executeTakeFirst();
      if (Number(r.numInsertedOrUpdatedRows ?? 0) !== 1) continue; // another instance saw it first
      appeared.push(d);
      this.log.warn({ pup: d.pupUid, locker: d.lockerUid, lockerName: d.lockerName, kind: d.kind, shipment: d.shipmentUid, state: d.state, since: d.since }, 'lock disagreement');
    }
    const resolved: { lockerUid: string; kind: string }[] = [];
    for (const o of open) {
      if (nowKeys.has(key(o.locker_uid, o.kind))) continue;
      const r = await db.deleteFrom('lock_disagreements').where('locker_uid', '=', o.locker_uid).where('kind', '=', o.kind).where('detected_at', '=', o.detected_at).executeTakeFirst();
      if (Number(r.numDeletedRows) !== 1) continue;
      resolved.push({ lockerUid: o.locker_uid, kind: o.kind });
      this.log.info({ pup: o.pup_uid, locker: o.locker_uid, kind: o.kind, shipment: o.shipment_uid ?? undefined }, 'lock disagreement resolved');
    }
    return { appeared, resolved };
  }
}

registerWorkerFactory((ctx) => new DisagreementMonitor(ctx));

/** locker_lock_disagreements{pup, kind}: every pick up point and kind, 0 when there is none. */
registerScrapeMetric({
  name: 'locker_lock_disagreements',
  help: 'Lockers whose last observed physical state disagrees with their shipment, or that report a fault, by pick up point and kind (docs/state-machine.md, Disagreements)',
  labelNames: ['pup', 'kind'],
  async collect(ctx) {
    const db = ctx.db.kysely;
    const list = await currentDisagreements(db, { now: ctx.clock.now(), graceMs: graceMs(ctx) });
    const pups = (await db.selectFrom('pups').select('uid').orderBy('uid').execute()).map((p) => p.uid);
    const counts = new Map<string, number>();
    for (const d of list) counts.set(`${d.pupUid}\u0000${d.kind}`, (counts.get(`${d.pupUid}\u0000${d.kind}`) ?? 0) + 1);
    return pups.flatMap((pup) => DISAGREEMENT_KINDS.map((kind) => ({ labels: { pup, kind }, value: counts.get(`${pup}\u0000${kind}`) ?? 0 })));
  },
});
