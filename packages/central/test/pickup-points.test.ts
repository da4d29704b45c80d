import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { L, M, PUP_A1, PUP_A2, PUP_B1, S, UNKNOWN_UID, XL, testSite } from './support/fixtures';
import { sizeName } from '../src/pickup-points/queries';

const GET_PUPS = '/v1/PickupPoints/GetPickUpPoints';
const AVAIL = '/v1/PickupPoints/GetPickUpPointAvailability';
const LOCKERS = '/v1/PickupPoints/GetLockers';
const FREE = '/v1/PickupPoints/GetAvailableLockers';
const KINDS = '/v1/PickupPoints/GetLockerKinds';

const A1_LOCKERS = ['A1-01', 'A1-02', 'A1-03', 'A1-04', 'A1-05', 'A1-06', 'A1-07'];

describe('sizeName', () => {
  it('uses the size code, else [Height]x[Width]x[Length]', () => {
    expect(sizeName({ size_code: 'M', width: 1, height: 2, length: 3 })).toBe('M');
    expect(sizeName({ size_code: null, width: 40, height: 10, length: 60 })).toBe('10x40x60');
    expect(sizeName({ size_code: null, width: 40.5, height: 10, length: 60 })).toBe('10x40.5x60');
  });
});

describeEngines('PickupPoints API', (engine) => {
  let t: TestService;
  beforeAll(async () => {
    t = await createTestService(engine);
  });
  afterAll(async () => t?.close());

  const book = (lockerUid: string, shipmentUid: string | null) =>
    t.ctx.db.kysely.updateTable('lockers').set({ booked_shipment_uid: shipmentUid }).where('uid', '=', lockerUid).execute();

  describe('GetPickUpPoints', () => {
    it("lists only the caller's PUPs, by name, without details by default", async () => {
      const res = await t.post(GET_PUPS, { pageNo: 1, pageSize: 10 });
      expect(res.status).toBe(200);
      expect(res.body).toEqual({
        success: true,
        error: null,
        message: null,
        items: [
          { pupUid: PUP_A2, name: 'Alpha Harbour', timeZone: 'Europe/Amsterdam' },
          { pupUid: PUP_A1, name: 'Alpha Station', timeZone: 'Europe/Amsterdam' },
        ],
        pageNo: 1,
        pageSize: 10,
        totalItems: 2,
        totalPages: 1,
      });
    });

    it('includeDetails=true adds the four address fields and the external reference (no lat/long)', async () => {
      const res = await t.post(GET_PUPS, { pageNo: 1, pageSize: 10, includeDetails: true, pupUid: PUP_A1 });
      expect(res.status).toBe(200);
      expect(res.body.items).toEqual([
        {
          pupUid: PUP_A1,
          name: 'Alpha Station',
          timeZone: 'Europe/Amsterdam',
          locationAddress: { streetName: 'Stationsplein 1', mailbox: '', city: 'Amsterdam', countryIso2: 'NL' },
          deliveryAddress: { streetName: 'Stationsplein 1', mailbox: 'Dock B', city: 'Amsterdam', countryIso2: 'NL' },
          parkingAddress: { streetName: 'Prins Hendrikkade 10', mailbox: '', city: 'Amsterdam', countryIso2: 'NL' },
          externalReference: 'EXT-A1',
        },
      ]);
    });

    it('includeDetails: a PUP without parking address shows null; the delivery address defaults to the location', async () => {
      const res = await t.post(GET_PUPS, { pageNo: 1, pageSize: 10, includeDetails: true, pupUid: PUP_A2 });
      const [item] = res.body.items;
      expect(item.parkingAddress).toBeNull();
      expect(item.deliveryAddress).toEqual({ streetName: 'Piet Heinkade 55', mailbox: '', city: 'Amsterdam', countryIso2: 'NL' });
      expect(item.externalReference).toBe('EXT-A2');
    });

    it('includeDetails: a PUP provisioned without an external reference shows "" (a string, as the API document types it)', async () => {
      await t.ctx.db.kysely.updateTable('pups').set({ external_reference: null }).where('uid', '=', PUP_A2).execute();
      try {
        const res = await t.post(GET_PUPS, { pageNo: 1, pageSize: 10, includeDetails: true, pupUid: PUP_A2 });
        expect(res.body.items[0].externalReference).toBe('');
      } finally {
        await t.ctx.db.kysely.updateTable('pups').set({ external_reference: 'EXT-A2' }).where('uid', '=', PUP_A2).execute();
      }
    });

    it('includeDetails=false (explicit) omits the details', async () => {
      const res = await t.post(GET_PUPS, { pageNo: 1, pageSize: 10, includeDetails: false });
      for (const item of res.body.items) expect(Object.keys(item).sort()).toEqual(['name', 'pupUid', 'timeZone']);
    });

    it('pages with totals independent of the page', async () => {
      const p1 = await t.post(GET_PUPS, { pageNo: 1, pageSize: 1 });
      const p2 = await t.post(GET_PUPS, { pageNo: 2, pageSize: 1 });
      const p3 = await t.post(GET_PUPS, { pageNo: 3, pageSize: 1 });
      expect(p1.body.items.map((i: any) => i.pupUid)).toEqual([PUP_A2]);
      expect(p2.body.items.map((i: any) => i.pupUid)).toEqual([PUP_A1]);
      expect(p3.body.items).toEqual([]);
      for (const p of [p1, p2, p3]) expect(p.body).toMatchObject({ pageSize: 1, totalItems: 2, totalPages: 2 });
      expect(p3.body.pageNo).toBe(3);
    });

    it('searchText matches name or address, case-insensitively, every word', async () => {
      const names = async (searchText: string) => (await t.post(GET_PUPS, { pageNo: 1, pageSize: 10, searchText })).body.items.map((i: any) => i.name);
      expect(await names('station')).toEqual(['Alpha Station']);
      expect(await names('HARBOUR')).toEqual(['Alpha Harbour']);
      expect(await names('piet heinkade')).toEqual(['Alpha Harbour']); // street
      expect(await names('amsterdam')).toEqual(['Alpha Harbour', 'Alpha Station']); // city
      expect(await names('alpha stationsplein')).toEqual(['Alpha Station']);
      expect(await names('Beta')).toEqual([]); // tenant-b's PUP is never found by tenant-a
      expect(await names('%')).toEqual([]); // wildcards are literal
      expect(await names('_')).toEqual([]);
      expect(await names('   ')).toEqual(['Alpha Harbour', 'Alpha Station']);
      const res = await t.post(GET_PUPS, { pageNo: 1, pageSize: 10, searchText: 'amsterdam' });
      expect(res.body.totalItems).toBe(2);
    });

    it('pupUid filter: own PUP found; unknown and foreign PUPs give the same empty page', async () => {
      const own = await t.post(GET_PUPS, { pageNo: 1, pageSize: 10, pupUid: PUP_A2 });
      expect(own.body.items.map((i: any) => i.pupUid)).toEqual([PUP_A2]);
      const foreign = await t.post(GET_PUPS, { pageNo: 1, pageSize: 10, pupUid: PUP_B1 });
      const unknown = await t.post(GET_PUPS, { pageNo: 1, pageSize: 10, pupUid: UNKNOWN_UID });
      for (const r of [foreign, unknown]) {
        expect(r.status).toBe(200);
        expect(r.body).toMatchObject({ success: true, items: [], totalItems: 0, totalPages: 0 });
      }
    });

    it('accepts field names in any case (PageNo, PupUid, IncludeDetails)', async () => {
      const res = await t.post(GET_PUPS, { PageNo: 1, PageSize: 10, PupUid: PUP_A1, IncludeDetails: true });
      expect(res.status).toBe(200);
      expect(res.body.items).toHaveLength(1);
      expect(res.body.items[0].externalReference).toBe('EXT-A1');
    });

    it('tenant isolation: tenant-b sees only its own PUP', async () => {
      const tok = await t.token('tenant-b');
      const res = await t.post(GET_PUPS, { pageNo: 1, pageSize: 500 }, tok);
      expect(res.body.items.map((i: any) => i.pupUid)).toEqual([PUP_B1]);
      expect(res.body.totalItems).toBe(1);
    });

    it.each([
      [{ pageNo: 0, pageSize: 10 }, 'pageNo'],
      [{ pageNo: 1, pageSize: 0 }, 'pageSize'],
      [{ pageNo: 1, pageSize: 501 }, 'pageSize'],
      [{ pageNo: 1.5, pageSize: 10 }, 'pageNo'],
      [{ pageSize: 10 }, 'pageNo'],
      [{ pageNo: 1, pageSize: 10, includeDetails: 'yes' }, 'includeDetails'],
    ])('rejects %o naming %s', async (body, field) => {
      const res = await t.post(GET_PUPS, body);
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ success: false, error: 'InvalidRequest' });
      expect(res.body.message).toContain(field);
    });

    it('refuses a NUL character in a string (PostgreSQL cannot store it) as InvalidRequest naming the field', async () => {
      for (const [body, field] of [
        [{ pageNo: 1, pageSize: 10, searchText: 'a\u0000' }, 'searchText'],
        [{ pageNo: 1, pageSize: 10, pupUid: `${PUP_A1}\u0000` }, 'pupUid'],
      ] as const) {
        const res = await t.post(GET_PUPS, body);
        expect(res.status).toBe(400);
        expect(res.body).toMatchObject({ success: false, error: 'InvalidRequest', message: expect.stringContaining(field) });
      }
      const res = await t.post(LOCKERS, { pageNo: 1, pageSize: 10, pupUid: 'x\u0000' });
      expect(res.body).toMatchObject({ success: false, error: 'InvalidRequest', message: expect.stringContaining('pupUid') });
    });

    it('needs a token', async () => {
      const res = await t.post(GET_PUPS, { pageNo: 1, pageSize: 10 }, null);
      expect(res.status).toBe(401);
      expect(res.body).toMatchObject({ success: false, error: 'Unauthorized' });
    });
  });

  describe('GetLockers / GetAvailableLockers', () => {
    it('lists all lockers of a PUP with dimensions, paginated', async () => {
      const res = await t.post(LOCKERS, { pageNo: 1, pageSize: 500, pupUid: PUP_A1 });
      expect(res.status).toBe(200);
      expect(res.body.items.map((l: any) => l.name)).toEqual(A1_LOCKERS);
      expect(res.body.items[0]).toEqual({ pupUid: PUP_A1, lockerUid: 'a1000000000000000000000000000001', name: 'A1-01', dimension: S });
      expect(res.body.items[6].dimension).toEqual(XL);
      expect(res.body).toMatchObject({ totalItems: 7, totalPages: 1, pageNo: 1, pageSize: 500 });
      const p2 = await t.post(LOCKERS, { pageNo: 2, pageSize: 3, pupUid: PUP_A1 });
      expect(p2.body.items.map((l: any) => l.name)).toEqual(['A1-04', 'A1-05', 'A1-06']);
      expect(p2.body).toMatchObject({ totalItems: 7, totalPages: 3, pageNo: 2, pageSize: 3 });
    });

    it('GetAvailableLockers excludes booked and out-of-service lockers; GetLockers still lists them', async () => {
      await book('a1000000000000000000000000000002', 'ship0000000000000000000000000001');
      await book('a1000000000000000000000000000005', 'ship0000000000000000000000000002');
      await t.ctx.db.kysely.updateTable('lockers').set({ active: 0 }).where('uid', '=', 'a1000000000000000000000000000007').execute();
      try {
        const free = await t.post(FREE, { pageNo: 1, pageSize: 500, pupUid: PUP_A1 });
        expect(free.status).toBe(200);
        expect(free.body.items.map((l: any) => l.name)).toEqual(['A1-01', 'A1-03', 'A1-04', 'A1-06']);
        expect(free.body).toMatchObject({ totalItems: 4, totalPages: 1 });
        const paged2 = await t.post(FREE, { pageNo: 2, pageSize: 3, pupUid: PUP_A1 });
        expect(paged2.body.items.map((l: any) => l.name)).toEqual(['A1-06']);
        expect(paged2.body).toMatchObject({ totalItems: 4, totalPages: 2 });
        const all = await t.post(LOCKERS, { pageNo: 1, pageSize: 500, pupUid: PUP_A1 });
        expect(all.body.items.map((l: any) => l.name)).toEqual(A1_LOCKERS);
      } finally {
        await book('a1000000000000000000000000000002', null);
        await book('a1000000000000000000000000000005', null);
        await t.ctx.db.kysely.updateTable('lockers').set({ active: 1 }).where('uid', '=', 'a1000000000000000000000000000007').execute();
      }
    });

    it.each([LOCKERS, FREE, AVAIL])('%s: unknown and foreign PUPs both answer 400 InvalidPupUid', async (p) => {
      for (const pupUid of [PUP_B1, UNKNOWN_UID]) {
        const res = await t.post(p, { pageNo: 1, pageSize: 10, pupUid });
        expect(res.status).toBe(400);
        expect(res.body).toEqual({ success: false, error: 'InvalidPupUid', message: expect.stringContaining(pupUid) });
      }
      // and tenant-b can read its own PUP through the same call
      const own = await t.post(p, { pageNo: 1, pageSize: 10, pupUid: PUP_B1 }, await t.token('tenant-b'));
      expect(own.status).toBe(200);
    });

    it.each([LOCKERS, FREE, AVAIL])('%s: pupUid is required', async (p) => {
      const res = await t.post(p, { pageNo: 1, pageSize: 10 });
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ success: false, error: 'InvalidRequest', message: expect.stringContaining('pupUid') });
    });
  });

  describe('GetPickUpPointAvailability', () => {
    it('counts free, occupied and total, overall and by size (size code or HxWxL)', async () => {
      const res = await t.post(AVAIL, { pageNo: 1, pageSize: 10, pupUid: PUP_A1 });
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ success: true, pageNo: 1, pageSize: 10, totalItems: 1, totalPages: 1 });
      expect(res.body.items).toEqual([
        {
          pupUid: PUP_A1,
          freeLockers: 7,
          occupiedLockers: 0,
          totalLockers: 7,
          availabilityBySize: [
            { name: 'S', freeLockers: 2, occupiedLockers: 0, totalLockers: 2 },
            { name: 'M', freeLockers: 3, occupiedLockers: 0, totalLockers: 3 },
            { name: 'L', freeLockers: 1, occupiedLockers: 0, totalLockers: 1 },
            { name: '60x60x60', freeLockers: 1, occupiedLockers: 0, totalLockers: 1 },
          ],
        },
      ]);
    });

    it('counts booked lockers as occupied', async () => {
      await book('a1000000000000000000000000000003', 'ship0000000000000000000000000003');
      await book('a1000000000000000000000000000007', 'ship0000000000000000000000000004');
      try {
        const res = await t.post(AVAIL, { pageNo: 1, pageSize: 10, pupUid: PUP_A1 });
        const [item] = res.body.items;
        expect(item).toMatchObject({ freeLockers: 5, occupiedLockers: 2, totalLockers: 7 });
        expect(item.availabilityBySize).toContainEqual({ name: 'M', freeLockers: 2, occupiedLockers: 1, totalLockers: 3 });
        expect(item.availabilityBySize).toContainEqual({ name: '60x60x60', freeLockers: 0, occupiedLockers: 1, totalLockers: 1 });
        // the other PUP of the tenant is untouched
        const a2 = await t.post(AVAIL, { pageNo: 1, pageSize: 10, pupUid: PUP_A2 });
        expect(a2.body.items[0]).toMatchObject({ pupUid: PUP_A2, freeLockers: 3, occupiedLockers: 0, totalLockers: 3 });
      } finally {
        await book('a1000000000000000000000000000003', null);
        await book('a1000000000000000000000000000007', null);
      }
    });

    it('page 2 of the single-item result is empty, totals unchanged', async () => {
      const res = await t.post(AVAIL, { pageNo: 2, pageSize: 10, pupUid: PUP_A1 });
      expect(res.body).toMatchObject({ success: true, items: [], pageNo: 2, totalItems: 1, totalPages: 1 });
    });
  });

  describe('GetLockerKinds', () => {
    it('lists distinct size/type/dimension, sizeCode falling back to HxWxL, with paging fields', async () => {
      const res = await t.post(KINDS, { pupUid: PUP_A1 });
      expect(res.status).toBe(200);
      expect(res.body).toEqual({
        success: true,
        error: null,
        message: null,
        items: [
          { sizeCode: 'S', typeCode: 'normal', dimension: S },
          { sizeCode: 'M', typeCode: 'cooled', dimension: M },
          { sizeCode: 'M', typeCode: 'normal', dimension: M },
          { sizeCode: 'L', typeCode: 'normal', dimension: L },
          { sizeCode: '60x60x60', typeCode: 'normal', dimension: XL },
        ],
        pageNo: 1,
        pageSize: 500,
        totalItems: 5,
        totalPages: 1,
      });
    });

    it('honours optional paging', async () => {
      const res = await t.post(KINDS, { pupUid: PUP_A1, pageNo: 2, pageSize: 2 });
      expect(res.body.items.map((k: any) => `${k.sizeCode}/${k.typeCode}`)).toEqual(['M/normal', 'L/normal']);
      expect(res.body).toMatchObject({ pageNo: 2, pageSize: 2, totalItems: 5, totalPages: 3 });
    });

    it('unknown and foreign PUPs answer InvalidPupUid; a missing pupUid is InvalidRequest', async () => {
      for (const pupUid of [PUP_B1, UNKNOWN_UID]) {
        const res = await t.post(KINDS, { pupUid });
        expect(res.status).toBe(400);
        expect(res.body.error).toBe('InvalidPupUid');
      }
      const res = await t.post(KINDS, {});
      expect(res.body).toMatchObject({ success: false, error: 'InvalidRequest', message: expect.stringContaining('pupUid') });
    });
  });

  it('sees provisioning changes: a PUP given to tenant-b appears for it', async () => {
    const site = testSite();
    site.tenants![1]!.pickupPoints = [PUP_B1, PUP_A2];
    await t.provision(site);
    try {
      const tok = await t.token('tenant-b');
      const res = await t.post(GET_PUPS, { pageNo: 1, pageSize: 10 }, tok);
      expect(res.body.items.map((i: any) => i.pupUid).sort()).toEqual([PUP_A2, PUP_B1].sort());
      const lockers = await t.post(LOCKERS, { pageNo: 1, pageSize: 10, pupUid: PUP_A2 }, tok);
      expect(lockers.body.totalItems).toBe(3);
    } finally {
      await t.provision(testSite());
    }
  });
});

describe('rate limiting (http.rateLimitPerMinute)', () => {
  let t: TestService;
  beforeAll(async () => {
    t = await createTestService('sqlite', { config: { http: { rateLimitPerMinute: 3 } } });
  });
  afterAll(async () => t?.close());

  it('answers 429 RateLimited with Retry-After in the envelope once the per-token budget is spent', async () => {
    const tok = await t.token();
    const statuses: number[] = [];
    let last: Awaited<ReturnType<TestService['post']>> | undefined;
    for (let i = 0; i < 5; i++) {
      last = await t.post(GET_PUPS, { pageNo: 1, pageSize: 10 }, tok);
      statuses.push(last.status);
    }
    expect(statuses.slice(0, 3)).toEqual([200, 200, 200]);
    expect(statuses.slice(3)).toEqual([429, 429]);
    expect(last!.body).toEqual({ success: false, error: 'RateLimited', message: expect.stringContaining('rate limit') });
    expect(Number(last!.headers['retry-after'])).toBeGreaterThan(0);
    // another client (token) has its own budget
    const other = await t.post(GET_PUPS, { pageNo: 1, pageSize: 10 }, await t.token('tenant-b'));
    expect(other.status).toBe(200);
  });
});
