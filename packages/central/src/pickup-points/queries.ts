// Read model of pick up points and their lockers for the tenant API. Every query is scoped to the
// calling tenant: a PUP the tenant does not manage is indistinguishable from an unknown one.
// One Kysely code path for SQLite and PostgreSQL.
import { sql, type Kysely } from 'kysely';
import type { Database, LockersTable } from '../db/schema';
import { ApiError } from '../errors';
import { fromBool } from '../db/database';
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
  const s = (v: unknown) => (typeof v === 'string' ? v : '');
  return { streetName: s(a.streetName), mailbox: s(a.mailbox), city: s(a.city), countryIso2: s(a.countryIso2) };
}


const SEARCH_COLUMNS = ['pups.name', 'pups.loc_street_name', 'pups.loc_mailbox', 'pups.loc_city', 'pups.loc_country_iso2'] as const;

export class PickupPointQueries {
  constructor(private readonly db: Kysely<Database>) {}

  /** Throws InvalidPupUid unless the tenant manages the PUP (unknown and foreign PUPs answer alike). */
  async assertManaged(tenantUid: string, pupUid: string): Promise<void> {
    const row = await this.db
      .selectFrom('tenant_pups')
      .innerJoin('pups', 'pups.uid', 'tenant_pups.pup_uid')
      .select('pups.uid')
      .where('tenant_pups.tenant_uid', '=', tenantUid)
      .where('tenant_pups.pup_uid', '=', pupUid)
      .executeTakeFirst();
    if (!row) throw invalidPupUid(pupUid);
  }

  async listPickUpPoints(
    tenantUid: string,
    q: { pageNo: number; pageSize: number; pupUid?: string | null; includeDetails?: boolean | null; searchText?: string | null },
  ): Promise<Page<PickUpPointItem>> {
    let base = this.db.selectFrom('pups').innerJoin('tenant_pups', 'tenant_pups.pup_uid', 'pups.uid').where('tenant_pups.tenant_uid', '=', tenantUid);
    if (q.pupUid) base = base.where('pups.uid', '=', q.pupUid);
    // Every whitespace-separated term must occur (case-insensitively) in the name or the address.
    const terms = (q.searchText ?? '').split(/\s+/).filter(Boolean).slice(0, 10);
    for (const term of terms) {
      const pattern = containsPattern(term);
      base = base.where((eb) => eb.or(SEARCH_COLUMNS.map((c) => sql<boolean>`lower(coalesce(${sql.ref(c)}, '')) like ${pattern} escape '\\'`)));
    }
    // One query for the page and the total (a window count); a second only for a page past the end.
    const rows = await base
      .selectAll('pups')
      .select(sql<number>`count(*) over ()`.as('total_count'))
      .orderBy('pups.name')
      .orderBy('pups.uid')
      .limit(q.pageSize)
      .offset((q.pageNo - 1) * q.pageSize)
      .execute();
    const n = rows.length ? rows[0]!.total_count : (await base.select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow()).n;
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
    return { items, totalItems: Number(n) };
  }

  private lockersOf(pupUid: string) {
    return this.db.selectFrom('lockers').where('pup_uid', '=', pupUid);
  }

  private async pageOfLockers(pupUid: string, onlyFree: boolean, pageNo: number, pageSize: number): Promise<Page<LockerItem>> {
    let base = this.lockersOf(pupUid);
    if (onlyFree) base = base.where('booked_shipment_uid', 'is', null).where('active', '=', 1);
    const rows = await base
      .select(['uid', 'pup_uid', 'name', 'width', 'height', 'length'])
      .select(sql<number>`count(*) over ()`.as('total_count'))
      .orderBy('name')
      .orderBy('uid')
      .limit(pageSize)
      .offset((pageNo - 1) * pageSize)
      .execute();
    const n = rows.length ? rows[0]!.total_count : (await base.select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow()).n;
    return { items: rows.map((l) => ({ pupUid: l.pup_uid, lockerUid: l.uid, name: l.name, dimension: dimension(l) })), totalItems: Number(n) };
  }

  /** All lockers of a managed PUP (in and out of service), by name. */
  async listLockers(tenantUid: string, q: { pupUid: string; pageNo: number; pageSize: number }): Promise<Page<LockerItem>> {
    await this.assertManaged(tenantUid, q.pupUid);
    return this.pageOfLockers(q.pupUid, false, q.pageNo, q.pageSize);
  }

  /** Lockers that can be booked now: in service and holding no shipment. */
  async listAvailableLockers(tenantUid: string, q: { pupUid: string; pageNo: number; pageSize: number }): Promise<Page<LockerItem>> {
    await this.assertManaged(tenantUid, q.pupUid);
    return this.pageOfLockers(q.pupUid, true, q.pageNo, q.pageSize);
  }

  private async activeLockers(pupUid: string): Promise<Pick<LockersTable, 'size_code' | 'type_code' | 'width' | 'height' | 'length' | 'booked_shipment_uid'>[]> {
    const rows = await this.lockersOf(pupUid).select(['size_code', 'type_code', 'width', 'height', 'length', 'booked_shipment_uid', 'active']).execute();
    return rows.filter((r) => fromBool(r.active)).map((r) => ({ ...r, width: Number(r.width), height: Number(r.height), length: Number(r.length) }));
  }

  /**
   * Availability of one managed PUP. Only lockers in service count: free = not booked,
   * occupied = booked, total = free + occupied. Sizes are ordered by volume, then name.
   */
  async availability(tenantUid: string, pupUid: string): Promise<AvailabilityItem> {
    await this.assertManaged(tenantUid, pupUid);
    const lockers = await this.activeLockers(pupUid);
    const bySize = new Map<string, SizeAvailability & { volume: number }>();
    let free = 0;
    for (const l of lockers) {
      const name = sizeName(l);
      const s = bySize.get(name) ?? { name, freeLockers: 0, occupiedLockers: 0, totalLockers: 0, volume: Number.POSITIVE_INFINITY };
      const isFree = l.booked_shipment_uid == null;
      if (isFree) s.freeLockers++;
      else s.occupiedLockers++;
      s.totalLockers++;
      s.volume = Math.min(s.volume, l.width * l.height * l.length);
      bySize.set(name, s);
      if (isFree) free++;
    }
    const sizes = [...bySize.values()].sort((a, b) => a.volume - b.volume || a.name.localeCompare(b.name)).map(({ volume: _v, ...s }) => s);
    return { pupUid, freeLockers: free, occupiedLockers: lockers.length - free, totalLockers: lockers.length, availabilityBySize: sizes };
  }

  /** Distinct (sizeCode, typeCode, dimension) of the PUP's lockers in service, by volume. */
  async lockerKinds(tenantUid: string, pupUid: string): Promise<LockerKindItem[]> {
    await this.assertManaged(tenantUid, pupUid);
    const lockers = await this.activeLockers(pupUid);
    const kinds = new Map<string, LockerKindItem>();
    for (const l of lockers) {
      const k: LockerKindItem = { sizeCode: sizeName(l), typeCode: l.type_code, dimension: dimension(l) };
      kinds.set(JSON.stringify([k.sizeCode, k.typeCode, k.dimension.width, k.dimension.height, k.dimension.length]), k);
    }
    const vol = (k: LockerKindItem) => k.dimension.width * k.dimension.height * k.dimension.length;
    return [...kinds.values()].sort((a, b) => vol(a) - vol(b) || a.sizeCode.localeCompare(b.sizeCode) || a.typeCode.localeCompare(b.typeCode));
  }
}
