// SQLite statistics (db/database.ts dropStat4Samples). The service never analyzes its store, but an
// operator's ANALYZE leaves STAT4 samples, and with samples SQLite plans a prepared statement again
// whenever a parameter compared with an indexed column is bound anew: every call of every prepared
// read. Opening the store drops the samples and keeps sqlite_stat1's row counts.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { afterAll, expect, it } from 'vitest';
import { openDatabase } from '../src/db/database';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-stat4-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

function analyzedStore(file: string): void {
  const raw = new BetterSqlite3(file);
  raw.exec('CREATE TABLE items (uid TEXT PRIMARY KEY, owner TEXT NOT NULL, at TEXT NOT NULL); CREATE INDEX items_owner_at ON items (owner, at)');
  const ins = raw.prepare('INSERT INTO items VALUES (?, ?, ?)');
  raw.transaction(() => {
    for (let i = 0; i < 2000; i++) ins.run(`u${i}`, `o${i % 7}`, `2025-01-01T00:00:${String(i % 60).padStart(2, '0')}Z`);
  })();
  raw.exec('ANALYZE');
  expect((raw.prepare('SELECT count(*) AS n FROM sqlite_stat4').get() as { n: number }).n).toBeGreaterThan(0);
  raw.close();
}

it('opening a store an operator analyzed drops the STAT4 samples and keeps the row counts', async () => {
  const file = path.join(dir, 'analyzed.db');
  analyzedStore(file);
  const db = await openDatabase({ url: file });
  try {
    const sqlite = db.sqlite!;
    expect((sqlite.prepare('SELECT count(*) AS n FROM sqlite_stat4').get() as { n: number }).n).toBe(0);
    expect(sqlite.prepare("SELECT stat FROM sqlite_stat1 WHERE idx = 'items_owner_at'").get()).toEqual({ stat: '2000 286 5' });
    // the planner still uses the index, by sqlite_stat1
    const plan = (sqlite.prepare('EXPLAIN QUERY PLAN SELECT uid FROM items WHERE owner = ? ORDER BY at').all('o1') as { detail: string }[]).map((r) => r.detail);
    expect(plan.join(' ')).toContain('USING INDEX items_owner_at');
  } finally {
    await db.close();
  }
});

it('a store never analyzed opens as it is (no statistics tables made)', async () => {
  const file = path.join(dir, 'plain.db');
  const raw = new BetterSqlite3(file);
  raw.exec('CREATE TABLE items (uid TEXT PRIMARY KEY)');
  raw.close();
  const db = await openDatabase({ url: file });
  try {
    expect(db.sqlite!.prepare("SELECT name FROM sqlite_schema WHERE name LIKE 'sqlite_stat%'").all()).toEqual([]);
  } finally {
    await db.close();
  }
});
