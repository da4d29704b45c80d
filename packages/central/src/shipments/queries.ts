// Read side: the GetShipments family, objects, swaps, access codes, history. Every query is
// scoped by tenant; the indexes of migration 200 serve each filter and sort.
import type BetterSqlite3 from 'better-sqlite3';
import type { Kysely } from 'kysely';
import { sqliteStatement } from './sqlq';
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

export async function listShipments(db: Kysely<Database>, f: ShipmentFilter, sqlite?: BetterSqlite3.Database) {
  let base = db.selectFrom('shipments as s').where('s.tenant_uid', '=', f.tenantUid);
  if (f.typeCode) base = base.where('s.type_code', '=', f.typeCode);
  if (f.shipmentUid) {
    base = base.where('s.uid', '=', f.shipmentUid);
  } else {
    if (f.active != null) base = base.where('s.active', '=', f.active ? 1 : 0);
    if (f.states && f.states.length) base = base.where('s.state_code', 'in', f.states);
  }
  if (f.userUid) {
    const u = f.userUid;
    base = base.where((eb) => eb.or([eb('s.from_user_uid', '=', u), eb('s.to_user_uid', '=', u)]));
  }
  if (f.bookedPupUid) base = base.where('s.pup_uid', '=', f.bookedPupUid).where('s.active', '=', 1);
  if (f.updatedSince) base = base.where('s.updated_at', '>=', f.updatedSince);

  let cache: TotalsCache | undefined;
  if (sqlite) {
    cache = totalsCaches.get(sqlite);
    if (!cache) totalsCaches.set(sqlite, (cache = new TotalsCache(sqlite)));
  }
  const key = JSON.stringify([f.tenantUid, f.typeCode, f.shipmentUid ?? null, f.active ?? null, f.states ?? null, f.userUid ?? null, f.bookedPupUid ?? null, f.updatedSince ?? null]);
  const cached = cache?.check(key);
  let totalItems: number;
  if (cached?.total !== undefined) {
    totalItems = cached.total;
  } else {
    const countRow = await base.select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirst();
    totalItems = Number(countRow?.n ?? 0);
    if (cached) cache!.store(cached.version, key, totalItems);
  }
  const offset = (f.pageNo - 1) * f.pageSize;
  if (totalItems === 0 || offset >= totalItems) return { totalItems, items: [] };

  const col = f.sortBy.startsWith('Created') ? 's.created_at' : 's.updated_at';
  const dir = f.sortBy.endsWith('Asc') ? 'asc' : 'desc';
  const rows = await base
    .leftJoin('accounts as fa', 'fa.uid', 's.from_user_uid')
    .leftJoin('accounts as ta', 'ta.uid', 's.to_user_uid')
    .leftJoin('pups as p', 'p.uid', 's.pup_uid')
    .leftJoin('lockers as l', 'l.uid', 's.locker_uid')
    .select([
      's.uid',
      's.created_at',
      's.type_code',
      's.state_start',
      's.state_code',
      's.active',
      's.reference_no',
      's.reference_case_no',
      's.description',
      's.from_user_uid',
      's.to_user_uid',
      's.from_address',
      's.to_address',
      's.swaps_shipment_uid',
      's.pup_uid',
      'fa.user_name as from_name',
      'ta.user_name as to_name',
      'p.name as pup_name',
      'l.name as locker_name',
    ])
    .orderBy(col, dir)
    .orderBy('s.uid', dir)
    .limit(f.pageSize)
    .offset(offset)
    .execute();

  const items = rows.map((r) => {
    const active = !!r.active;
    const item: Record<string, unknown> = {
      shipmentUid: r.uid,
      dateCreated: toApiTime(r.created_at),
      typeCode: r.type_code,
      stateStart: toApiTime(r.state_start),
      stateCode: r.state_code,
    };
    if (r.reference_no != null) item.referenceNo = r.reference_no;
    if (r.reference_case_no != null) item.referenceCaseNo = r.reference_case_no;
    if (r.description != null) item.description = r.description;
    if (r.from_user_uid) {
      item.fromUserUid = r.from_user_uid;
      if (r.from_name != null) item.fromUserName = r.from_name;
    }
    const fromAddress = parseAddress(r.from_address);
    if (fromAddress) item.fromAddress = fromAddress;
    if (r.to_user_uid) {
      item.toUserUid = r.to_user_uid;
      if (r.to_name != null) item.toUserName = r.to_name;
    }
    const toAddress = parseAddress(r.to_address);
    if (toAddress) item.toAddress = toAddress;
    item.swapsShipmentUid = r.swaps_shipment_uid ?? null;
    // The current booking: only active shipments hold (or wait for) a locker.
    item.bookedPupUid = active ? r.pup_uid : null;
    item.bookedPupName = active ? (r.pup_name ?? null) : null;
    item.bookedLockerName = active ? (r.locker_name ?? null) : null;
    return item;
  });
  return { totalItems, items };
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

