// GetShipments paging totals stay exact while SQLite reuses them (shipments/queries.ts
// TotalsCache): every way the shipments table can change in between (an API booking, a
// cancellation, a direct write on the same connection, a write by another connection to the same
// file) must show in the next total. PostgreSQL reuses a total while the statement snapshot is
// unchanged (PgTotals): a write by another connection (another central instance) and a write
// still in progress must be counted exactly, and an unchanged store must not be counted again.
import BetterSqlite3 from 'better-sqlite3';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestService, describeEngines, pgUrl, type TestService } from './support/harness';
import { PUP_A1 } from './support/fixtures';
import { newUid, toDbTime } from '../src/ids';
import { addUser, booking, ok } from './shipments-helpers';
import { pgTotalsStats } from '../src/shipments/queries';

describeEngines('shipments: paging totals stay exact', (engine) => {
  let t: TestService;
  let user: string;
  beforeAll(async () => {
    t = await createTestService(engine);
    user = await addUser(t, PUP_A1);
  });
  afterAll(async () => t?.close());

  const list = async (activeShipments: boolean) => (await ok(t.post('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 2, activeShipments, sortBy: 'CreatedDesc' }))).totalItems as number;
  const row = async (active: 0 | 1) => {
    const tenant = await t.ctx.db.kysely.selectFrom('tenants').select('uid').where('client_id', '=', 'tenant-a').executeTakeFirstOrThrow();
    const now = toDbTime(t.clock.now());
    return {
      uid: newUid(), tenant_uid: tenant.uid, type_code: 'LocalPupShipment', flow: 'local', state_code: active ? 'ReadyForDropoff' : 'Cancelled', active, state_start: now, created_at: now, updated_at: now,
      reference_no: null, reference_case_no: null, description: null, from_user_uid: user, to_user_uid: user, from_address: null, to_address: null, receiver_delayed: 0 as const, keep_booked: 0 as const,
      pup_uid: PUP_A1, locker_uid: null, width: 1, height: 1, length: 1, swaps_shipment_uid: null, prior_shipment_uid: null, waits_on_uid: null, wait_kind: null, drop_off_deadline: null, seq: 1,
    };
  };

  it('a booking, a cancellation and direct writes all show in the next total', async () => {
    const a0 = await list(true);
    const i0 = await list(false);
    expect(await list(true)).toBe(a0); // asked twice, unchanged
    const b = await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking() }));
    expect(await list(true)).toBe(a0 + 1);
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: b.shipmentUid }));
    expect(await list(true)).toBe(a0);
    expect(await list(false)).toBe(i0 + 1);
    await t.ctx.db.kysely.insertInto('shipments').values(await row(1)).execute();
    expect(await list(true)).toBe(a0 + 1);
    await t.ctx.db.kysely.deleteFrom('shipments').where('state_code', '=', 'Cancelled').execute();
    expect(await list(false)).toBe(0);
  });

  it.runIf(engine === 'sqlite')('a write by another connection to the same database file shows in the next total', async () => {
    const a0 = await list(true);
    const file = t.ctx.db.sqlite!.name;
    const other = new BetterSqlite3(file);
    try {
      const r = await row(1);
      const cols = Object.keys(r);
      other.prepare(`INSERT INTO shipments (${cols.join(', ')}) VALUES (${cols.map(() => '?').join(', ')})`).run(...cols.map((c) => (r as Record<string, unknown>)[c]));
    } finally {
      other.close();
    }
    expect(await list(true)).toBe(a0 + 1);
  });

  it('first pages of every size, on the LIMIT ladder and off it: the slice of the whole listing, the exact total, the same items as a later page', async () => {
    for (let i = 0; i < 23; i++) await t.ctx.db.kysely.insertInto('shipments').values(await row(1)).execute();
    const tenant = await t.ctx.db.kysely.selectFrom('tenants').select('uid').where('client_id', '=', 'tenant-a').executeTakeFirstOrThrow();
    const order = (await t.ctx.db.kysely.selectFrom('shipments').select('uid').where('tenant_uid', '=', tenant.uid).where('active', '=', 1).orderBy('created_at', 'desc').orderBy('uid', 'desc').execute()).map((r) => r.uid);
    expect(order.length).toBeGreaterThanOrEqual(23);
    const page = (pageNo: number, pageSize: number) => ok(t.post('/v1/Logistics/GetShipments', { pageNo, pageSize, activeShipments: true, sortBy: 'CreatedDesc' }));
    for (const size of [1, 9, 10, 11, 20, 21, order.length - 1, order.length, order.length + 1, 50, 499, 500]) {
      const p1 = await page(1, size);
      expect(p1.totalItems, `pageSize ${size}`).toBe(order.length);
      expect(p1.items.map((i: { shipmentUid: string }) => i.shipmentUid), `pageSize ${size}`).toEqual(order.slice(0, size));
    }
    // the first page's items written exactly as a later page's (another statement on PostgreSQL)
    const first = await page(1, 10);
    const second = await page(2, 5);
    expect(second.totalItems).toBe(order.length);
    expect(first.items.slice(5, 10)).toEqual(second.items);
    expect(JSON.stringify(first.items.slice(5, 10))).toBe(JSON.stringify(second.items));
  });

  it.runIf(engine === 'postgres')('PostgreSQL: a first page with fewer rows than its LIMIT tells its total by itself: neither counted nor held', async () => {
    const all = await ok(t.post('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 500, activeShipments: true, sortBy: 'CreatedDesc' }));
    const before = pgTotalsStats(t.ctx.db);
    const again = await ok(t.post('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 500, activeShipments: true, sortBy: 'CreatedDesc' }));
    expect(pgTotalsStats(t.ctx.db)).toEqual(before);
    expect(again.totalItems).toBe(all.items.length);
    expect(again.items).toEqual(all.items);
  });

  it.runIf(engine === 'postgres')('PostgreSQL: an unchanged store is not counted again; another instance\'s writes, committed or in progress, are counted exactly', async () => {
    // enough active shipments that the first page of 2 fills its LIMIT (10): its total is then
    // held or counted, as a later page's (the statement with the count in it)
    for (let i = 0; i < 12; i++) await t.ctx.db.kysely.insertInto('shipments').values(await row(1)).execute();
    const a0 = await list(true);
    expect(a0).toBeGreaterThanOrEqual(12);
    const second = async (_active: boolean) => (await ok(t.post('/v1/Logistics/GetShipments', { pageNo: 2, pageSize: 2, activeShipments: true, sortBy: 'CreatedDesc' }))).totalItems as number;
    // the snapshot is the whole cluster's: a commit anywhere (another test file running meanwhile
    // in its own schema) rightly makes the next call count again. So: some round of two calls,
    // with nothing committed elsewhere in it, answers both from the held total without counting.
    for (const page of [list, second]) {
      let held = false;
      for (let round = 0; round < 20 && !held; round++) {
        await page(true); // a total held under the current snapshot
        const before = pgTotalsStats(t.ctx.db);
        expect(await page(true)).toBe(a0);
        expect(await page(true)).toBe(a0);
        const after = pgTotalsStats(t.ctx.db);
        held = after.hits - before.hits === 2 && after.counts === before.counts;
      }
      expect(held).toBe(true);
    }
    // another central instance: its own connection to the same schema
    const other = new pg.Client({ connectionString: pgUrl()! });
    await other.connect();
    try {
      await other.query(`SET search_path TO ${t.pgSchema}`);
      const insert = async () => {
        const r = await row(1);
        const cols = Object.keys(r);
        await other.query(`INSERT INTO shipments (${cols.join(', ')}) VALUES (${cols.map((_, i) => `$${i + 1}`).join(', ')})`, cols.map((c) => (r as Record<string, unknown>)[c]));
      };
      const counted = pgTotalsStats(t.ctx.db).counts;
      await insert();
      expect(await list(true)).toBe(a0 + 1);
      // counted (twice when a commit elsewhere fell between the first page and its count)
      expect(pgTotalsStats(t.ctx.db).counts).toBeGreaterThan(counted);
      // a write in progress is not seen, and is counted the moment it commits
      await other.query('BEGIN');
      await insert();
      await insert();
      expect(await list(true)).toBe(a0 + 1);
      expect(await list(true)).toBe(a0 + 1);
      await other.query('COMMIT');
      expect(await list(true)).toBe(a0 + 3);
      // an empty page (past the end) counts and holds its total too
      const past = await ok(t.post('/v1/Logistics/GetShipments', { pageNo: 1000, pageSize: 2, activeShipments: true, sortBy: 'CreatedDesc' }));
      expect(past.totalItems).toBe(a0 + 3);
      expect(past.items).toEqual([]);
      // a commit between the first page and its count: the count is not used with that page (two
      // snapshots); page and total come again from the statement with the count in it
      const db = t.ctx.db as { pgRead: NonNullable<typeof t.ctx.db.pgRead> };
      const pgRead = db.pgRead;
      const texts: string[] = [];
      let between = 0;
      db.pgRead = async <R,>(text: string, values: readonly unknown[], array?: boolean): Promise<R[]> => {
        texts.push(text);
        const rows = await pgRead<R>(text, values, array);
        if (text.startsWith('SELECT pg_current_snapshot()::text AS snap,') && between++ === 0) await insert();
        return rows;
      };
      await insert(); // the total held is no longer the store's: the first page will need a count
      try {
        const res = await ok(t.post('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 2, activeShipments: true, sortBy: 'CreatedDesc' }));
        expect(res.totalItems).toBe(a0 + 5);
        expect(texts.map((x) => (x.startsWith('SELECT pg_current_snapshot()') ? 'first page' : x.startsWith('SELECT count(*)') ? 'count' : x.startsWith('SELECT CASE WHEN pg_current_snapshot()') ? 'page with count' : x))).toEqual(['first page', 'count', 'page with count']);
      } finally {
        db.pgRead = pgRead;
      }
      expect(await list(true)).toBe(a0 + 5);
      // a rolled-back write changes nothing visible
      await other.query('BEGIN');
      await insert();
      await other.query('ROLLBACK');
      expect(await list(true)).toBe(a0 + 5);
    } finally {
      await other.end();
    }
  });
});
