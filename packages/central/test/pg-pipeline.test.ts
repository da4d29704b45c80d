// Reads pipelined on PostgreSQL connections of their own (db/pg-pipeline.ts), against the real
// server: the reads of one turn of the event loop leave in one write and are answered in order,
// each its own; a failing statement fails only itself; a connection that dies with reads in
// flight costs none of them (each is sent once more on a fresh connection); an unreachable server
// fails the read instead of hanging it; the store's small reads go through the pipelines.
import crypto from 'node:crypto';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { openDatabase, type Db } from '../src/db/database';
import { PgReadPipelines } from '../src/db/pg-pipeline';
import { registerPreparedStatement } from '../src/db/pg-prepared';
import { preparedReader } from '../src/db/prepared-read';
import { loadConfig } from '../src/config';
import { pgUrl } from './support/harness';

const url = pgUrl();
const tag = crypto.randomBytes(4).toString('hex');
const ECHO = `SELECT $1::int AS n, pg_backend_pid() AS pid /* pipe ${tag} */`;
const SLOW = `SELECT pg_sleep($1::float8) AS slept, 7 AS n /* pipe ${tag} */`;
const DIVIDE = `SELECT 100 / $1::int AS n /* pipe ${tag} */`;
registerPreparedStatement(ECHO);
registerPreparedStatement(SLOW);
registerPreparedStatement(DIVIDE);

type Spied = { writes: number };
/** counts the writes to each socket the pipelines open (net.Socket _write/_writev: one per flush of the corked chunks) */
function spyOnWrites(p: PgReadPipelines): Spied {
  const spied: Spied = { writes: 0 };
  const clients = (p as unknown as { clients: ({ connection: { stream: net.Socket } } | undefined)[] }).clients;
  for (const c of clients) {
    const s = c?.connection.stream as unknown as { _write: (...a: unknown[]) => unknown; _writev?: (...a: unknown[]) => unknown };
    if (!s || (s as { __spied?: boolean }).__spied) continue;
    (s as { __spied?: boolean }).__spied = true;
    const w = s._write.bind(s);
    s._write = (...a: unknown[]) => {
      spied.writes++;
      return w(...a);
    };
    if (s._writev) {
      const wv = s._writev.bind(s);
      s._writev = (...a: unknown[]) => {
        spied.writes++;
        return wv(...a);
      };
    }
  }
  return spied;
}

describe.skipIf(!url)('PostgreSQL reads pipelined on connections of their own', () => {
  const opened: PgReadPipelines[] = [];
  const pipelines = (connections: number, config: pg.ClientConfig = { connectionString: url! }) => {
    const p = new PgReadPipelines(config, true, connections);
    opened.push(p);
    return p;
  };
  afterAll(async () => {
    for (const p of opened) await p.end();
  });

  it('the reads of one turn of the event loop leave in one write, each answered with its own rows, in order', async () => {
    const p = pipelines(1);
    const first = (await p.read<{ pid: number }>(ECHO, [0]))[0]!.pid; // connected, the statement parsed
    const spied = spyOnWrites(p);
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => p.read<[number, number]>(ECHO, [i + 1], true)));
    expect(answers.map((r) => r[0]![0])).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    expect(new Set(answers.map((r) => r[0]![1]))).toEqual(new Set([first])); // one connection, one backend
    expect(spied.writes).toBe(1);
    expect(p.stats.opened).toBe(1);
  });

  it('spreads the reads of a turn over its connections, the least loaded first', async () => {
    const p = pipelines(2);
    const rows = await Promise.all(Array.from({ length: 10 }, (_, i) => p.read<{ n: number; pid: number }>(ECHO, [i])));
    expect(rows.map((r) => r[0]!.n)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(new Set(rows.map((r) => r[0]!.pid)).size).toBe(2);
  });

  it('a connection whose one read the server is running counts as busy: the next read goes to the idle one', async () => {
    const p = pipelines(2);
    await Promise.all([p.read(ECHO, [0]), p.read(ECHO, [1])]); // both connected
    let slowDone = false;
    const slow = p.read<{ n: number }>(SLOW, [0.6]).then((r) => ((slowDone = true), r));
    await new Promise((r) => setTimeout(r, 100)); // the server runs it: pg holds it as the active read, in no queue
    const quick = await p.read<{ n: number }>(ECHO, [5]);
    expect(quick[0]!.n).toBe(5);
    expect(slowDone).toBe(false); // answered while the slow read still ran, by the other connection
    expect((await slow)[0]!.n).toBe(7);
  });

  it('a connection that goes silent (a firewall drops it without a word): its reads are resent once it has answered nothing for the stall time', async () => {
    // a TCP proxy to the server that can silence one connection in both directions
    const conns: { silent: boolean; up: net.Socket; down: net.Socket }[] = [];
    const target = new URL(url!);
    const proxy = net.createServer((down) => {
      const up = net.connect(Number(target.port || 5432), target.hostname);
      const c = { silent: false, up, down };
      conns.push(c);
      down.on('data', (d) => void (c.silent || up.write(d)));
      up.on('data', (d) => void (c.silent || down.write(d)));
      for (const s of [up, down]) s.on('error', () => undefined);
      down.on('close', () => up.destroy());
      up.on('close', () => down.destroy());
    });
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
    try {
      const via = new URL(url!);
      via.hostname = '127.0.0.1';
      via.port = String((proxy.address() as net.AddressInfo).port);
      const p = new PgReadPipelines({ connectionString: via.toString() }, true, 1, 300);
      opened.push(p);
      await p.read(ECHO, [0]);
      conns[0]!.silent = true;
      const t0 = Date.now();
      const answers = await Promise.all([1, 2, 3].map((i) => p.read<{ n: number }>(ECHO, [i])));
      expect(answers.map((r) => r[0]!.n)).toEqual([1, 2, 3]);
      expect(Date.now() - t0).toBeLessThan(5000);
      expect(p.stats.resent).toBe(3);
      expect(p.stats.opened).toBe(2);
    } finally {
      for (const c of conns) c.down.destroy();
      await new Promise((r) => proxy.close(r));
    }
  });

  it('a statement that fails fails alone: the reads beside it in the same write are answered', async () => {
    const p = pipelines(1);
    await p.read(ECHO, [0]);
    const spied = spyOnWrites(p);
    const settled = await Promise.allSettled([p.read<{ n: number }>(DIVIDE, [4]), p.read<{ n: number }>(DIVIDE, [0]), p.read<{ n: number }>(DIVIDE, [5]), p.read<{ n: number }>(ECHO, [3])]);
    expect(spied.writes).toBe(1);
    expect(settled[0]).toEqual({ status: 'fulfilled', value: [{ n: 25 }] });
    expect(settled[1].status).toBe('rejected');
    expect(((settled[1] as PromiseRejectedResult).reason as { code?: string }).code).toBe('22012'); // division_by_zero
    expect(settled[2]).toEqual({ status: 'fulfilled', value: [{ n: 20 }] });
    expect((settled[3] as PromiseFulfilledResult<{ n: number }[]>).value[0]!.n).toBe(3);
  });

  it('a registered text whose Parse failed is parsed again on its next use (no statement left unusable)', async () => {
    const table = `pipe_late_${tag}`;
    const late = `SELECT count(*)::int AS n FROM ${table} WHERE $1::int > 0`;
    registerPreparedStatement(late);
    const p = pipelines(1);
    const twice = await Promise.allSettled([p.read(late, [1]), p.read(late, [2])]);
    expect(twice.map((s) => s.status)).toEqual(['rejected', 'rejected']);
    const admin = new pg.Client({ connectionString: url! });
    await admin.connect();
    try {
      await admin.query(`CREATE TABLE ${table} (k int)`);
      await admin.query(`INSERT INTO ${table} VALUES (1), (2)`);
      expect(await p.read(late, [1])).toEqual([{ n: 2 }]);
    } finally {
      await admin.query(`DROP TABLE IF EXISTS ${table}`);
      await admin.end();
    }
  });

  it('a connection terminated with reads in flight: each read is sent once more on a fresh connection and answered', async () => {
    const p = pipelines(1);
    const pid = (await p.read<{ pid: number }>(ECHO, [0]))[0]!.pid;
    // one read the server is running, five queued behind it on the same connection
    const inFlight = [p.read<{ n: number }>(SLOW, [0.4]), ...Array.from({ length: 5 }, (_, i) => p.read<{ n: number; pid: number }>(ECHO, [i + 1]))];
    await new Promise((r) => setTimeout(r, 100));
    const admin = new pg.Client({ connectionString: url! });
    await admin.connect();
    try {
      expect((await admin.query('SELECT pg_terminate_backend($1) AS ok', [pid])).rows[0].ok).toBe(true);
    } finally {
      await admin.end();
    }
    const answers = await Promise.all(inFlight);
    expect((answers[0] as { n: number }[])[0]!.n).toBe(7);
    expect(answers.slice(1).map((r) => (r as { n: number }[])[0]!.n)).toEqual([1, 2, 3, 4, 5]);
    expect((answers[1] as unknown as { pid: number }[])[0]!.pid).not.toBe(pid); // answered by the new backend
    expect(p.stats.resent).toBe(6);
    expect(p.stats.opened).toBe(2);
    // and the pipelines go on reading
    expect((await p.read<{ n: number }>(ECHO, [42]))[0]!.n).toBe(42);
  });

  it('an unreachable server fails the read (after one more attempt), it does not hang', async () => {
    // a port nothing listens on: take a free one and close it
    const srv = net.createServer();
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    const port = (srv.address() as net.AddressInfo).port;
    await new Promise((r) => srv.close(r));
    const p = pipelines(2, { host: '127.0.0.1', port, user: 'postgres', database: 'test' });
    const t0 = Date.now();
    await expect(p.read(ECHO, [1])).rejects.toThrow(/ECONNREFUSED|terminated/);
    expect(Date.now() - t0).toBeLessThan(5000);
    expect(p.stats.resent).toBe(1);
  });

  it('a connection the server refuses at startup (FATAL): the read fails with the server\'s error, not a bare "terminated"', async () => {
    const u = new URL(url!);
    const p = pipelines(2, { connectionString: `${u.protocol}//${u.username ? `${u.username}@` : ''}${u.host}/no_such_db_${tag}` });
    const t0 = Date.now();
    const reads = await Promise.allSettled([p.read(ECHO, [1]), p.read(ECHO, [2]), p.read(ECHO, [3])]);
    for (const r of reads) expect(r).toMatchObject({ status: 'rejected', reason: { code: '3D000', message: expect.stringMatching(/does not exist/) } });
    expect(Date.now() - t0).toBeLessThan(5000);
  });

  it('after end(), a read is refused; the reads sent before it are answered', async () => {
    const p = pipelines(1);
    await p.read(ECHO, [0]);
    const before = p.read<{ n: number }>(ECHO, [9]);
    await p.end();
    expect((await before)[0]!.n).toBe(9);
    await expect(p.read(ECHO, [1])).rejects.toThrow(/closed/);
  });
});

describe.skipIf(!url)('the store: registered reads through the pipelines, unnamed ones from the pool', () => {
  const schema = `pipe_${tag}`;
  let db: Db;
  let off: Db;
  beforeAll(async () => {
    db = await openDatabase({ url: url!, pgSchema: schema, pgReadPipelines: 1 });
    off = await openDatabase({ url: url!, pgSchema: schema, pgReadPipelines: 0 });
  });
  afterAll(async () => {
    await db?.close();
    await off?.close();
    const c = new pg.Client({ connectionString: url! });
    await c.connect();
    await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await c.end();
  });

  it('preparedReader: a registered text through the pipeline (its own connection), an unnamed one from the pool', async () => {
    const read = preparedReader(db);
    const poolPid = (await db.pool!.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
    const piped = await read<{ pid: number; s: string }>(`SELECT pg_backend_pid() AS pid, current_schema() AS s, ? :: text AS t /* ${tag} */`, ['x']);
    expect(piped[0]!.s).toBe(schema); // the pipelines' connections work in the store's schema
    expect(piped[0]!.pid).not.toBe(poolPid);
    expect(db.pgPipelines!.stats.reads).toBe(1);
    const unnamed = await read<{ pid: number }>(`SELECT pg_backend_pid() AS pid, ? :: text AS t /* ${tag} */`, ['y'], false);
    expect(unnamed[0]!.pid).not.toBe(piped[0]!.pid);
    expect(db.pgPipelines!.stats.reads).toBe(1);
  });

  it('database.pgReadPipelines 0: no pipelines, every read from the pool', async () => {
    expect(off.pgPipelines).toBeUndefined();
    const read = preparedReader(off);
    expect(await read<{ t: string }>(`SELECT ? :: text AS t /* ${tag} */`, ['z'])).toEqual([{ t: 'z' }]);
  });

  it('unset: 2 pipelines, none with pgPreparedStatements false (a transaction-mode pooler in between) unless set', async () => {
    const cfg = (database: Record<string, unknown>) => loadConfig({ env: {}, overrides: { database: { url: url!, ...database } } }).database;
    const opened: Db[] = [];
    try {
      for (const [database, expected] of [
        [{}, 2],
        [{ pgPreparedStatements: false }, undefined],
        [{ pgPreparedStatements: false, pgReadPipelines: 1 }, 1],
      ] as const) {
        const c = cfg(database);
        expect(c.pgReadPipelines, 'resolved in the configuration (check-config prints it)').toBe(expected ?? 0);
        const d = await openDatabase({ url: url!, pgSchema: schema, pgPreparedStatements: c.pgPreparedStatements, pgReadPipelines: c.pgReadPipelines });
        opened.push(d);
        expect((d.pgPipelines as unknown as { clients?: unknown[] } | undefined)?.clients?.length, JSON.stringify(database)).toBe(expected);
      }
    } finally {
      for (const d of opened) await d.close();
    }
  });
});
