// Reads by fixed prepared statements (db/prepared-read.ts) answer like Kysely did, on both engines,
// and on SQLite never see a transaction's uncommitted writes: while a Kysely transaction holds the
// one connection, a read waits for it as any Kysely query does.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { preparedRawReader, preparedReader, sqlitePage } from '../src/db/prepared-read';
import { createTestService, describeEngines, type TestService } from './support/harness';

describeEngines('prepared reads', (engine) => {
  let t: TestService;
  beforeAll(async () => {
    t = await createTestService(engine);
  });
  afterAll(async () => t?.close());

  it('answers the rows of a statement with ? placeholders', async () => {
    const read = preparedReader(t.ctx.db);
    const want = await t.ctx.db.kysely.selectFrom('pups').select(['uid', 'name']).orderBy('uid').execute();
    expect(await read('select uid, name from pups where uid >= ? order by uid', [''])).toEqual(want);
    expect(await read('select uid, name from pups where uid = ? and name = ?', [want[0]!.uid, want[0]!.name])).toEqual([want[0]]);
  });

  it('raw reads: each row as the array of its columns in the SELECT order, the same values as the object rows', async () => {
    const raw = preparedRawReader(t.ctx.db);
    const want = await t.ctx.db.kysely.selectFrom('lockers').select(['uid', 'pup_uid', 'name', 'width', 'size_code']).orderBy('uid').execute();
    expect(want.length).toBeGreaterThan(3);
    const text = 'select uid, pup_uid, name, width, size_code from lockers where uid >= ? order by uid';
    expect(await raw(text, [''])).toEqual(want.map((r) => [r.uid, r.pup_uid, r.name, r.width, r.size_code]));
    // the same text again (a cached statement) and, on SQLite, the same text through an object reader: neither mode leaks into the other
    expect(await preparedReader(t.ctx.db)(text, [want[1]!.uid])).toEqual(want.slice(1));
    expect(await raw(text, [want[1]!.uid])).toEqual(want.slice(1).map((r) => [r.uid, r.pup_uid, r.name, r.width, r.size_code]));
  });

  it('does not read what an open transaction has not committed', async () => {
    const read = preparedReader(t.ctx.db);
    const readRaw = preparedRawReader(t.ctx.db);
    const [pup] = await t.ctx.db.kysely.selectFrom('pups').select(['uid', 'name']).orderBy('uid').limit(1).execute();
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let updated!: () => void;
    const inside = new Promise<void>((r) => (updated = r));
    const tx = t.ctx.db.kysely
      .transaction()
      .execute(async (trx) => {
        await trx.updateTable('pups').set({ name: 'uncommitted' }).where('uid', '=', pup!.uid).execute();
        updated();
        await held;
        throw new Error('rolled back');
      })
      .catch(() => undefined);
    await inside;
    const during = read<{ name: string }>('select name from pups where uid = ?', [pup!.uid]);
    const duringRaw = readRaw('select name, uid from pups where uid = ?', [pup!.uid]);
    const page = engine === 'sqlite' ? sqlitePage<{ name: string }>(t.ctx.db, 'select name from pups where uid = ? order by name', [pup!.uid], 0, 10) : null;
    const rawPage = engine === 'sqlite' ? sqlitePage<unknown[]>(t.ctx.db, 'select name, uid from pups where uid = ? order by name', [pup!.uid], 0, 10, true) : null;
    const pluckPage = engine === 'sqlite' ? sqlitePage<string>(t.ctx.db, 'select name from pups where uid = ? order by name', [pup!.uid], 0, 10, 'pluck') : null;
    setTimeout(release, 50);
    expect((await during)[0]!.name).toBe(pup!.name);
    expect(await duringRaw).toEqual([[pup!.name, pup!.uid]]);
    if (page) expect((await page).rows[0]!.name).toBe(pup!.name);
    if (rawPage) expect(await rawPage).toEqual({ rows: [[pup!.name, pup!.uid]], total: 1 });
    if (pluckPage) expect(await pluckPage).toEqual({ rows: [pup!.name], total: 1 });
    await tx;
  });

  it.runIf(engine === 'sqlite')('pages a sorted read: the page, and the total when it ends within the page', async () => {
    const all = await t.ctx.db.kysely.selectFrom('lockers').select('uid').orderBy('uid').execute();
    expect(all.length).toBeGreaterThan(3);
    const text = 'select uid from lockers order by uid';
    const first = await sqlitePage(t.ctx.db, text, [], 0, 2);
    expect(first.rows).toEqual(all.slice(0, 2));
    // a full page tells the total only when the read ended before its limit
    expect([undefined, all.length]).toContain(first.total);
    expect(await sqlitePage(t.ctx.db, text, [], 2, all.length)).toEqual({ rows: all.slice(2), total: all.length });
    expect(await sqlitePage(t.ctx.db, text, [], all.length + 5, 2)).toEqual({ rows: [], total: all.length });
    // raw: the same rows as arrays
    expect((await sqlitePage(t.ctx.db, text, [], 1, 2, true)).rows).toEqual(all.slice(1, 3).map((r) => [r.uid]));
    expect(await sqlitePage(t.ctx.db, text, [], 2, all.length, true)).toEqual({ rows: all.slice(2).map((r) => [r.uid]), total: all.length });
    // pluck: each row its one value
    expect(await sqlitePage(t.ctx.db, text, [], 1, all.length, 'pluck')).toEqual({ rows: all.slice(1).map((r) => r.uid), total: all.length });
  });

  it.runIf(engine === 'sqlite')('pages any read: the rows of the page, the total whenever the read ended before its limit (a power of two above the page end)', async () => {
    const series = 'with recursive n(i) as (select 1 union all select i + 1 from n where i < ?) select i from n order by i';
    const rowsOf = (from: number, to: number) => Array.from({ length: Math.max(0, to - from) }, (_, k) => ({ i: from + k + 1 }));
    // 100 rows: a page ending at 10 reads up to 16 rows (no total), one ending at 70 reads up to 128 (total known)
    expect(await sqlitePage(t.ctx.db, series, [100], 0, 10)).toEqual({ rows: rowsOf(0, 10) });
    expect(await sqlitePage(t.ctx.db, series, [100], 60, 10)).toEqual({ rows: rowsOf(60, 70), total: 100 });
    expect(await sqlitePage(t.ctx.db, series, [100], 90, 20)).toEqual({ rows: rowsOf(90, 100), total: 100 });
    expect(await sqlitePage(t.ctx.db, series, [100], 200, 20)).toEqual({ rows: [], total: 100 });
    // a page ending exactly at the last row still tells the total
    expect(await sqlitePage(t.ctx.db, series, [16], 8, 8)).toEqual({ rows: rowsOf(8, 16), total: 16 });
    // beyond the literal limits the walk is stepped: the same pages
    expect(await sqlitePage(t.ctx.db, series, [5000], 4090, 20)).toEqual({ rows: rowsOf(4090, 4110) });
    expect(await sqlitePage(t.ctx.db, series, [4100], 4090, 20)).toEqual({ rows: rowsOf(4090, 4100), total: 4100 });
    expect(await sqlitePage(t.ctx.db, series, [5000], 4090, 20, true)).toEqual({ rows: rowsOf(4090, 4110).map((r) => [r.i]) });
  });
});
