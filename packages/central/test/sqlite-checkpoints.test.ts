// WAL checkpoints in a thread of their own (db/checkpointer.ts, database.sqliteCheckpoints): the
// group-commit runner asks the thread between two batches; the main connection's own checkpoint is
// only a safety net; the WAL starts again from its beginning after each checkpoint instead of
// growing; a thread that dies hands the checkpoints back to the commits; a writer killed with
// SIGKILL while checkpoints run loses no acknowledged row and leaves an intact database.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { sql } from 'kysely';
import BetterSqlite3 from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { openDatabase, type Db } from '../src/db/database';
import { WAL_AUTOCHECKPOINT_PAGES, WAL_SAFETY_PAGES, CHECKPOINT_CHANGES } from '../src/db/checkpointer';
import { SqliteGroupCommitRunner } from '../src/shipments/tx';

const here = path.dirname(fileURLToPath(import.meta.url));
const dirs: string[] = [];
const tmp = () => {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-ckpt-'));
  dirs.push(d);
  return path.join(d, 'central.db');
};
afterAll(() => {
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
});

const pad = 'x'.repeat(300);
const autocheckpoint = (db: Db) => db.sqlite!.pragma('wal_autocheckpoint', { simple: true }) as number;

/** `jobs` group-commit jobs of `rows` rows each, `concurrent` at a time (one batch each round). */
async function write(db: Db, runner: SqliteGroupCommitRunner, from: number, jobs: number, rows: number, concurrent = 16): Promise<number> {
  let next = from;
  for (let done = 0; done < jobs; done += concurrent) {
    await Promise.all(
      Array.from({ length: Math.min(concurrent, jobs - done) }, () => {
        const first = next;
        next += rows;
        return runner.run(async (trx) => {
          for (let i = 0; i < rows; i++) await sql`INSERT INTO ck_rows (id, v) VALUES (${first + i}, ${pad})`.execute(trx);
        });
      }),
    );
  }
  return next;
}

async function open(file: string, mode?: 'background' | 'commit', onFailure?: (e: Error) => void): Promise<Db> {
  const db = await openDatabase({ url: file, sqliteSynchronous: 'FULL', ...(mode ? { sqliteCheckpoints: mode } : {}), ...(onFailure ? { onCheckpointerFailure: onFailure } : {}) });
  await sql`CREATE TABLE IF NOT EXISTS ck_rows (id INTEGER PRIMARY KEY, v TEXT NOT NULL)`.execute(db.kysely);
  return db;
}

describe('SQLite WAL checkpoints in a thread', () => {
  it('background (the default): the thread checkpoints between batches, every frame each time; the WAL is reused instead of growing; the commit keeps only a safety net', async () => {
    const file = tmp();
    const db = await open(file);
    try {
      expect(db.walCheckpointer).toBeDefined();
      expect(autocheckpoint(db)).toBe(WAL_SAFETY_PAGES);
      const runner = new SqliteGroupCommitRunner(db);
      // 12,800 rows of ~300 bytes (about 3.5 MiB of pages): with no checkpoint
      // before the safety net's 40,000 pages the WAL would hold all of it
      const rows = 12_800;
      await write(db, runner, 1, rows / 20, 20);
      const cp = db.walCheckpointer!;
      expect(cp.stats.checkpoints).toBeGreaterThanOrEqual(Math.floor(rows / CHECKPOINT_CHANGES) - 1);
      // the runner held its writes while each checkpoint copied: no checkpoint overlapped a write
      expect(cp.stats.overlapped).toBe(0);
      expect(cp.stats.errors).toBe(0);
      const dataBytes = fs.statSync(file).size;
      const walBytes = fs.statSync(`${file}-wal`).size;
      expect(dataBytes).toBeGreaterThan(3 * 2 ** 20); // the rows are in the database file
      expect(walBytes).toBeLessThan(dataBytes / 2); // the WAL started again after checkpoints
      expect(Number((await sql<{ n: number }>`SELECT count(*) AS n FROM ck_rows`.execute(db.kysely)).rows[0]!.n)).toBe(rows);
    } finally {
      await db.close();
    }
    // every committed row in the file, the file intact
    const check = new BetterSqlite3(file, { readonly: true });
    expect(check.pragma('integrity_check', { simple: true })).toBe('ok');
    expect(check.prepare('SELECT count(*) FROM ck_rows').pluck().get()).toBe(12_800);
    check.close();
  });

  it('writes outside the runner are checkpointed by the timer once no transaction is open', async () => {
    const db = await open(tmp());
    try {
      const cp = db.walCheckpointer!;
      const before = cp.stats.checkpoints;
      // a plain Kysely transaction (as provisioning writes), not through the runner
      await db.kysely.transaction().execute(async (trx) => {
        for (let i = 1; i <= 500; i++) await sql`INSERT INTO ck_rows (id, v) VALUES (${i}, ${pad})`.execute(trx);
      });
      const deadline = Date.now() + 5000;
      while (cp.stats.checkpoints === before && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      expect(cp.stats.checkpoints).toBeGreaterThan(before);
      expect(cp.stats.overlapped).toBe(0);
    } finally {
      await db.close();
    }
  });

  it("'commit': no thread; SQLite checkpoints in the COMMIT at the group commit's size", async () => {
    const db = await open(tmp(), 'commit');
    try {
      expect(db.walCheckpointer).toBeUndefined();
      expect(autocheckpoint(db)).toBe(WAL_AUTOCHECKPOINT_PAGES);
      const runner = new SqliteGroupCommitRunner(db);
      await write(db, runner, 1, 64, 20);
      expect(Number((await sql<{ n: number }>`SELECT count(*) AS n FROM ck_rows`.execute(db.kysely)).rows[0]!.n)).toBe(1280);
    } finally {
      await db.close();
    }
  });

  it('in memory: no thread (nothing to checkpoint into)', async () => {
    const db = await openDatabase({ url: ':memory:' });
    expect(db.walCheckpointer).toBeUndefined();
    await db.close();
  });

  it('a thread that dies hands the checkpoints back to the commits; writes go on', async () => {
    const failures: Error[] = [];
    const file = tmp();
    const db = await open(file, 'background', (e) => failures.push(e));
    try {
      const runner = new SqliteGroupCommitRunner(db);
      let next = await write(db, runner, 1, 160, 20);
      const cp = db.walCheckpointer!;
      expect(cp.stats.checkpoints).toBeGreaterThan(0);
      // the fault: the thread ends as a crash would end it
      await cp.kill();
      await new Promise((r) => setTimeout(r, 50));
      expect(failures).toHaveLength(1);
      expect((failures[0] as Error & { code?: string }).code).toBe('SQLITE_CHECKPOINTER_FAILED');
      expect(cp.alive).toBe(false);
      expect(await cp.checkpoint()).toBeNull();
      expect(autocheckpoint(db)).toBe(WAL_AUTOCHECKPOINT_PAGES);
      next = await write(db, runner, next, 160, 20);
      expect(Number((await sql<{ n: number }>`SELECT count(*) AS n FROM ck_rows`.execute(db.kysely)).rows[0]!.n)).toBe(next - 1);
    } finally {
      await db.close();
    }
  });

  it('a process that never closes the database still exits; one that asks for a checkpoint while the thread starts gets it', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', path.join(here, 'support/checkpoint-noclose.ts'), tmp()], { stdio: ['ignore', 'pipe', 'pipe'], cwd: path.resolve(here, '../../..') });
    let out = '';
    let err = '';
    child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
    const code = await new Promise<number | null>((r) => child.on('exit', (c) => r(c)));
    clearTimeout(timer);
    expect(err).toBe('');
    expect(code).toBe(0); // not killed after 20 s, not ended early with a pending await (13)
    const r = JSON.parse(out.trim()) as { log: number; checkpointed: number } | null;
    expect(r).not.toBeNull();
    expect(r!.checkpointed).toBe(r!.log);
  }, 30_000);

  it('a writer killed with SIGKILL while checkpoints run loses no acknowledged row; the database stays intact (three kills)', async () => {
    const file = tmp();
    const acked = new Set<number>();
    for (let round = 0; round < 3; round++) {
      const child = spawn(process.execPath, ['--import', 'tsx', path.join(here, 'support/checkpoint-writer.ts'), file], { stdio: ['ignore', 'pipe', 'pipe'], cwd: path.resolve(here, '../../..') });
      let err = '';
      child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
      let buf = '';
      let checkpoints = 0;
      const killed = new Promise<void>((resolve, reject) => {
        child.on('exit', () => resolve());
        child.on('error', reject);
      });
      // killed at some point after its second checkpoint of this round, with jobs in flight
      const killAt = 2 + round;
      child.stdout!.on('data', (d: Buffer) => {
        buf += d.toString();
        let i: number;
        while ((i = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, i);
          buf = buf.slice(i + 1);
          const [kind, n] = line.split(' ');
          if (kind === 'ok') acked.add(Number(n));
          if (kind === 'ckpt' && ++checkpoints === killAt) setTimeout(() => child.kill('SIGKILL'), 7 * round + 3);
        }
      });
      const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
      await killed;
      clearTimeout(timer);
      expect(checkpoints, err).toBeGreaterThanOrEqual(killAt);
      const check = new BetterSqlite3(file);
      try {
        expect(check.pragma('integrity_check', { simple: true })).toBe('ok');
        const has = check.prepare('SELECT count(*) FROM ck_rows WHERE id BETWEEN ? AND ?').pluck();
        // every acknowledged job's 20 rows are there
        for (const last of acked) expect(has.get(last - 19, last)).toBe(20);
      } finally {
        check.close();
      }
    }
    expect(acked.size).toBeGreaterThan(100);
  }, 120_000);
});
