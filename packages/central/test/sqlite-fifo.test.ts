// The one SQLite connection is handed over in order, one waiter woken per query (db/sqlite-dialect.ts).
// Kysely's own SqliteDriver wakes every waiter on every release: a queue of K queries cost O(K²),
// and a fleet of 10,000 terminals reconnecting to a restarted node queued that many login reads
// (no terminal back within 60 s). The cost of a queue is measured here as CPU time per query at
// two queue lengths, against each other: it must not grow with the queue.
import os from 'node:os';
import path from 'node:path';
import fs from 'node:fs';
import BetterSqlite3 from 'better-sqlite3';
import { Kysely, sql } from 'kysely';
import { afterAll, describe, expect, it } from 'vitest';
import { openDatabase, type Db } from '../src/db/database';
import { FifoMutex, FifoSqliteDialect } from '../src/db/sqlite-dialect';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-sqlite-fifo-'));
const dbs: Db[] = [];
afterAll(async () => {
  for (const d of dbs) await d.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('FifoMutex', () => {
  it('hands the lock to waiters in arrival order, one at a time', async () => {
    const m = new FifoMutex();
    const order: number[] = [];
    let inside = 0;
    let maxInside = 0;
    await Promise.all(
      Array.from({ length: 3000 }, async (_, i) => {
        await m.lock();
        inside++;
        maxInside = Math.max(maxInside, inside);
        order.push(i);
        await Promise.resolve();
        inside--;
        m.unlock();
      }),
    );
    expect(maxInside).toBe(1);
    expect(order).toEqual(Array.from({ length: 3000 }, (_, i) => i));
    expect(m.waiting).toBe(0);
    // free again: taken at once
    await m.lock();
    m.unlock();
  });
});

describe('the SQLite connection under a queue of queries', () => {
  /** CPU microseconds per query with `k` queries queued at once on one connection */
  async function cpuPerQuery(db: Db, k: number): Promise<number> {
    const t0 = process.cpuUsage();
    const rows = await Promise.all(Array.from({ length: k }, (_, i) => sql<{ v: number }>`select ${i} as v`.execute(db.kysely)));
    const t = process.cpuUsage(t0);
    expect(rows.map((r) => r.rows[0]!.v)).toEqual(Array.from({ length: k }, (_, i) => i));
    return (t.user + t.system) / k;
  }

  it('costs the same per query with 8,000 queued as with 1,000 (no wake-up of every waiter per query)', async () => {
    // no checkpoint thread: process.cpuUsage() counts every thread's CPU
    const db = await openDatabase({ url: path.join(dir, 'fifo.db'), sqliteCheckpoints: 'commit' });
    dbs.push(db);
    await cpuPerQuery(db, 2000); // warm up the JIT
    const small = Math.min(await cpuPerQuery(db, 1000), await cpuPerQuery(db, 1000));
    const large = Math.min(await cpuPerQuery(db, 8000), await cpuPerQuery(db, 8000));
    // O(1) per query: about 1x. Kysely's mutex: O(K) per query, 8x from 1,000 to 8,000 (measured 6-9x)
    expect(large / small).toBeLessThan(3);
  });
});

describe('a long queue lets the event loop read its sockets', () => {
  it('an I/O callback runs while thousands of queries are queued, not after all of them', async () => {
    const db = await openDatabase({ url: path.join(dir, 'slice.db') });
    dbs.push(db);
    // each query costs about 0.1-0.3 ms: 3,000 of them hold the one connection for about half a second
    const heavy = (i: number) => sql<{ v: number }>`with recursive c(x) as (select 1 union all select x + 1 from c where x < 300) select ${i} + count(*) as v from c`.execute(db.kysely);
    let done = 0;
    let doneWhenIo: number | null = null;
    const all = Promise.all(Array.from({ length: 3000 }, (_, i) => heavy(i).then((r) => (done++, r.rows[0]!.v))));
    // a connection's data (here: the check phase right after an I/O poll) must not wait for the whole queue
    setImmediate(() => (doneWhenIo = done));
    const values = await all;
    expect(values).toEqual(Array.from({ length: 3000 }, (_, i) => i + 300));
    expect(doneWhenIo).not.toBeNull();
    // without the slice (FIFO_SLICE_MS) every hand-over resumes the next query in a microtask: the
    // whole queue drains before the loop turns (doneWhenIo = 3000)
    expect(doneWhenIo!).toBeLessThan(3000);
  });

  it('a read of committed rows (Db.committedGet) answers at once while a transaction holds the connection, and sees only what was committed', async () => {
    const db = await openDatabase({ url: path.join(dir, 'committed.db') });
    dbs.push(db);
    await db.migrate();
    await sql`insert into settings (key, value) values ('probe', 'committed')`.execute(db.kysely);
    expect(db.committedGet).toBeTypeOf('function');
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let inside!: () => void;
    const entered = new Promise<void>((r) => (inside = r));
    const tx = db.kysely.transaction().execute(async (trx) => {
      await sql`update settings set value = 'uncommitted' where key = 'probe'`.execute(trx);
      inside();
      await held;
    });
    await entered;
    // a query through Kysely waits for the transaction; the committed read does not
    const queued = sql<{ value: string }>`select value from settings where key = 'probe'`.execute(db.kysely);
    expect(db.committedGet!<{ value: string }>('SELECT value FROM settings WHERE key = ?', ['probe'])).toEqual({ value: 'committed' });
    release();
    await tx;
    expect((await queued).rows[0]!.value).toBe('uncommitted');
    expect(db.committedGet!<{ value: string }>('SELECT value FROM settings WHERE key = ?', ['probe'])).toEqual({ value: 'uncommitted' });
  });

  it('an in-memory database has no committed reader (the writer is the only connection)', async () => {
    const db = await openDatabase({ url: ':memory:' });
    dbs.push(db);
    expect(db.committedGet).toBeUndefined();
  });
});

describe('the SQLite query compiler', () => {
  it('writes LIMIT and OFFSET as expressions (a bare bound LIMIT makes SQLite plan the statement again on every call), with the same rows', async () => {
    const db = new Kysely<{ t: { n: number } }>({ dialect: new FifoSqliteDialect({ database: new BetterSqlite3(':memory:') }) });
    await db.schema.createTable('t').addColumn('n', 'integer').execute();
    await db.insertInto('t').values(Array.from({ length: 10 }, (_, n) => ({ n }))).execute();
    const q = db.selectFrom('t').select('n').orderBy('n').limit(3).offset(4);
    expect(q.compile().sql).toBe('select "n" from "t" order by "n" limit ? + 0 offset ? + 0');
    expect((await q.execute()).map((r) => r.n)).toEqual([4, 5, 6]);
    await db.destroy();
  });
});
