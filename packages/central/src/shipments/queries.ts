// Read side: the GetShipments family, objects, swaps, access codes, history. Every query is
// scoped by tenant; the indexes of migration 200 serve each filter and sort.
import type BetterSqlite3 from 'better-sqlite3';
import type { Kysely } from 'kysely';
import { sqliteStatement } from './sqlq';
import type { Db } from '../db/database';
import { itemOrRow } from '../db/json-sql';
import { registerPreparedStatement } from '../db/pg-prepared';
import { rawStatement, SQLITE_LIMIT_OFFSET } from '../db/prepared-read';
import { threadAnswer } from '../db/read-pool';
import type { JsonText } from '../http/serializer';
import type { Database } from '../db/schema';
import { toApiTime } from '../ids';
import type { TypeCode } from './types';

export type SortBy = 'CreatedAsc' | 'CreatedDesc' | 'ActivityAsc' | 'ActivityDesc';

export interface ShipmentFilter {
  tenantUid: string;
  typeCode: TypeCode | null;
  active?: boolean | null;
  states?: string[] | null;
  userUid?: string | null;
  bookedPupUid?: string | null;
  shipmentUid?: string | null;
  /** stored time */
  updatedSince?: string | null;
  sortBy: SortBy;
  pageNo: number;
  pageSize: number;
}

function parseAddress(json: string | null): Record<string, string> | undefined {
  if (!json) return undefined;
  try {
    const a = JSON.parse(json) as Record<string, unknown>;
    const out: Record<string, string> = {};
    for (const k of ['name', 'street', 'mailbox', 'city', 'countryIso2']) if (typeof a[k] === 'string') out[k] = a[k] as string;
    return out;
  } catch {
    return undefined;
  }
}

/**
 * Exact totals without re-counting (SQLite): COUNT(*) over tens of thousands of matching rows is
 * most of a GetShipments call. A total is reused only while the store is provably unchanged: the
 * key is this connection's total_changes() (every row this process inserted, updated or deleted,
 * committed or not, counts) plus PRAGMA data_version (changes by any other connection or
 * process). Any write anywhere drops every cached total.
 */
class TotalsCache {
  private version = '';
  private readonly totals = new Map<string, number>();
  constructor(private readonly sqlite: BetterSqlite3.Database) {}

  private currentVersion(): string {
    const c = sqliteStatement(this.sqlite, 'SELECT total_changes() AS c').get() as { c: number };
    const d = sqliteStatement(this.sqlite, 'PRAGMA data_version').get() as { data_version: number };
    return `${c.c}/${d.data_version}`;
  }

  /** The version to store a total under, read BEFORE counting (a later write then misses). */
  check(key: string): { version: string; total: number | undefined } {
    const version = this.currentVersion();
    if (version !== this.version) {
      this.totals.clear();
      this.version = version;
    }
    return { version, total: this.totals.get(key) };
  }

  store(version: string, key: string, total: number): void {
    if (version !== this.version) return;
    if (this.totals.size >= 512) this.totals.clear();
    this.totals.set(key, total);
  }
}

const totalsCaches = new WeakMap<BetterSqlite3.Database, TotalsCache>();

/**
 * Exact totals without re-counting (PostgreSQL, any number of central instances): a total is kept
 * with the text of the statement snapshot it was counted under (pg_current_snapshot(): xmin, xmax
 * and the transactions in progress). Two statements whose snapshots are equal see exactly the same
 * committed rows (a commit anywhere moves xmax or leaves the in-progress list), so a total counted
 * under one is the total under the other. The page statement compares its own snapshot with the
 * one held and runs the count only when they differ: the comparison is made by the database, in
 * the statement that reads the page, so no write can fall between the check and the rows. Any
 * commit in the database (a booking, a door event, another instance's write) makes the next call
 * count again.
 */
class PgTotals {
  private readonly totals = new Map<string, { snap: string; total: number }>();
  /** totals served from a held snapshot / counted (for tests and the bench's notes) */
  hits = 0;
  counts = 0;
  get(key: string): { snap: string; total: number } | undefined {
    return this.totals.get(key);
  }
  store(key: string, snap: string, total: number): void {
    if (this.totals.size >= 512 && !this.totals.has(key)) this.totals.clear();
    this.totals.set(key, { snap, total });
  }
}

const pgTotalsOf = new WeakMap<object, PgTotals>();
function pgTotals(db: Db): PgTotals {
  let t = pgTotalsOf.get(db.kysely);
  if (!t) pgTotalsOf.set(db.kysely, (t = new PgTotals()));
  return t;
}

/** How often PostgreSQL totals were served from a held snapshot and how often counted. */
export function pgTotalsStats(db: Db): { hits: number; counts: number } {
  const t = pgTotals(db);
  return { hits: t.hits, counts: t.counts };
}

// The page query of the GetShipments family as hand-written SQL, one text per filter shape (which
// filters are present, how many states, the sort), built once and then cached: no Kysely query
// tree is built and compiled per request. SQLite runs it as a cached prepared statement in raw
// (array) mode; PostgreSQL as a named prepared statement: the first page without the count (its
// total mostly known without one, see listShipments), later pages with the count in the same
// statement (one round trip, one snapshot).

const ORDER: Record<SortBy, string> = {
  CreatedAsc: 'ORDER BY s.created_at ASC, s.uid ASC',
  CreatedDesc: 'ORDER BY s.created_at DESC, s.uid DESC',
  ActivityAsc: 'ORDER BY s.updated_at ASC, s.uid ASC',
  ActivityDesc: 'ORDER BY s.updated_at DESC, s.uid DESC',
};

interface ListSql {
  count: string;
  page: string;
  /** PostgreSQL: the total (on every row) and the page in one statement; an empty page counts apart */
  pg: string;
  /** PostgreSQL: the count alone, with the snapshot it was taken under (an empty page) */
  pgCount: string;
  /** PostgreSQL: the first page without the count, its LIMIT written in (FIRST_PAGE_LIMITS), per limit */
  pgFirst: Map<number, string>;
  /** PostgreSQL: the texts of this shape are named prepared statements */
  pgNamed: boolean;
  /** the WHERE clause with $1.. placeholders */
  pgWhere: string;
}

/**
 * The LIMITs written into PostgreSQL's first-page texts: a page size is read with the smallest at
 * or above it (the rows past the page are dropped), so a shape has at most this many texts.
 */
const FIRST_PAGE_LIMITS = [10, 20, 25, 50, 100, 200, 250, 500];

/** PostgreSQL: the first page's text for this page size, without the count (see listShipments) */
function pgFirstPage(f: ShipmentFilter, q: ListSql, size: number): { text: string; limit: number } | undefined {
  const limit = FIRST_PAGE_LIMITS.find((l) => l >= size);
  if (limit === undefined) return undefined;
  let text = q.pgFirst.get(limit);
  if (text === undefined) {
    text = `SELECT pg_current_snapshot()::text AS snap, s.item_json AS r FROM shipments s WHERE ${q.pgWhere} ${ORDER[f.sortBy]} LIMIT ${limit}`;
    q.pgFirst.set(limit, text);
    if (q.pgNamed) registerPreparedStatement(text);
  }
  return { text, limit };
}
const listSql = new Map<string, ListSql>();

/** The filter's WHERE clause (placeholders `?`, in the order of filterParams) and its cache key. */
function shapeOf(f: ShipmentFilter): string {
  return `${f.typeCode ? 't' : ''}${f.shipmentUid ? 'u' : `${f.active != null ? 'a' : ''}${f.states && f.states.length ? `s${f.states.length}` : ''}`}${f.userUid ? 'w' : ''}${f.bookedPupUid ? 'p' : ''}${f.updatedSince ? 'd' : ''}/${f.sortBy}`;
}

function whereOf(f: ShipmentFilter): string {
  const w = ['s.tenant_uid = ?'];
  if (f.typeCode) w.push('s.type_code = ?');
  if (f.shipmentUid) w.push('s.uid = ?');
  else {
    if (f.active != null) w.push('s.active = ?');
    if (f.states && f.states.length) w.push(`s.state_code IN (${f.states.map(() => '?').join(', ')})`);
  }
  if (f.userUid) w.push('(s.from_user_uid = ? OR s.to_user_uid = ?)');
  if (f.bookedPupUid) w.push('s.pup_uid = ? AND s.active = 1');
  if (f.updatedSince) w.push('s.updated_at >= ?');
  return w.join(' AND ');
}

function filterParams(f: ShipmentFilter): unknown[] {
  const p: unknown[] = [f.tenantUid];
  if (f.typeCode) p.push(f.typeCode);
  if (f.shipmentUid) p.push(f.shipmentUid);
  else {
    if (f.active != null) p.push(f.active ? 1 : 0);
    if (f.states && f.states.length) p.push(...f.states);
  }
  if (f.userUid) p.push(f.userUid, f.userUid);
  if (f.bookedPupUid) p.push(f.bookedPupUid);
  if (f.updatedSince) p.push(f.updatedSince);
  return p;
}

function sqlOf(f: ShipmentFilter): ListSql {
  const key = shapeOf(f);
  let q = listSql.get(key);
  if (!q) {
    const where = whereOf(f);
    // Each row as one text, the item's JSON (items.ts), which goes into the answer as it is. Both
    // engines read it as the row keeps it (item_json, kept by triggers): no joins, nothing written
    // per read, one string per row from the database
    const page = `SELECT s.item_json FROM shipments s WHERE ${where} ${ORDER[f.sortBy]} ${SQLITE_LIMIT_OFFSET}`;
    let n = 0;
    const pgWhere = where.replace(/\?/g, () => `$${++n}`);
    const k = n;
    // The same $1..$k serve the count (an uncorrelated scalar subquery: an InitPlan, computed once
    // and only when its value is needed) and the page. $k+3 is the statement snapshot under which
    // the caller holds this filter's total: when the statement runs under that very snapshot the
    // CASE never needs the count, so it is never run (see PgTotals).
    const pg = `SELECT CASE WHEN pg_current_snapshot()::text = $${k + 3} THEN NULL ELSE (SELECT count(*) FROM shipments s WHERE ${pgWhere}) END AS total, pg_current_snapshot()::text AS snap, s.item_json AS r FROM shipments s WHERE ${pgWhere} ${ORDER[f.sortBy]} LIMIT $${k + 1} OFFSET $${k + 2}`;
    const pgNamed = !f.states || f.states.length <= 2;
    q = { count: `SELECT count(*) AS n FROM shipments s WHERE ${where}`, page, pg, pgCount: `SELECT count(*) AS n, pg_current_snapshot()::text AS snap FROM shipments s WHERE ${pgWhere}`, pgFirst: new Map(), pgNamed, pgWhere };
    // bounded: every shape is a combination of a few flags, up to 13 states and 4 sorts
    listSql.set(key, q);
    if (pgNamed) {
      registerPreparedStatement(pg);
      registerPreparedStatement(q.pgCount);
    }
  }
  return q;
}

/** A row of the page with a stored address, in items.ts PAGE_COLS order: its JSON array (itemSql). */
type PageRow = [
  uid: string,
  created_at: string,
  type_code: string,
  state_start: string,
  state_code: string,
  active: number | boolean,
  reference_no: string | null,
  reference_case_no: string | null,
  description: string | null,
  from_user_uid: string | null,
  to_user_uid: string | null,
  from_address: string | null,
  to_address: string | null,
  swaps_shipment_uid: string | null,
  pup_uid: string,
  from_name: string | null,
  to_name: string | null,
  pup_name: string | null,
  locker_name: string | null,
];

/** stored time -> API time (UTC, no zone), as toApiTime */
const apiTime = (v: string): string => (v.charCodeAt(v.length - 1) === 90 /* Z */ ? v.slice(0, -1) : v);

/**
 * One item of the page. Every item has the same keys in the same order (one object shape for the
 * whole page, no per-row dictionary growth); an absent optional field is undefined, which the
 * response serializer leaves out exactly as a missing key.
 */
function toItem(r: PageRow): ShipmentListItem {
  const active = !!r[5];
  const from = r[9];
  const to = r[10];
  return {
    shipmentUid: r[0],
    dateCreated: apiTime(r[1]),
    typeCode: r[2],
    stateStart: apiTime(r[3]),
    stateCode: r[4],
    referenceNo: r[6] ?? undefined,
    referenceCaseNo: r[7] ?? undefined,
    description: r[8] ?? undefined,
    fromUserUid: from || undefined,
    fromUserName: from ? (r[15] ?? undefined) : undefined,
    fromAddress: r[11] ? parseAddress(r[11]) : undefined,
    toUserUid: to || undefined,
    toUserName: to ? (r[16] ?? undefined) : undefined,
    toAddress: r[12] ? parseAddress(r[12]) : undefined,
    swapsShipmentUid: r[13] ?? null,
    // The current booking: only active shipments hold (or wait for) a locker.
    bookedPupUid: active ? r[14] : null,
    bookedPupName: active ? (r[17] ?? null) : null,
    bookedLockerName: active ? (r[18] ?? null) : null,
  };
}

/** a row with a stored address, as its JSON array (itemSql), mapped */
const rowItem = (r: unknown[]): ShipmentListItem => toItem(r as PageRow);

/** the first n rows' texts (itemSql) as the page's items */
function pageItems(n: number, textAt: (i: number) => string): (ShipmentListItem | JsonText)[] {
  const items = new Array<ShipmentListItem | JsonText>(n);
  for (let i = 0; i < n; i++) items[i] = itemOrRow(textAt(i), rowItem);
  return items;
}

export interface ShipmentListItem {
  shipmentUid: string;
  dateCreated: string;
  typeCode: string;
  stateStart: string;
  stateCode: string;
  referenceNo: string | undefined;
  referenceCaseNo: string | undefined;
  description: string | undefined;
  fromUserUid: string | undefined;
  fromUserName: string | undefined;
  fromAddress: Record<string, string> | undefined;
  toUserUid: string | undefined;
  toUserName: string | undefined;
  toAddress: Record<string, string> | undefined;
  swapsShipmentUid: string | null;
  bookedPupUid: string | null;
  bookedPupName: string | null;
  bookedLockerName: string | null;
}

export async function listShipments(db: Db, f: ShipmentFilter): Promise<{ totalItems: number; items: (ShipmentListItem | JsonText)[] }> {
  const q = sqlOf(f);
  const params = filterParams(f);
  const offset = (f.pageNo - 1) * f.pageSize;
  if (db.engine === 'postgres') {
    const totals = pgTotals(db);
    const key = shapeOf(f) + JSON.stringify(params);
    // what is held now: if the statement reports the same snapshot, this total is its total
    const held = totals.get(key);
    const first = offset === 0 ? pgFirstPage(f, q, f.pageSize) : undefined;
    if (first) {
      // The first page (what pollers and lists ask for most) by a statement without the count and
      // with its LIMIT written in: PostgreSQL then keeps one generic plan for it instead of
      // planning the page on every call, as it does for the statement below (pgbench, the bench's
      // page of 100 of 100,000 with the count skipped: 676 against 1,633 statements per second).
      // The total: all the rows, when fewer than the limit came; else the total held for this
      // very snapshot; else a count, used only if it ran under the page's snapshot too (a commit
      // between the two: the statement below, the page and its count under one snapshot).
      const rows = await db.pgRead!<[string, string]>(first.text, params, true);
      let total: number | undefined;
      if (rows.length < first.limit) total = rows.length;
      else if (held && held.snap === rows[0]![0]) {
        total = held.total;
        totals.hits++;
      } else {
        const c = (await db.pgRead!<[unknown, string]>(q.pgCount, params, true))[0]!;
        totals.counts++;
        totals.store(key, c[1], Number(c[0]));
        if (c[1] === rows[0]![0]) total = Number(c[0]);
      }
      if (total !== undefined) return { totalItems: total, items: pageItems(Math.min(rows.length, f.pageSize), (i) => rows[i]![1]) };
    }
    // rows as arrays (pg's rowMode 'array'): [total, snap, r] and [n, snap]
    const rows = await db.pgRead!<[number | null, string, string]>(q.pg, [...params, f.pageSize, offset, held?.snap ?? ''], true);
    if (rows.length === 0) {
      // no row carries the total: a page past the end, or nothing matches
      const c = (await db.pgRead!<[unknown, string]>(q.pgCount, params, true))[0];
      const total = Number(c?.[0] ?? 0);
      totals.counts++;
      if (c) totals.store(key, c[1], total);
      return { totalItems: total, items: [] };
    }
    const [firstTotal, snap] = rows[0]!;
    let totalItems: number;
    if (firstTotal === null) {
      // the database found its snapshot equal to the held one and skipped the count
      if (!held || snap !== held.snap) throw new Error('GetShipments: the count was skipped under a snapshot no total is held for');
      totalItems = held.total;
      totals.hits++;
    } else {
      totalItems = Number(firstTotal);
      totals.counts++;
      totals.store(key, snap, totalItems);
    }
    return { totalItems, items: pageItems(rows.length, (i) => rows[i]![2]) };
  }
  const pool = db.readPool;
  if (pool) {
    // a read thread (db/read-pool.ts): the total and the page in one snapshot of committed rows,
    // off the event loop; a read it cannot serve is read below on the main connection
    const read = await threadAnswer(pool.page({ key: shapeOf(f) + JSON.stringify(params), count: q.count, page: q.page, params, offset, size: f.pageSize }));
    if (read) return { totalItems: read.total, items: pageItems(read.rows.length, (i) => read.rows[i] as string) };
  }
  const sqlite = db.sqlite!;
  if (!sqlite.inTransaction) return sqliteList(sqlite, q, f, params, offset);
  // A transaction holds the one connection across awaits (a group-commit batch): its uncommitted
  // rows must not be listed (nor counted), they may yet roll back. Kysely's queue for the
  // connection is waited for, and the page read while it is held.
  return db.kysely.connection().execute(async () => sqliteList(sqlite, q, f, params, offset));
}

/** SQLite on the main connection, no transaction open: the total (held while the store is unchanged) and the page */
function sqliteList(sqlite: BetterSqlite3.Database, q: ListSql, f: ShipmentFilter, params: unknown[], offset: number): { totalItems: number; items: (ShipmentListItem | JsonText)[] } {
  let cache = totalsCaches.get(sqlite);
  if (!cache) totalsCaches.set(sqlite, (cache = new TotalsCache(sqlite)));
  const key = JSON.stringify(params);
  const cached = cache.check(shapeOf(f) + key);
  let totalItems = cached.total;
  if (totalItems === undefined) {
    totalItems = Number((rawStatement(sqlite, q.count).get(params) as [number])[0]);
    cache.store(cached.version, shapeOf(f) + key, totalItems);
  }
  if (totalItems === 0 || offset >= totalItems) return { totalItems, items: [] };
  const rows = rawStatement(sqlite, q.page, true).all([...params, f.pageSize, offset]) as string[];
  return { totalItems, items: pageItems(rows.length, (i) => rows[i]!) };
}

export async function shipmentOfTenant(db: Kysely<Database>, tenantUid: string, uid: string) {
  return db.selectFrom('shipments').selectAll().where('uid', '=', uid).where('tenant_uid', '=', tenantUid).executeTakeFirst();
}

export async function listObjects(db: Kysely<Database>, shipmentUid: string, pageNo: number, pageSize: number) {
  const c = await db.selectFrom('shipment_objects').select((eb) => eb.fn.countAll<number>().as('n')).where('shipment_uid', '=', shipmentUid).executeTakeFirst();
  const rows = await db
    .selectFrom('shipment_objects')
    .selectAll()
    .where('shipment_uid', '=', shipmentUid)
    .orderBy('ord')
    .limit(pageSize)
    .offset((pageNo - 1) * pageSize)
    .execute();
  return {
    totalItems: Number(c?.n ?? 0),
    items: rows.map((o) => ({
      shipmentObjectUid: o.uid,
      referenceNo: o.reference_no ?? '',
      description: o.description ?? '',
      weight: o.weight,
      count: o.count,
      dimension: { width: o.width, height: o.height, length: o.length },
      ...(o.object_type_uid ? { objectTypeUid: o.object_type_uid } : {}),
    })),
  };
}

export async function listSwapsWith(db: Kysely<Database>, tenantUid: string, shipmentUid: string, pageNo: number, pageSize: number) {
  const base = db.selectFrom('shipments').where('swaps_shipment_uid', '=', shipmentUid).where('tenant_uid', '=', tenantUid);
  const c = await base.select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirst();
  const rows = await base
    .select('uid')
    .orderBy('created_at')
    .orderBy('uid')
    .limit(pageSize)
    .offset((pageNo - 1) * pageSize)
    .execute();
  return { totalItems: Number(c?.n ?? 0), uids: rows.map((r) => r.uid) };
}

/** Valid drop-off and pick-up codes; every link code, the newest (the valid one) first. */
export async function accessCodes(db: Kysely<Database>, shipmentUid: string, usage: string | null) {
  let q = db.selectFrom('access_codes').select(['usage', 'type', 'value', 'valid', 'created_at']).where('shipment_uid', '=', shipmentUid);
  if (usage) q = q.where('usage', '=', usage);
  q = q.where((eb) => eb.or([eb('valid', '=', 1), eb('usage', '=', 'LinkCode')]));
  const rows = await q.execute();
  const order = { DropOff: 0, PickUp: 1, LinkCode: 2 } as Record<string, number>;
  rows.sort((a, b) => order[a.usage]! - order[b.usage]! || (a.usage === 'LinkCode' ? (a.created_at < b.created_at ? 1 : a.created_at > b.created_at ? -1 : b.valid - a.valid) : a.type === 'Code' ? -1 : 1));
  return rows.map((r) => ({ usage: r.usage as 'DropOff' | 'PickUp' | 'LinkCode', type: r.type as 'Code' | 'Qr', value: r.value }));
}

export async function history(db: Kysely<Database>, shipmentUid: string) {
  const rows = await db.selectFrom('shipment_transitions').selectAll().where('shipment_uid', '=', shipmentUid).orderBy('seq').execute();
  return rows.map((r) => ({ seq: r.seq, fromState: r.from_state, toState: r.to_state, cause: r.cause, detail: r.detail, at: toApiTime(r.at) ?? '' }));
}

