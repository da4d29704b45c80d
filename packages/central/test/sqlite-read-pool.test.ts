// SQLite's read threads (db/read-pool.ts, database.sqliteReadThreads): a GetShipments page and its
// total are read by a worker thread on a read-only connection of its own. What must hold:
// - the answers are the main connection's, filter by filter, page by page;
// - an acknowledged booking is in the next read (read your writes), a transaction still open on the
//   main connection is not (committed rows only, one snapshot for the page and its total);
// - a thread that dies with reads in flight loses none of them (the main connection reads them) and
//   is started again; a read that fails in the thread is read on the main connection too;
// - GetAccounts searches are read by the thread too, with the same answers;
// - the tenant API's quick reads (pick up points, lockers, accounts) of one turn of the event loop go
//   to the thread in one message, each answered apart (a failing one fails alone), a booking
//   acknowledged before them in them; a thread that dies with them loses none;
// - a thread runs one search at a time: a page sent after several searches waits behind only the
//   one running; at most MAX_WAITING searches wait (a read beyond is the caller's), and searches
//   waiting when the thread dies fail over like the reads in it;
// - 0 threads: no pool, every read on the main connection.
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { sql } from 'kysely';
import { createTestService, type TestService } from './support/harness';
import { PUP_A1 } from './support/fixtures';
import { addUser, booking, ok } from './shipments-helpers';
import { listShipments, type ShipmentFilter } from '../src/shipments/queries';
import type { Db } from '../src/db/database';
import { MAX_WAITING, ReadPoolError } from '../src/db/read-pool';
import { waitFor } from './support/wait';
import { JsonText } from '../src/http/serializer';

/**
 * While a transaction on the main connection has made the shipment inactive (and then rolls back),
 * a listing of the active shipments is answered (by the thread at once, or by the main connection
 * after the transaction) with the shipment still there and the total unchanged: the uncommitted
 * write is never read.
 */
async function notListedUncommitted(t: TestService, list: () => ReturnType<typeof listShipments>, shipmentUid: string, total: number, answersAtOnce: boolean) {
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  let written!: () => void;
  const inTx = new Promise<void>((r) => (written = r));
  const tx = t.ctx.db.kysely
    .transaction()
    .execute(async (trx) => {
      await sql`update shipments set active = 0 where uid = ${shipmentUid}`.execute(trx);
      written();
      await held;
      throw new Error('rolled back');
    })
    .catch((e: Error) => e.message);
  await inTx;
  let settled = false;
  const listing = list().finally(() => (settled = true));
  await new Promise((r) => setTimeout(r, 50));
  // a read thread answers while the transaction is still open; the main connection waits for it
  expect(settled).toBe(answersAtOnce);
  release();
  expect(await tx).toBe('rolled back');
  const r = await listing;
  expect(r.totalItems).toBe(total);
  expect(r.items.map((i) => (i instanceof JsonText ? (JSON.parse(i.text) as { shipmentUid: string }).shipmentUid : i.shipmentUid))).toContain(shipmentUid);
}

describe('SQLite read threads', () => {
  let t: TestService;
  let user: string;
  let tenantUid: string;
  beforeAll(async () => {
    t = await createTestService('sqlite', { config: { database: { sqliteReadThreads: 1 } } });
    user = await addUser(t, PUP_A1);
    tenantUid = (await t.ctx.db.kysely.selectFrom('tenants').select('uid').where('client_id', '=', 'tenant-a').executeTakeFirstOrThrow()).uid;
    for (let i = 0; i < 4; i++) await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ReferenceNo: `R-${i}`, ...booking() }));
    const c = await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking() }));
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: c.shipmentUid }));
  });
  afterAll(async () => t?.close());

  const pool = () => t.ctx.db.readPool!;
  /** the same store without its pool: every read on the main connection */
  const mainOnly = (): Db => ({ ...t.ctx.db, readPool: undefined });
  const filter = (over: Partial<ShipmentFilter> = {}): ShipmentFilter => ({ tenantUid, typeCode: null, sortBy: 'CreatedDesc', pageNo: 1, pageSize: 3, ...over });

  it('GetShipments is read by the thread, with the answer of the main connection for every filter and page', async () => {
    const before = pool().stats.reads;
    const body = await ok(t.post('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 100, activeShipments: true, sortBy: 'CreatedDesc' }));
    expect(body.totalItems).toBe(4);
    expect(pool().stats.reads).toBe(before + 1);
    const filters: Partial<ShipmentFilter>[] = [
      {},
      { active: true },
      { active: false },
      { active: true, pageNo: 2 },
      { active: true, pageNo: 3 },
      { active: true, pageNo: 9 },
      { sortBy: 'ActivityAsc', updatedSince: '2020-01-01T00:00:00.000Z' },
      { states: ['ReadyForDropoff', 'Cancelled'], sortBy: 'CreatedAsc', pageSize: 100 },
      { userUid: user, sortBy: 'ActivityDesc' },
      { bookedPupUid: PUP_A1 },
      { tenantUid: 'no-such-tenant' },
    ];
    for (const over of filters) {
      const n = pool().stats.reads;
      const threaded = await listShipments(t.ctx.db, filter(over));
      expect(pool().stats.reads, JSON.stringify(over)).toBe(n + 1);
      expect(threaded, JSON.stringify(over)).toEqual(await listShipments(mainOnly(), filter(over)));
    }
  });

  it('GetShipments over HTTP: the same body and headers from the thread as from the main connection', async () => {
    const headers = { authorization: `Bearer ${await t.token()}`, 'content-type': 'application/json' };
    for (const body of [
      { pageNo: 1, pageSize: 100, activeShipments: true, sortBy: 'CreatedDesc' },
      { pageNo: 1, pageSize: 2, activeShipments: false, shipmentState: ['Cancelled', 'ReadyForDropoff'], sortBy: 'ActivityAsc' },
      { pageNo: 9, pageSize: 2, activeShipments: true },
    ]) {
      const reads = pool().stats.reads;
      const threaded = await t.app.inject({ method: 'POST', url: '/v1/Logistics/GetShipments', payload: body, headers });
      expect(pool().stats.reads, JSON.stringify(body)).toBe(reads + 1);
      const page = pool().page;
      pool().page = () => undefined; // no thread can take it: the main connection reads it
      let main;
      try {
        main = await t.app.inject({ method: 'POST', url: '/v1/Logistics/GetShipments', payload: body, headers });
      } finally {
        pool().page = page;
      }
      expect(pool().stats.reads).toBe(reads + 1);
      expect(threaded.statusCode).toBe(200);
      expect(threaded.rawPayload.equals(main.rawPayload), JSON.stringify(body)).toBe(true);
      for (const h of ['content-type', 'content-length']) expect(threaded.headers[h], h).toBe(main.headers[h]);
    }
  });

  it('an acknowledged booking is in the next read; a transaction still open on the main connection is not', async () => {
    const before = await listShipments(t.ctx.db, filter({ active: true, pageSize: 100 }));
    const b = await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking() }));
    const after = await listShipments(t.ctx.db, filter({ active: true, pageSize: 100 }));
    expect(after.totalItems).toBe(before.totalItems + 1);
    expect(JSON.stringify(after.items[0])).toContain(b.shipmentUid);

    // a write in progress, rolled back in the end: never in a listing
    await notListedUncommitted(t, () => listShipments(t.ctx.db, filter({ active: true, pageSize: 100 })), b.shipmentUid, after.totalItems, true);
  });

  it('GetAccounts searches are read by the thread, with the answers of the main connection; the plain listing too (its first page as a quick read, its count and later pages as a search)', async () => {
    for (let i = 0; i < 12; i++) {
      await ok(t.post('/v1/Account/CreateOrGetAccount', { emailAddress: `searcher${i}@example.test`, firstName: i % 2 ? 'Ann' : 'Bob', lastName: `Search${i}`, pickUpPointUid: PUP_A1 }));
    }
    const searches: Record<string, unknown>[] = [
      { fullName: 'ann' },
      { fullName: 'ann search1' },
      { emailAddress: 'searcher1', includePhone: true },
      { userName: 'searcher', pageSize: 5 },
      { userName: 'searcher', pageSize: 12 },
      { userName: 'searcher', pageSize: 5, pageNo: 2 },
      { userName: 'searcher', pageSize: 5, pageNo: 3 },
      { fullName: 'nobody' },
    ];
    for (const search of searches) {
      const body = { pageNo: 1, pageSize: 10, ...search };
      const n = pool().stats.reads;
      const searches0 = vi.spyOn(pool(), 'search');
      const threaded = await ok(t.post('/v1/Account/GetAccounts', body));
      // the page and its total by one thread read, the page's rows (if any) by another
      expect(searches0).toHaveBeenCalledTimes(1);
      searches0.mockRestore();
      expect(pool().stats.reads - n, JSON.stringify(search)).toBe(threaded.items.length > 0 ? 2 : 1);
      // the same search with no thread to take it: on the main connection
      const spies = [vi.spyOn(pool(), 'search').mockReturnValue(undefined), vi.spyOn(pool(), 'all').mockReturnValue(undefined), vi.spyOn(pool(), 'quick').mockReturnValue(undefined)];
      try {
        expect(await ok(t.post('/v1/Account/GetAccounts', body)), JSON.stringify(search)).toEqual(threaded);
      } finally {
        for (const spy of spies) spy.mockRestore();
      }
    }
    expect((await ok(t.post('/v1/Account/GetAccounts', { pageNo: 1, pageSize: 10, fullName: 'ann' }))).totalItems).toBe(6);
    // a search whose thread read fails is read on the main connection
    const expected = await ok(t.post('/v1/Account/GetAccounts', { pageNo: 1, pageSize: 10, fullName: 'bob' }));
    const failing = vi.spyOn(pool(), 'search').mockImplementation(() => Promise.reject(new ReadPoolError('injected', 'SQLITE_READ_FAILED')));
    try {
      expect(await ok(t.post('/v1/Account/GetAccounts', { pageNo: 1, pageSize: 10, fullName: 'bob' }))).toEqual(expected);
      expect(failing).toHaveBeenCalled();
    } finally {
      failing.mockRestore();
    }
    // the plain listing (no filter): its first page is a quick read (with the other quick reads of
    // its turn of the event loop, in one message to the thread: SqliteReadPool.quick); its count
    // (after a full first page) and its later pages (a count and an OFFSET walk: milliseconds over
    // a tenant's accounts) run as a search does, never among the quick reads, which would wait for
    // them. The same answers as the main connection's.
    for (const [body, heavy] of [
      [{ pageNo: 1, pageSize: 100 }, 'none'],
      [{ pageNo: 1, pageSize: 5 }, 'count'],
      [{ pageNo: 2, pageSize: 5 }, 'search'],
    ] as const) {
      const n = pool().stats.reads;
      const quick = vi.spyOn(pool(), 'quick');
      const all = vi.spyOn(pool(), 'all');
      const search = vi.spyOn(pool(), 'search');
      let threaded: Record<string, unknown>;
      try {
        threaded = await ok(t.post('/v1/Account/GetAccounts', body));
        expect(quick, JSON.stringify(body)).toHaveBeenCalled(); // the page's rows
        for (const [text] of quick.mock.calls) expect(text, JSON.stringify(body)).not.toMatch(/count\(|offset/i);
        expect(search).toHaveBeenCalledTimes(heavy === 'search' ? 1 : 0);
        // and the thread answered them (a read that failed over to the main connection would not)
        if (heavy === 'search') expect(await search.mock.results[0]!.value).toMatchObject({ total: threaded.totalItems, rows: expect.any(Array) });
        const slowCounts = all.mock.calls.flatMap(([text, , slow], i) => (slow && /count\(/.test(text) ? [all.mock.results[i]!.value] : []));
        expect(slowCounts, JSON.stringify(body)).toHaveLength(heavy === 'count' ? 1 : 0);
        for (const answer of slowCounts) expect(await answer).toEqual([{ n: threaded.totalItems }]);
      } finally {
        for (const spy of [quick, all, search]) spy.mockRestore();
      }
      expect(pool().stats.reads).toBeGreaterThan(n);
      expect(threaded.totalItems).toBeGreaterThan(5);
      const spies = [vi.spyOn(pool(), 'search').mockReturnValue(undefined), vi.spyOn(pool(), 'all').mockReturnValue(undefined), vi.spyOn(pool(), 'quick').mockReturnValue(undefined)];
      try {
        expect(await ok(t.post('/v1/Account/GetAccounts', body))).toEqual(threaded);
      } finally {
        for (const spy of spies) spy.mockRestore();
      }
    }
  });

  it('the plain listing\'s count and later pages do not wait behind a search the thread is running: the main connection reads them at once', async () => {
    for (let i = 0; i < 7; i++) await ok(t.post('/v1/Account/CreateOrGetAccount', { emailAddress: `waiter${i}@example.test`, firstName: 'Wait', lastName: `Er${i}`, pickUpPointUid: PUP_A1 }));
    const bodies = [{ pageNo: 1, pageSize: 5 }, { pageNo: 2, pageSize: 5 }];
    const expected = await Promise.all(bodies.map((body) => ok(t.post('/v1/Account/GetAccounts', body))));
    expect(expected[0].totalItems).toBeGreaterThan(5); // a full first page: it needs the count
    let searchDone = false;
    const search = pool()
      .search({ count: 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 5000000) SELECT count(*) FROM c', asc: 'SELECT 1', desc: 'SELECT 1', params: [], offset: 1, size: 1 })!
      .finally(() => (searchDone = true));
    const quick = vi.spyOn(pool(), 'quick');
    try {
      for (const [i, body] of bodies.entries()) expect(await ok(t.post('/v1/Account/GetAccounts', body))).toEqual(expected[i]);
      // read on the main connection itself, not handed back to the threads as quick reads (which a
      // search ending meanwhile would let through, to be batched with the turn's other reads)
      for (const [text] of quick.mock.calls) expect(text).not.toMatch(/count\(|offset/i);
    } finally {
      quick.mockRestore();
    }
    expect(searchDone).toBe(false); // both answered while the search still ran
    await search;
  });

  /** a live thread (one that died in an earlier attempt is started again a second later) */
  const threadUp = () =>
    waitFor(async () => {
      await listShipments(t.ctx.db, filter());
      return pool().workers().length === 1;
    }, 'a live read thread');

  it('a total is counted once while nothing is committed, and again after any commit', async () => {
    await threadUp();
    const q = { key: 'totals-test', count: 'select count(*) from shipments where active = ?', page: 'select uid from shipments where active = ? order by uid limit ? offset ?', params: [1], offset: 0, size: 2 };
    const first = await pool().page(q)!;
    const again = await pool().page(q)!;
    expect(again).toEqual({ ...first, counted: false });
    await sql`insert into settings (key, value) values ('totals-test', '1')`.execute(t.ctx.db.kysely);
    const afterCommit = await pool().page(q)!;
    expect(afterCommit.counted).toBe(true);
    expect(afterCommit.total).toBe(first.total);
  });

  it('a read the thread fails is read on the main connection', async () => {
    await threadUp();
    // a statement the read-only connection refuses (it writes): the read is refused with its code
    const r = pool().page({ key: 'k', count: 'select 1', page: "insert into settings (key, value) values ('x', 'y') returning value", params: [], offset: 0, size: 1 });
    await expect(r).rejects.toMatchObject({ code: 'SQLITE_READ_FAILED' });
    expect(await t.ctx.db.kysely.selectFrom('settings').select('key').where('key', '=', 'x').executeTakeFirst()).toBeUndefined();
    // GetShipments whose thread read fails answers as the main connection does
    const expected = await listShipments(mainOnly(), filter({ active: true }));
    const spy = vi.spyOn(pool(), 'page').mockReturnValueOnce(Promise.reject(new ReadPoolError('injected', 'SQLITE_READ_FAILED')));
    try {
      expect(await listShipments(t.ctx.db, filter({ active: true }))).toEqual(expected);
      expect(spy).toHaveBeenCalledTimes(1);
    } finally {
      spy.mockRestore();
    }
  });

  it('a read whose parameters cannot be sent fails over, and the thread goes on', async () => {
    await threadUp();
    const failed = pool().stats.failed;
    const r = pool().page({ key: 'k', count: 'select 1', page: 'select 1 limit ? offset ?', params: [() => 1], offset: 0, size: 1 });
    await expect(r).rejects.toMatchObject({ code: 'SQLITE_READ_FAILED' });
    expect(pool().stats.failed).toBe(failed + 1);
    const n = pool().stats.reads;
    expect((await listShipments(t.ctx.db, filter({ active: true }))).totalItems).toBeGreaterThan(0);
    expect(pool().stats.reads).toBe(n + 1);
  });

  /** a search that keeps the thread busy for a while (its first page: a count to n) */
  const slowSearch = (n: number) => {
    const asc = `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ${n}) SELECT count(*) FROM c`;
    return pool().search({ count: 'SELECT 1', asc, desc: asc, params: [], offset: 0, size: 1 });
  };

  it('a page sent after three searches waits only for the one the thread is running', async () => {
    await threadUp();
    const order: string[] = [];
    const track = <T,>(name: string, p: Promise<T> | undefined) => {
      expect(p).toBeDefined();
      return p!.then((v) => (order.push(name), v));
    };
    const searches = ['search 1', 'search 2', 'search 3'].map((name) => track(name, slowSearch(1_500_000)));
    const q = { key: 'after-searches', count: 'select count(*) from shipments where active = ?', page: 'select uid from shipments where active = ? order by uid limit ? offset ?', params: [1], offset: 0, size: 2 };
    const page = track('page', pool().page(q));
    expect((await Promise.all(searches)).map((r) => r.total)).toEqual([1, 1, 1]);
    expect((await page).rows).toHaveLength(2);
    // in one FIFO queue the page came last
    expect(order).toEqual(['search 1', 'page', 'search 2', 'search 3']);
  });

  it(`at most ${MAX_WAITING} searches wait; one beyond is the caller's, the others are all answered`, async () => {
    await threadUp();
    const overflowed = pool().stats.overflowed;
    const running = slowSearch(2_000_000);
    const waiting = Array.from({ length: MAX_WAITING }, () => pool().search({ count: 'SELECT 1', asc: 'SELECT 7', desc: 'SELECT 7', params: [], offset: 0, size: 1 }));
    expect(waiting.every((w) => w !== undefined)).toBe(true);
    expect(pool().search({ count: 'SELECT 1', asc: 'SELECT 7', desc: 'SELECT 7', params: [], offset: 0, size: 1 })).toBeUndefined();
    expect(pool().stats.overflowed).toBe(overflowed + 1);
    // a quick read still goes to the thread
    expect(pool().all('SELECT 8 AS v', [])).toBeDefined();
    await running;
    for (const r of await Promise.all(waiting)) expect(r).toEqual({ total: 1, rows: [7] });
  });

  it('searches waiting for the thread when it dies fail over, as the one it was running', async () => {
    await threadUp();
    const running = slowSearch(5_000_000);
    const waiting = [slowSearch(10), slowSearch(10)];
    const [worker] = pool().workers();
    await worker!.terminate();
    for (const r of [running, ...waiting]) await expect(r).rejects.toMatchObject({ code: 'SQLITE_READ_THREAD_LOST' });
  });

  it('a thread that dies with reads in flight loses none of them, and is started again', async () => {
    await threadUp();
    const expected = await listShipments(mainOnly(), filter({ active: true, pageSize: 100 }));
    const lost0 = pool().stats.threadsLost;
    const failed0 = pool().stats.failed;
    // a read that keeps the thread busy for a while (counting to 5 million), then eight pages
    // queued behind it; the thread is killed while they wait
    const slow = pool().page({ key: 'slow', count: 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 5000000) SELECT count(*) FROM c', page: 'SELECT 1 LIMIT ? OFFSET ?', params: [], offset: 0, size: 1 });
    expect(slow).toBeDefined();
    const reads = Array.from({ length: 8 }, () => listShipments(t.ctx.db, filter({ active: true, pageSize: 100 })));
    const [worker] = pool().workers();
    expect(worker).toBeDefined();
    await worker!.terminate();
    await expect(slow).rejects.toMatchObject({ code: 'SQLITE_READ_THREAD_LOST' });
    for (const r of await Promise.all(reads)) expect(r).toEqual(expected);
    expect(pool().stats.threadsLost).toBe(lost0 + 1);
    expect(pool().stats.failed).toBe(failed0 + 9);
    expect(pool().workers()).toHaveLength(0);
    // within its restart delay the main connection reads; then a new thread does
    const n = pool().stats.reads;
    expect(await listShipments(t.ctx.db, filter({ active: true, pageSize: 100 }))).toEqual(expected);
    expect(pool().stats.reads).toBe(n);
    await waitFor(async () => {
      expect(await listShipments(t.ctx.db, filter({ active: true, pageSize: 100 }))).toEqual(expected);
      return pool().stats.reads > n;
    }, 'a new read thread');
    expect(pool().workers()).toHaveLength(1);
  });
});

describe('SQLite read threads: the tenant API\'s quick reads, one message per turn of the event loop', () => {
  let t: TestService;
  let user: string;
  beforeAll(async () => {
    t = await createTestService('sqlite', { config: { database: { sqliteReadThreads: 1 } } });
    user = await addUser(t, PUP_A1);
  });
  afterAll(async () => t?.close());
  const pool = () => t.ctx.db.readPool!;
  /** the messages posted to the thread while fn runs */
  async function posted<T>(fn: () => Promise<T>): Promise<{ result: T; messages: { op: string; reads?: unknown[] }[] }> {
    if (pool().workers().length === 0) await pool().quick('select 1', [], 'pluck'); // the thread starts with its first read
    const [worker] = pool().workers();
    const messages: { op: string; reads?: unknown[] }[] = [];
    const send = worker!.postMessage.bind(worker!);
    const spy = vi.spyOn(worker!, 'postMessage').mockImplementation((m: unknown) => {
      messages.push(m as { op: string });
      send(m);
    });
    try {
      return { result: await fn(), messages };
    } finally {
      spy.mockRestore();
    }
  }

  it('the quick reads of one turn go to the thread in one message, each answered with its own rows; a failing one fails alone', async () => {
    await posted(async () => undefined); // a thread is up
    const reads0 = pool().stats.reads;
    const { result, messages } = await posted(() =>
      Promise.allSettled([...Array.from({ length: 10 }, (_, i) => pool().quick<number>('select ? + 1', [i], 'pluck')!), pool().quick('select * from no_such_table', [], 'object')!, pool().quick<unknown[]>('select ?, ?', ['a', 2], 'raw')!]),
    );
    expect(messages.map((m) => m.op)).toEqual(['batch']);
    expect(messages[0]!.reads).toHaveLength(12);
    expect(result.slice(0, 10)).toEqual(Array.from({ length: 10 }, (_, i) => ({ status: 'fulfilled', value: [i + 1] })));
    expect(result[10]!.status).toBe('rejected');
    expect((result[10] as PromiseRejectedResult).reason).toMatchObject({ code: 'SQLITE_READ_FAILED' });
    expect((result[10] as PromiseRejectedResult).reason.message).toContain('no such table');
    expect(result[11]).toEqual({ status: 'fulfilled', value: [['a', 2]] });
    expect(pool().stats.reads).toBe(reads0 + 11);
  });

  it('a BLOB comes back from the thread as a Buffer, as from the main connection, in every kind of read', async () => {
    await posted(async () => undefined); // a thread is up
    const sqlite = t.ctx.db.sqlite!;
    const text = "select x'00ff10' as b, 'x' as s";
    const main = sqlite.prepare(text).get() as { b: unknown };
    expect(Buffer.isBuffer(main.b)).toBe(true);
    const reads0 = pool().stats.reads;
    const [objects, raw, plucked, all] = await Promise.all([pool().quick<{ b: unknown; s: string }>(text, [], 'object')!, pool().quick<unknown[]>(text, [], 'raw')!, pool().quick<unknown>(text, [], 'pluck')!, pool().all<{ b: unknown }>(text, [])!]);
    expect(pool().stats.reads).toBe(reads0 + 4); // all four read by the thread
    for (const b of [objects[0]!.b, raw[0]![0], plucked[0], all[0]!.b]) {
      expect(Buffer.isBuffer(b)).toBe(true);
      expect((b as Buffer).equals(main.b as Buffer)).toBe(true);
    }
    expect(objects[0]!.s).toBe('x');
    // a page and a search's page of BLOB values
    const page = await pool().page({ key: 'blob', count: 'select 1', page: "select x'0102' limit ? offset ?", params: [], offset: 0, size: 1 })!;
    const search = await pool().search({ count: 'select 1', asc: "select x'0304'", desc: "select x'0304'", params: [], offset: 0, size: 1 })!;
    expect(Buffer.isBuffer(page.rows[0]) && (page.rows[0] as Buffer).equals(Buffer.from([1, 2]))).toBe(true);
    expect(Buffer.isBuffer(search.rows[0]) && (search.rows[0] as Buffer).equals(Buffer.from([3, 4]))).toBe(true);
  });

  it('the API\'s reads are read by the thread: a booking acknowledged before them is in them', async () => {
    const before = await ok(t.post('/v1/PickupPoints/GetAvailableLockers', { pageNo: 1, pageSize: 100, pupUid: PUP_A1 }));
    const reads0 = pool().stats.reads;
    const b = await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking() }));
    const { result: after, messages } = await posted(() => ok(t.post('/v1/PickupPoints/GetAvailableLockers', { pageNo: 1, pageSize: 100, pupUid: PUP_A1 })));
    expect(messages.map((m) => m.op)).toContain('batch');
    expect(pool().stats.reads).toBeGreaterThan(reads0);
    expect(after.totalItems).toBe(before.totalItems - 1);
    const booked = (await t.ctx.db.kysely.selectFrom('shipments').select('locker_uid').where('uid', '=', b.shipmentUid).executeTakeFirstOrThrow()).locker_uid;
    expect(after.items.map((l: { lockerUid: string }) => l.lockerUid)).not.toContain(booked);
    expect(before.items.map((l: { lockerUid: string }) => l.lockerUid)).toContain(booked);
    // and the account reads: GetAccount answers from the thread as from the main connection
    const acc = await ok(t.post('/v1/Account/GetAccount', { userUid: user }));
    expect(acc.userUid).toBe(user);
  });

  it('quick reads do not wait behind a search the thread is running: the main connection reads them at once', async () => {
    await posted(async () => undefined); // a thread is up
    const expected = await ok(t.post('/v1/PickupPoints/GetLockers', { pageNo: 1, pageSize: 100, pupUid: PUP_A1 }));
    const overflowed = pool().stats.overflowed;
    // a search whose count keeps the thread busy (counting to 5 million)
    let searchDone = false;
    const search = pool()
      .search({ count: 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 5000000) SELECT count(*) FROM c', asc: 'SELECT 1', desc: 'SELECT 1', params: [], offset: 1, size: 1 })!
      .finally(() => (searchDone = true));
    const answer = await ok(t.post('/v1/PickupPoints/GetLockers', { pageNo: 1, pageSize: 100, pupUid: PUP_A1 }));
    expect(searchDone).toBe(false); // answered while the search still ran
    expect(answer).toEqual(expected);
    expect(pool().stats.overflowed).toBeGreaterThan(overflowed);
    await search;
  });

  it('a thread that dies with a turn\'s reads in flight: every one of them is answered (by the main connection)', async () => {
    await posted(async () => undefined); // a thread is up
    const expected = await ok(t.post('/v1/PickupPoints/GetLockers', { pageNo: 1, pageSize: 100, pupUid: PUP_A1 }));
    const failed0 = pool().stats.failed;
    // the thread kept busy by a slow read, the API's reads of the next turn queued behind it
    const slow = pool().page({ key: 'slow-q', count: 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 5000000) SELECT count(*) FROM c', page: 'SELECT 1 LIMIT ? OFFSET ?', params: [], offset: 0, size: 1 });
    const answers = Array.from({ length: 6 }, () => ok(t.post('/v1/PickupPoints/GetLockers', { pageNo: 1, pageSize: 100, pupUid: PUP_A1 })));
    await new Promise((r) => setTimeout(r, 20));
    const [worker] = pool().workers();
    await worker!.terminate();
    await expect(slow).rejects.toMatchObject({ code: 'SQLITE_READ_THREAD_LOST' });
    for (const a of await Promise.all(answers)) expect(a).toEqual(expected);
    expect(pool().stats.failed).toBeGreaterThanOrEqual(failed0 + 1 + 6);
  });
});

describe('SQLite read threads off', () => {
  let t: TestService;
  beforeAll(async () => {
    t = await createTestService('sqlite', { config: { database: { sqliteReadThreads: 0 } } });
  });
  afterAll(async () => t?.close());

  it('0 threads: no pool, GetShipments on the main connection', async () => {
    expect(t.ctx.db.readPool).toBeUndefined();
    const user = await addUser(t, PUP_A1);
    await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking() }));
    expect((await ok(t.post('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 10, activeShipments: true, sortBy: 'CreatedDesc' }))).totalItems).toBe(1);
  });

  it('the main connection does not list a write in progress either: it waits for the transaction', async () => {
    const user = await addUser(t, PUP_A1);
    const b = await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking() }));
    const tenantUid = (await t.ctx.db.kysely.selectFrom('tenants').select('uid').where('client_id', '=', 'tenant-a').executeTakeFirstOrThrow()).uid;
    const list = () => listShipments(t.ctx.db, { tenantUid, typeCode: null, active: true, sortBy: 'CreatedDesc', pageNo: 1, pageSize: 100 });
    const before = await list();
    await notListedUncommitted(t, list, b.shipmentUid, before.totalItems, false);
  });
});
