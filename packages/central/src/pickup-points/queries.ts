// Read model of pick up points and their lockers for the tenant API. Every query is scoped to the
// calling tenant: a PUP the tenant does not manage is indistinguishable from an unknown one.
// The same fixed SQL texts on SQLite and PostgreSQL, prepared once (db/prepared-read.ts).
import type { LockersTable, PupsTable } from '../db/schema';
import type { Db } from '../db/database';
import { itemOrRow, jsonArraySql, jsonQuoteSql, wholeNumberSql, type Engine } from '../db/json-sql';
import { preparedRawReader, preparedReader, sqlitePage, type ReadAll, type ReadRaw } from '../db/prepared-read';
import type { JsonText } from '../http/serializer';
import { ApiError } from '../errors';
import { containsPattern } from '../db/like';

export interface ApiAddress {
  streetName: string;
  mailbox: string;
  city: string;
  countryIso2: string;
}

export interface ApiDimension {
  width: number;
  height: number;
  length: number;
}

export interface PickUpPointItem {
  pupUid: string;
  name: string;
  timeZone?: string;
  locationAddress?: ApiAddress;
  deliveryAddress?: ApiAddress;
  parkingAddress?: ApiAddress | null;
  externalReference?: string;
}

export interface LockerItem {
  pupUid: string;
  lockerUid: string;
  name: string;
  dimension: ApiDimension;
}

export interface LockerKindItem {
  sizeCode: string;
  typeCode: string;
  dimension: ApiDimension;
}

export interface SizeAvailability {
  name: string;
  freeLockers: number;
  occupiedLockers: number;
  totalLockers: number;
}

export interface AvailabilityItem {
  pupUid: string;
  freeLockers: number;
  occupiedLockers: number;
  totalLockers: number;
  availabilityBySize: SizeAvailability[];
}

export interface Page<T> {
  items: T[];
  totalItems: number;
}

export const invalidPupUid = (pupUid: string) => new ApiError('InvalidPupUid', `pupUid ${JSON.stringify(pupUid)} is not a pick up point managed by this client`, 400);

/** Numbers print without a trailing ".0": 60 -> "60", 12.5 -> "12.5". */
const num = (n: number) => String(Number(n));

/** The size name of a locker: its size code, or the dimension as [Height]x[Width]x[Length]. */
export function sizeName(l: { size_code: string | null; width: number; height: number; length: number }): string {
  return l.size_code ?? `${num(l.height)}x${num(l.width)}x${num(l.length)}`;
}

function dimension(l: { width: number; height: number; length: number }): ApiDimension {
  return { width: Number(l.width), height: Number(l.height), length: Number(l.length) };
}

/** Stored addresses (JSON text) may carry latitude/longitude; the PUP responses show only these four. */
function addressFromJson(text: string | null): ApiAddress | null {
  if (text == null) return null;
  let a: Record<string, unknown>;
  try {
    a = JSON.parse(text) as Record<string, unknown>;
  } catch {
    return null;
  }
  if (!a || typeof a !== 'object') return null;
  return { streetName: textOr(a.streetName), mailbox: textOr(a.mailbox), city: textOr(a.city), countryIso2: textOr(a.countryIso2) };
}

/** a stored address field: its text, '' when absent or not a string */
function textOr(v: unknown): string {
  return typeof v === 'string' ? v : '';
}


const SEARCH_COLUMNS = ['p.name', 'p.loc_street_name', 'p.loc_mailbox', 'p.loc_city', 'p.loc_country_iso2'] as const;

const PUP_COLUMNS = 'p.uid, p.name, p.time_zone, p.loc_street_name, p.loc_mailbox, p.loc_city, p.loc_country_iso2, p.delivery_address, p.parking_address, p.external_reference';
// read as arrays (preparedRawReader): the indexes below follow these column lists
const LOCKER_COLUMNS = 'uid, pup_uid, name, width, height, length';
/** the condition "the tenant manages this PUP" on a lockers row; parameters: tenant uid, PUP uid */
const MANAGED = 'exists (select 1 from tenant_pups tp inner join pups p on p.uid = tp.pup_uid where tp.tenant_uid = ? and tp.pup_uid = ?)';
// SQLite's JSON writes a real with 15 significant digits (3.3000000000000003 as 3.3): the
// dimensions go into the array as texts with 17, which every double reads back from exactly
const EXACT_LOCKER_COLUMNS = "uid, pup_uid, name, printf('%!.17g', width), printf('%!.17g', height), printf('%!.17g', length)";
/** a LOCKER_COLUMNS row (uid, pup_uid, name, width, height, length) as the answer's item */
const lockerItem = (l: unknown[]): LockerItem => ({ pupUid: l[1] as string, lockerUid: l[0] as string, name: l[2] as string, dimension: { width: Number(l[3]), height: Number(l[4]), length: Number(l[5]) } });

/**
 * A locker of a page written as its JSON by the database, exactly as the response serializer writes
 * the Locker schema (its keys in its order), and put into the answer as it is (JsonText): one
 * string per row from the database, no row array, object or serializer walk. Only when every
 * dimension is a whole number of at least 1 (written alike everywhere); any other row comes as
 * the JSON array of LOCKER_COLUMNS and is mapped in JavaScript, as every row was (a fraction in
 * JavaScript's number format, a dimension below 1 refused by the schema as before).
 */
function lockerItemSql(engine: Engine): string {
  const [w, h, l] = ['width', 'height', 'length'].map((c) => wholeNumberSql(engine, c));
  const q = (v: string) => jsonQuoteSql(engine, v);
  return (
    `case when ${w!.is} and ${h!.is} and ${l!.is} then ` +
    `format('{"pupUid":%s,"lockerUid":%s,"name":%s,"dimension":{"width":%s,"height":%s,"length":%s}}', ${q('pup_uid')}, ${q('uid')}, ${q('name')}, ${w!.digits}, ${h!.digits}, ${l!.digits}) ` +
    `else ${jsonArraySql(engine, engine === 'sqlite' ? EXACT_LOCKER_COLUMNS : LOCKER_COLUMNS)} end`
  );
}
const lockerTexts = (where: string) => ({
  sorted: `select ${lockerItemSql('sqlite')} from lockers where ${where} and ${MANAGED} order by name, uid`,
  page: `select ${lockerItemSql('postgres')} from lockers where ${where} and ${MANAGED} order by name, uid limit ? offset ?`,
  count: `select count(*) as n from lockers where ${where}`,
});
const LOCKER_TEXTS = { all: lockerTexts('pup_uid = ?'), free: lockerTexts('pup_uid = ? and booked_shipment_uid is null and active = 1') };
/**
 * The PUP's lockers grouped by kind, with how many of each are in service and how many of those are
 * free: a few rows instead of one per locker (the answers aggregate them anyway). A kind whose
 * lockers are all out of service still comes (n = 0): rows found mean the PUP is managed.
 */
const LOCKER_GROUPS = `select size_code, type_code, width, height, length, sum(case when active <> 0 then 1 else 0 end) as n, sum(case when active <> 0 and booked_shipment_uid is null then 1 else 0 end) as free from lockers where pup_uid = ? and ${MANAGED} group by size_code, type_code, width, height, length`;

type LockerGroup = Pick<LockersTable, 'size_code' | 'type_code' | 'width' | 'height' | 'length'> & { n: number; free: number };

type PupRow = Pick<PupsTable, 'uid' | 'name' | 'time_zone' | 'loc_street_name' | 'loc_mailbox' | 'loc_city' | 'loc_country_iso2' | 'delivery_address' | 'parking_address' | 'external_reference'>;


/**
 * The total of a paged listing without counting when the page tells it: a page that is not full
 * (and not empty) is the last one, so the total is its offset plus its rows; on the first page
 * that includes "no rows at all". Only a full page, or an empty page past the first, needs the
 * COUNT (the rows beyond it, or where the end is).
 */
async function pageTotal(offset: number, pageSize: number, rows: number, count: () => Promise<number>): Promise<number> {
  if (rows < pageSize && (rows > 0 || offset === 0)) return offset + rows;
  return count();
}

/** The SQL of the PUP listing, one text per shape of request (pupUid given or not, number of search terms). */
const pupTexts = new Map<string, { page: string; sorted: string; count: string }>();

function pupListTexts(withPup: boolean, terms: number): { page: string; sorted: string; count: string } {
  const key = `${withPup ? 1 : 0}/${terms}`;
  let t = pupTexts.get(key);
  if (!t) {
    let where = 'tp.tenant_uid = ?';
    if (withPup) where += ' and p.uid = ?';
    // Every whitespace-separated term must occur (case-insensitively) in the name or the address.
    const term = `(${SEARCH_COLUMNS.map((c) => `lower(coalesce(${c}, '')) like ? escape '\\'`).join(' or ')})`;
    for (let i = 0; i < terms; i++) where += ` and ${term}`;
    const from = `from pups p inner join tenant_pups tp on tp.pup_uid = p.uid where ${where}`;
    const sorted = `select ${PUP_COLUMNS} ${from} order by p.name, p.uid`;
    t = { page: `${sorted} limit ? offset ?`, sorted, count: `select count(*) as n ${from}` };
    pupTexts.set(key, t);
  }
  return t;
}

export class PickupPointQueries {
  private readonly read: ReadAll;
  private readonly readRaw: ReadRaw;

  constructor(private readonly db: Db) {
    this.read = preparedReader(db, { threads: true });
    this.readRaw = preparedRawReader(db, { threads: true });
  }

  /** Throws InvalidPupUid unless the tenant manages the PUP (unknown and foreign PUPs answer alike). */
  async assertManaged(tenantUid: string, pupUid: string): Promise<void> {
    const rows = await this.read('select p.uid from tenant_pups tp inner join pups p on p.uid = tp.pup_uid where tp.tenant_uid = ? and tp.pup_uid = ?', [tenantUid, pupUid]);
    if (rows.length === 0) throw invalidPupUid(pupUid);
  }

  async listPickUpPoints(
    tenantUid: string,
    q: { pageNo: number; pageSize: number; pupUid?: string | null; includeDetails?: boolean | null; searchText?: string | null },
  ): Promise<Page<PickUpPointItem>> {
    const terms = (q.searchText ?? '').split(/\s+/).filter(Boolean).slice(0, 10);
    const texts = pupListTexts(!!q.pupUid, terms.length);
    const params: unknown[] = [tenantUid];
    if (q.pupUid) params.push(q.pupUid);
    for (const term of terms) {
      const pattern = containsPattern(term);
      for (let i = 0; i < SEARCH_COLUMNS.length; i++) params.push(pattern);
    }
    const offset = (q.pageNo - 1) * q.pageSize;
    let rows: PupRow[];
    let known: number | undefined;
    if (this.db.engine === 'sqlite') ({ rows, total: known } = await sqlitePage<PupRow>(this.db, texts.sorted, params, offset, q.pageSize));
    else rows = await this.read<PupRow>(texts.page, [...params, q.pageSize, offset]);
    const total = known ?? (await pageTotal(offset, q.pageSize, rows.length, async () => Number((await this.read<{ n: number }>(texts.count, params))[0]!.n)));
    const items = rows.map((p): PickUpPointItem => {
      const item: PickUpPointItem = { pupUid: p.uid, name: p.name };
      if (p.time_zone) item.timeZone = p.time_zone;
      if (q.includeDetails) {
        const location: ApiAddress = {
          streetName: p.loc_street_name ?? '',
          mailbox: p.loc_mailbox ?? '',
          city: p.loc_city ?? '',
          countryIso2: p.loc_country_iso2 ?? '',
        };
        item.locationAddress = location;
        item.deliveryAddress = addressFromJson(p.delivery_address) ?? location;
        item.parkingAddress = addressFromJson(p.parking_address);
        item.externalReference = p.external_reference ?? ''; // a string, as the API document types it ("" when none was provisioned)
      }
      return item;
    });
    return { items, totalItems: total };
  }

  /**
   * A page of the lockers of a PUP the tenant manages. The tenant's right is part of the page's
   * statement (one round trip on PostgreSQL): lockers belong to an existing PUP, so rows found
   * mean the PUP is managed; only an empty page asks assertManaged (InvalidPupUid, or truly none).
   */
  private async pageOfLockers(tenantUid: string, pupUid: string, onlyFree: boolean, pageNo: number, pageSize: number): Promise<Page<LockerItem | JsonText>> {
    const texts = onlyFree ? LOCKER_TEXTS.free : LOCKER_TEXTS.all;
    const offset = (pageNo - 1) * pageSize;
    let rows: string[];
    let known: number | undefined;
    // SQLite: the sorted read with a literal LIMIT (sqlitePage), which also knows the total when
    // the PUP's lockers end before that limit; each row its one text (lockerItemSql)
    if (this.db.engine === 'sqlite') ({ rows, total: known } = await sqlitePage<string>(this.db, texts.sorted, [pupUid, tenantUid, pupUid], offset, pageSize, 'pluck'));
    else rows = (await this.readRaw(texts.page, [pupUid, tenantUid, pupUid, pageSize, offset])).map((r) => r[0] as string);
    if (rows.length === 0) await this.assertManaged(tenantUid, pupUid);
    const total = known ?? (await pageTotal(offset, pageSize, rows.length, async () => Number((await this.read<{ n: number }>(texts.count, [pupUid]))[0]!.n)));
    const items = new Array<LockerItem | JsonText>(rows.length);
    for (let i = 0; i < rows.length; i++) items[i] = itemOrRow(rows[i]!, lockerItem);
    return { items, totalItems: total };
  }

  /** All lockers of a managed PUP (in and out of service), by name. */
  async listLockers(tenantUid: string, q: { pupUid: string; pageNo: number; pageSize: number }): Promise<Page<LockerItem | JsonText>> {
    return this.pageOfLockers(tenantUid, q.pupUid, false, q.pageNo, q.pageSize);
  }

  /** Lockers that can be booked now: in service and holding no shipment. */
  async listAvailableLockers(tenantUid: string, q: { pupUid: string; pageNo: number; pageSize: number }): Promise<Page<LockerItem | JsonText>> {
    return this.pageOfLockers(tenantUid, q.pupUid, true, q.pageNo, q.pageSize);
  }

  /**
   * The kinds of lockers in service of a PUP the tenant manages (InvalidPupUid otherwise), each with
   * how many are in service and free; as pageOfLockers, one statement when the PUP has lockers.
   */
  private async lockerGroups(tenantUid: string, pupUid: string): Promise<LockerGroup[]> {
    const rows = await this.readRaw(LOCKER_GROUPS, [pupUid, tenantUid, pupUid]);
    if (rows.length === 0) await this.assertManaged(tenantUid, pupUid);
    // LOCKER_GROUPS: size_code, type_code, width, height, length, n, free
    const out: LockerGroup[] = [];
    for (const r of rows) {
      const n = Number(r[5]);
      if (n > 0) out.push({ size_code: r[0] as string | null, type_code: r[1] as string, width: Number(r[2]), height: Number(r[3]), length: Number(r[4]), n, free: Number(r[6]) });
    }
    return out;
  }

  /**
   * Availability of one managed PUP. Only lockers in service count: free = not booked,
   * occupied = booked, total = free + occupied. Sizes are ordered by volume, then name.
   */
  async availability(tenantUid: string, pupUid: string): Promise<AvailabilityItem> {
    const groups = await this.lockerGroups(tenantUid, pupUid);
    const bySize = new Map<string, SizeAvailability & { volume: number }>();
    let free = 0;
    let total = 0;
    for (const g of groups) {
      const name = sizeName(g);
      const s = bySize.get(name) ?? { name, freeLockers: 0, occupiedLockers: 0, totalLockers: 0, volume: Number.POSITIVE_INFINITY };
      s.freeLockers += g.free;
      s.occupiedLockers += g.n - g.free;
      s.totalLockers += g.n;
      s.volume = Math.min(s.volume, g.width * g.height * g.length);
      bySize.set(name, s);
      free += g.free;
      total += g.n;
    }
    const sizes = [...bySize.values()].sort((a, b) => a.volume - b.volume || a.name.localeCompare(b.name)).map(({ volume: _v, ...s }) => s);
    return { pupUid, freeLockers: free, occupiedLockers: total - free, totalLockers: total, availabilityBySize: sizes };
  }

  /** Distinct (sizeCode, typeCode, dimension) of the PUP's lockers in service, by volume. */
  async lockerKinds(tenantUid: string, pupUid: string): Promise<LockerKindItem[]> {
    const groups = await this.lockerGroups(tenantUid, pupUid);
    const kinds = new Map<string, LockerKindItem>();
    for (const l of groups) {
      const k: LockerKindItem = { sizeCode: sizeName(l), typeCode: l.type_code, dimension: dimension(l) };
      kinds.set(JSON.stringify([k.sizeCode, k.typeCode, k.dimension.width, k.dimension.height, k.dimension.length]), k);
    }
    return [...kinds.values()].sort((a, b) => kindVolume(a) - kindVolume(b) || a.sizeCode.localeCompare(b.sizeCode) || a.typeCode.localeCompare(b.typeCode));
  }
}

function kindVolume(k: LockerKindItem): number {
  return k.dimension.width * k.dimension.height * k.dimension.length;
}
