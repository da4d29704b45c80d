// Named prepared statements on PostgreSQL (db/pg-prepared.ts): a registered statement is prepared
// on the connection that runs it (PostgreSQL lists it in pg_prepared_statements, once however
// often it runs); with database.pgPreparedStatements false nothing is prepared. Other statements
// stay unnamed either way. A transaction's BEGIN goes with its first statement: one round trip
// less (counted in ReadyForQuery messages), with the same outcomes, errors included. A statement
// held for COMMIT (rawQueryAtCommit) is written with it: one round trip less again; its failure
// fails the COMMIT (nothing of the transaction stays), a rollback never writes it, and any
// statement after it writes it first.
import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CompiledQuery, sql } from 'kysely';
import pg from 'pg';
import { openDatabase, type Db } from '../src/db/database';
import { AtCommit, AtCommitDropped, CommitRefused, registerPreparedStatement } from '../src/db/pg-prepared';
import { rawQuery, rawQueryAtCommit } from '../src/shipments/sqlq';
import { pgUrl } from './support/harness';

const url = pgUrl();
const schema = `prep_${crypto.randomBytes(4).toString('hex')}`;
const HOT = `SELECT $1::int + 1 AS n /* ${schema} */`;
const COLD = `SELECT $1::int + 2 AS n /* ${schema} */`;
registerPreparedStatement(HOT);

async function preparedAfterRunning(db: Db): Promise<string[]> {
  return db.kysely.connection().execute(async (c) => {
    for (let i = 0; i < 3; i++) {
      expect((await c.executeQuery<{ n: number }>(CompiledQuery.raw(HOT, [i]))).rows[0]!.n).toBe(i + 1);
      expect((await c.executeQuery<{ n: number }>(CompiledQuery.raw(COLD, [i]))).rows[0]!.n).toBe(i + 2);
    }
    const r = await sql<{ statement: string }>`SELECT statement FROM pg_prepared_statements`.execute(c);
    return r.rows.map((x) => x.statement).filter((t) => t.includes(schema));
  });
}

/** The same through Db.pgRead (the pool, not Kysely): objects, then arrays (rowMode 'array'). */
async function preparedAfterPgRead(db: Db): Promise<string[]> {
  for (let i = 0; i < 3; i++) {
    expect(await db.pgRead!(HOT, [i])).toEqual([{ n: i + 1 }]);
    expect(await db.pgRead!(COLD, [i], true)).toEqual([[i + 2]]);
  }
  // poolSize 1: the pool's one connection is the one that ran them
  const r = await db.pool!.query<{ statement: string }>('SELECT statement FROM pg_prepared_statements');
  return r.rows.map((x) => x.statement).filter((t) => t.includes(schema));
}

// the schema every suite below works in, dropped once all of them have run (a suite's own
// afterAll ran before the next suite created it again: each run left one behind)
afterAll(async () => {
  if (!url) return;
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await c.end();
});

describe.skipIf(!url)('named prepared statements on PostgreSQL', () => {
  const opened: Db[] = [];
  afterAll(async () => {
    for (const db of opened) await db.close();
  });

  it('prepares a registered statement once per connection, and only that one', async () => {
    const db = await openDatabase({ url: url!, pgSchema: schema, poolSize: 1 });
    opened.push(db);
    expect(await preparedAfterRunning(db)).toEqual([HOT]);
  });

  it('Db.pgRead (reads straight from the pool) prepares a registered statement, and only that one', async () => {
    const db = await openDatabase({ url: url!, pgSchema: schema, poolSize: 1 });
    opened.push(db);
    expect(await preparedAfterPgRead(db)).toEqual([HOT]);
  });

  it('prepares nothing with pgPreparedStatements false', async () => {
    const db = await openDatabase({ url: url!, pgSchema: schema, poolSize: 1, pgPreparedStatements: false });
    opened.push(db);
    expect(await preparedAfterRunning(db)).toEqual([]);
    expect(await preparedAfterPgRead(db)).toEqual([]);
  });
});

/**
 * A store with one pooled connection and `table` (k int primary key, v text); roundTrips counts the
 * ReadyForQuery messages on that connection while fn runs: one per round trip.
 */
function oneConnection(table: string) {
  const state = { db: undefined as unknown as Db, rfq: 0 };
  beforeAll(async () => {
    state.db = await openDatabase({ url: url!, pgSchema: schema, poolSize: 1 });
    await state.db.pool!.query(`CREATE TABLE IF NOT EXISTS ${table} (k int primary key, v text)`);
    const client = await state.db.pool!.connect();
    (client as unknown as { connection: { on(e: string, f: () => void): void } }).connection.on('readyForQuery', () => state.rfq++);
    client.release();
  });
  afterAll(async () => state.db?.close());
  return {
    db: () => state.db,
    async roundTrips(fn: () => Promise<unknown>): Promise<number> {
      const before = state.rfq;
      await fn();
      return state.rfq - before;
    },
  };
}

describe.skipIf(!url)('BEGIN sent with the first statement of a transaction', () => {
  const table = `${schema}.begin_t`;
  const conn = oneConnection(table);
  const roundTrips = conn.roundTrips;
  let db: Db;
  beforeAll(() => {
    db = conn.db();
  });

  it('a transaction of one statement with values and COMMIT: two round trips, the row committed', async () => {
    const n = await roundTrips(() => db.kysely.transaction().execute((trx) => trx.executeQuery(CompiledQuery.raw(`INSERT INTO ${table} (k, v) VALUES ($1, $2)`, [1, 'one']))));
    expect(n).toBe(2);
    expect((await db.pool!.query(`SELECT v FROM ${table} WHERE k = 1`)).rows).toEqual([{ v: 'one' }]);
  });

  it('rolled back: the first statement ran inside the transaction (its row is gone)', async () => {
    const n = await roundTrips(() =>
      db.kysely
        .transaction()
        .execute(async (trx) => {
          await trx.executeQuery(CompiledQuery.raw(`INSERT INTO ${table} (k, v) VALUES ($1, $2)`, [2, 'two']));
          throw new Error('job failed');
        })
        .catch((e: Error) => expect(e.message).toBe('job failed')),
    );
    expect(n).toBe(2);
    expect((await db.pool!.query(`SELECT count(*)::int AS n FROM ${table} WHERE k = 2`)).rows[0].n).toBe(0);
  });

  it('the first statement fails: its own error (code), the transaction rolled back, the connection idle and usable', async () => {
    const err = (await db.kysely
      .transaction()
      .execute((trx) => trx.executeQuery(CompiledQuery.raw(`INSERT INTO ${table} (k, v) VALUES ($1, $2)`, [1, 'again'])))
      .catch((e: unknown) => e)) as { code?: string };
    expect(err.code).toBe('23505');
    const client = await db.pool!.connect();
    try {
      expect((client as unknown as { getTransactionStatus(): string }).getTransactionStatus()).toBe('I');
    } finally {
      client.release();
    }
    await db.kysely.transaction().execute((trx) => trx.executeQuery(CompiledQuery.raw(`INSERT INTO ${table} (k, v) VALUES ($1, $2)`, [3, 'three'])));
    expect((await db.pool!.query(`SELECT v FROM ${table} ORDER BY k`)).rows).toEqual([{ v: 'one' }, { v: 'three' }]);
  });

  it('a first statement without values (a SAVEPOINT, valid only in a transaction) goes after a BEGIN of its own', async () => {
    const n = await roundTrips(() =>
      db.kysely.transaction().execute(async (trx) => {
        await trx.executeQuery(CompiledQuery.raw('SAVEPOINT s1'));
        await trx.executeQuery(CompiledQuery.raw(`INSERT INTO ${table} (k, v) VALUES ($1, $2)`, [4, 'four']));
        await trx.executeQuery(CompiledQuery.raw('ROLLBACK TO SAVEPOINT s1'));
      }),
    );
    expect(n).toBe(5);
    expect((await db.pool!.query(`SELECT count(*)::int AS n FROM ${table} WHERE k = 4`)).rows[0].n).toBe(0);
  });

  it('a registered (named) first statement: BEGIN on its own until it is parsed on the connection, then with it', async () => {
    const first = await roundTrips(() => db.kysely.transaction().execute((trx) => trx.executeQuery(CompiledQuery.raw(HOT, [41]))));
    const again = await roundTrips(async () => expect((await db.kysely.transaction().execute((trx) => trx.executeQuery<{ n: number }>(CompiledQuery.raw(HOT, [41])))).rows).toEqual([{ n: 42 }]));
    expect([first, again]).toEqual([3, 2]);
  });

  it('registered statements through Kysely (an INSERT, an UPDATE, a SELECT), in a transaction and outside: described once each, with their row counts and rows', async () => {
    const INSERT = `INSERT INTO ${table} (k, v) VALUES ($1, $2)`;
    const UPDATE = `UPDATE ${table} SET v = $2 WHERE k >= 10 AND k <= $1`;
    registerPreparedStatement(INSERT);
    registerPreparedStatement(UPDATE);
    const client = await db.pool!.connect();
    const described = { rows: 0, none: 0 };
    const conn = (client as unknown as { connection: { on(e: string, f: () => void): void; removeAllListeners(e: string): void } }).connection;
    conn.on('rowDescription', () => described.rows++);
    conn.on('noData', () => described.none++);
    client.release();
    try {
      const counts: (bigint | undefined)[] = [];
      for (const k of [10, 11, 12]) {
        counts.push((await db.kysely.executeQuery(CompiledQuery.raw(INSERT, [k, `v${k}`]))).numAffectedRows);
        await db.kysely.transaction().execute(async (trx) => {
          counts.push((await trx.executeQuery(CompiledQuery.raw(UPDATE, [k, `u${k}`]))).numAffectedRows);
          expect((await trx.executeQuery<{ n: number }>(CompiledQuery.raw(HOT, [k]))).rows).toEqual([{ n: k + 1 }]);
        });
      }
      expect(counts).toEqual([1n, 1n, 1n, 2n, 1n, 3n]);
      expect((await db.pool!.query(`SELECT k, v FROM ${table} WHERE k >= 10 ORDER BY k`)).rows).toEqual([{ k: 10, v: 'u12' }, { k: 11, v: 'u12' }, { k: 12, v: 'u12' }]);
      // HOT was described by an earlier test on this connection (or here, once); INSERT and UPDATE once each
      expect(described.none).toBe(2);
      expect(described.rows).toBeLessThanOrEqual(1);
    } finally {
      conn.removeAllListeners('noData');
    }
  });

  it('a transaction that sends no statement costs no round trip', async () => {
    expect(await roundTrips(() => db.kysely.transaction().execute(async () => 'nothing'))).toBe(0);
  });
});

describe.skipIf(!url)('a statement held for COMMIT (rawQueryAtCommit)', () => {
  const table = `${schema}.held_t`;
  const INSERT = `INSERT INTO ${table} (k, v) VALUES (?, ?) RETURNING k`;
  const conn = oneConnection(table);
  const roundTrips = conn.roundTrips;
  let db: Db;
  const rows = async () => (await db.pool!.query<{ k: number; v: string }>(`SELECT k, v FROM ${table} ORDER BY k`)).rows;
  const idle = async () => {
    const client = await db.pool!.connect();
    try {
      return (client as unknown as { getTransactionStatus(): string }).getTransactionStatus();
    } finally {
      client.release();
    }
  };

  beforeAll(async () => {
    db = conn.db();
    // the INSERT parsed on the one connection (a named statement's first run takes a BEGIN of its own)
    await db.kysely.transaction().execute((trx) => rawQuery(trx, db, INSERT, [0, 'parsed']));
    await db.pool!.query(`DELETE FROM ${table}`);
  });

  it('after a first statement: written with the COMMIT (two round trips, not three), both rows committed, its answer its rows', async () => {
    let answer: Promise<{ rows: { k: number }[]; numAffectedRows: number }> | undefined;
    const n = await roundTrips(() =>
      db.kysely.transaction().execute(async (trx) => {
        await rawQuery(trx, db, INSERT, [1, 'first']);
        answer = (await rawQueryAtCommit<{ k: number }>(trx, db, INSERT, [2, 'held'])).answer;
      }),
    );
    expect(n).toBe(2);
    expect(await answer).toEqual({ rows: [{ k: 2 }], numAffectedRows: 1 });
    expect(await rows()).toEqual([
      { k: 1, v: 'first' },
      { k: 2, v: 'held' },
    ]);
  });

  it("the transaction's only statement: BEGIN, it and COMMIT in one round trip", async () => {
    let answer: Promise<unknown> | undefined;
    const n = await roundTrips(() =>
      db.kysely.transaction().execute(async (trx) => {
        answer = (await rawQueryAtCommit(trx, db, INSERT, [3, 'alone'])).answer; // (returned, the job would wait for the COMMIT: never)
      }),
    );
    expect(n).toBe(1);
    expect(await answer).toEqual({ rows: [{ k: 3 }], numAffectedRows: 1 });
    expect((await rows()).map((r) => r.k)).toEqual([1, 2, 3]);
  });

  it('it fails (a duplicate key): the COMMIT fails with its error, nothing of the transaction stays, the connection idle and usable', async () => {
    let answer: Promise<unknown> | undefined;
    const err = (await db.kysely
      .transaction()
      .execute(async (trx) => {
        await rawQuery(trx, db, INSERT, [4, 'rolled back']);
        answer = (await rawQueryAtCommit(trx, db, INSERT, [1, 'duplicate'])).answer;
        return 'the job ended well';
      })
      .catch((e: unknown) => e)) as { code?: string };
    expect(err.code).toBe('23505');
    expect(((await answer!.catch((e: unknown) => e)) as { code?: string }).code).toBe('23505');
    expect((await rows()).map((r) => r.k)).toEqual([1, 2, 3]);
    expect(await idle()).toBe('I');
  });

  it('the job fails after holding it: rolled back, it is never written, its answer fails with AtCommitDropped', async () => {
    let answer: Promise<unknown> | undefined;
    const n = await roundTrips(() =>
      db.kysely
        .transaction()
        .execute(async (trx) => {
          answer = (await rawQueryAtCommit(trx, db, INSERT, [5, 'never'])).answer;
          throw new Error('job failed');
        })
        .catch((e: Error) => expect(e.message).toBe('job failed')),
    );
    expect(n).toBe(0); // held BEGIN and held statement: nothing reached the server
    expect(await answer!.catch((e: unknown) => e)).toBeInstanceOf(AtCommitDropped);
    expect((await rows()).map((r) => r.k)).toEqual([1, 2, 3]);
  });

  it('a statement after it (another held one too) writes it first: the later statements see its row, all committed', async () => {
    const answers: Promise<unknown>[] = [];
    let seen = -1;
    await db.kysely.transaction().execute(async (trx) => {
      answers.push((await rawQueryAtCommit(trx, db, INSERT, [6, 'held first'])).answer);
      seen = (await rawQuery<{ n: number }>(trx, db, `SELECT count(*)::int AS n FROM ${table} WHERE k = 6`, [])).rows[0]!.n;
      answers.push((await rawQueryAtCommit(trx, db, INSERT, [7, 'held second'])).answer);
      answers.push((await rawQueryAtCommit(trx, db, INSERT, [8, 'held third'])).answer);
    });
    expect(seen).toBe(1);
    expect(await Promise.all(answers)).toEqual([6, 7, 8].map((k) => ({ rows: [{ k }], numAffectedRows: 1 })));
    expect((await rows()).map((r) => r.k)).toEqual([1, 2, 3, 6, 7, 8]);
  });

  it('a named statement not yet parsed here, alone in its transaction, whose Parse fails: the COMMIT fails, and the same text works on that connection later', async () => {
    const LATER = `INSERT INTO ${schema}.later_t (k) VALUES (?) RETURNING k`;
    const held = () =>
      db.kysely.transaction().execute(async (trx) => {
        void (await rawQueryAtCommit(trx, db, LATER, [1])).answer;
      });
    expect(((await held().catch((e: unknown) => e)) as { code?: string }).code).toBe('42P01');
    await db.pool!.query(`CREATE TABLE ${schema}.later_t (k int primary key)`);
    // (pg took BEGIN's ParseComplete for the statement's when both went in one write: 26000 here)
    await held();
    expect((await db.pool!.query(`SELECT k FROM ${schema}.later_t`)).rows).toEqual([{ k: 1 }]);
  });

  it('committed, but a row of its answer the client cannot read: the transaction succeeds, only the answer fails', async () => {
    const CIRCLE = `INSERT INTO ${table} (k, v) VALUES (?, ?) RETURNING circle(point(k, k), 1) AS c`;
    const original = pg.types.getTypeParser(pg.types.builtins.CIRCLE, 'text');
    pg.types.setTypeParser(pg.types.builtins.CIRCLE, () => {
      throw new Error('parser refused');
    });
    try {
      let answer: Promise<unknown> | undefined;
      expect(
        await db.kysely.transaction().execute(async (trx) => {
          answer = (await rawQueryAtCommit(trx, db, CIRCLE, [11, 'unreadable answer'])).answer;
          return 'committed';
        }),
      ).toBe('committed');
      expect(((await answer!.catch((e: unknown) => e)) as Error).message).toBe('parser refused');
      expect((await rows()).map((r) => r.k)).toContain(11);
    } finally {
      pg.types.setTypeParser(pg.types.builtins.CIRCLE, original);
    }
  });

  it('an error the job swallowed (its held statement failed when a later one wrote it first): COMMIT answered ROLLBACK is a failure, nothing stays', async () => {
    const before = (await rows()).map((r) => r.k);
    const err = await db.kysely
      .transaction()
      .execute(async (trx) => {
        await rawQuery(trx, db, INSERT, [12, 'lost with the transaction']);
        void (await rawQueryAtCommit(trx, db, INSERT, [1, 'duplicate'])).answer;
        await rawQuery(trx, db, 'SELECT 1', []).catch(() => 'swallowed');
        return 'the job ended well';
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CommitRefused);
    expect((err as CommitRefused).code).toBe('COMMIT_ROLLED_BACK');
    expect((await rows()).map((r) => r.k)).toEqual(before);
    expect(await idle()).toBe('I');
  });

  it('held on a connection that goes back to the pool without COMMIT or ROLLBACK: never written, dropped at the next checkout', async () => {
    const before = (await rows()).map((r) => r.k);
    const at = new AtCommit();
    await db.kysely.connection().execute((c) => c.executeQuery(CompiledQuery.raw(`INSERT INTO ${table} (k, v) VALUES ($1, $2)`, [9, 'lost', at])));
    await db.kysely.connection().execute((c) => c.executeQuery(CompiledQuery.raw('SELECT 1')));
    expect(await at.promise.catch((e: unknown) => e)).toBeInstanceOf(AtCommitDropped);
    // and by pool.query (a callback query on the same client), which never writes it either
    const at2 = new AtCommit();
    await db.kysely.connection().execute((c) => c.executeQuery(CompiledQuery.raw(`INSERT INTO ${table} (k, v) VALUES ($1, $2)`, [10, 'lost', at2])));
    expect((await rows()).map((r) => r.k)).toEqual(before);
    expect(await at2.promise.catch((e: unknown) => e)).toBeInstanceOf(AtCommitDropped);
  });
});

describe.skipIf(!url)('Db.pgRead as a PooledRead: a registered statement described once, then read without Describe', () => {
  let db: Db;
  let descriptions = 0;
  // every type the reads return, nulls among them, as pg's Query reads them
  const SHAPES = `SELECT g AS n, 'pup ' || g AS name, NULL::text AS none, g::bigint * 3000000000 AS big, (g * 1.5)::numeric AS num, g % 2 = 0 AS even,
    '{"a":[1,"x"]}'::jsonb AS doc, timestamp '2026-11-28 10:00:00.123' + g * interval '1 day' AS at, ARRAY['a', 'b'] AS arr
    FROM generate_series(1, $1::int) g /* ${schema} shapes */`;
  registerPreparedStatement(SHAPES);
  beforeAll(async () => {
    db = await openDatabase({ url: url!, pgSchema: schema, poolSize: 1 });
    const client = await db.pool!.connect();
    (client as unknown as { connection: { on(e: string, f: () => void): void } }).connection.on('rowDescription', () => descriptions++);
    client.release();
  });
  afterAll(async () => db?.close());

  it('answers the same rows and values as a pg Query, as objects and as arrays, with one RowDescription for all the reads', async () => {
    const before = descriptions;
    const objects = [await db.pgRead!(SHAPES, [3]), await db.pgRead!(SHAPES, [3]), await db.pgRead!(SHAPES, [0])];
    const arrays = [await db.pgRead!(SHAPES, [3], true), await db.pgRead!(SHAPES, [2], true)];
    expect(descriptions - before).toBe(1);
    const viaQuery = (await db.pool!.query({ text: SHAPES, values: [3] })).rows;
    const viaQueryArrays = (await db.pool!.query({ text: SHAPES, values: [2], rowMode: 'array' })).rows;
    expect(viaQuery).toHaveLength(3);
    expect(objects[0]).toEqual(viaQuery);
    expect(objects[1]).toEqual(viaQuery);
    expect(objects[2]).toEqual([]);
    expect(arrays[0]).toEqual(viaQuery.map((r) => Object.values(r)));
    expect(arrays[1]).toEqual(viaQueryArrays);
    expect(objects[0]![1]).toEqual({ n: 2, name: 'pup 2', none: null, big: 6000000000, num: 3, even: true, doc: { a: [1, 'x'] }, at: viaQuery[1].at, arr: ['a', 'b'] });
    expect(viaQuery[1].at).toBeInstanceOf(Date);
  });

  it('a statement the server refuses: its error (code) once, and the connection reads on', async () => {
    const err = (await db.pgRead!(SHAPES, ['not a number']).catch((e: unknown) => e)) as { code?: string };
    expect(err.code).toBe('22P02');
    expect(await db.pgRead!(SHAPES, [1], true)).toEqual([[1, 'pup 1', null, 3000000000, 1.5, false, { a: [1, 'x'] }, expect.any(Date), ['a', 'b']]]);
  });

  it('a value pg cannot send (a cyclic object): refused before the server runs anything, and the connection reads on', async () => {
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    await expect(db.pgRead!(SHAPES, [cyclic])).rejects.toThrow();
    expect(await db.pgRead!(SHAPES, [2], true)).toHaveLength(2);
  });

  it('a shape is per connection: after a migration adds a column, a new connection reads the new shape; the old one is refused by the server, not misread', async () => {
    const table = `${schema}.shape_t`;
    const ALL = `SELECT * FROM ${table} ORDER BY a`;
    registerPreparedStatement(ALL);
    await db.pool!.query(`CREATE TABLE ${table} (a int)`);
    await db.pool!.query(`INSERT INTO ${table} VALUES (1)`);
    expect(await db.pgRead!(ALL, [])).toEqual([{ a: 1 }]); // described on db's one connection
    expect(await db.pgRead!(ALL, [])).toEqual([{ a: 1 }]);
    await db.pool!.query(`ALTER TABLE ${table} ADD COLUMN b int DEFAULT 2`);
    // another pool (another central instance's connection): the same text, prepared after the change
    const other = await openDatabase({ url: url!, pgSchema: schema, poolSize: 1 });
    try {
      expect(await other.pgRead!(ALL, [])).toEqual([{ a: 1, b: 2 }]);
      expect(await other.pgRead!(ALL, [], true)).toEqual([[1, 2]]);
    } finally {
      await other.close();
    }
    // the first connection's statement was prepared for one column: the server refuses it
    const err = (await db.pgRead!(ALL, []).catch((e: unknown) => e)) as { code?: string; message?: string };
    expect(err.code ?? err.message).toBe('0A000');
  });

  it('an unsendable value inside a transaction (Kysely): nothing written, the transaction rolled back, the connection runs the statement next', async () => {
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    await expect(db.kysely.transaction().execute((trx) => trx.executeQuery(CompiledQuery.raw(SHAPES, [cyclic])))).rejects.toThrow();
    await expect(db.kysely.transaction().execute(async (trx) => {
      await trx.executeQuery(CompiledQuery.raw(SHAPES, [1]));
      return trx.executeQuery(CompiledQuery.raw(SHAPES, [cyclic]));
    })).rejects.toThrow();
    const rows = await db.kysely.transaction().execute(async (trx) => (await trx.executeQuery(CompiledQuery.raw(SHAPES, [2]))).rows);
    expect(rows).toHaveLength(2);
    const client = await db.pool!.connect();
    try {
      expect((client as unknown as { getTransactionStatus(): string }).getTransactionStatus()).toBe('I');
    } finally {
      client.release();
    }
  });

  it('the connection killed under the pool: the read fails with the loss, the next one reads on a new connection', async () => {
    const pid = (await db.pool!.query<{ p: number }>('SELECT pg_backend_pid() AS p')).rows[0]!.p;
    const killer = new pg.Client({ connectionString: url! });
    await killer.connect();
    try {
      await killer.query('SELECT pg_terminate_backend($1)', [pid]);
    } finally {
      await killer.end();
    }
    // the pool may notice the loss while idle (then the read gets a new connection) or on the read
    const first = await db.pgRead!(SHAPES, [1]).then(
      (rows) => ({ rows }),
      (e: Error) => ({ error: e.message }),
    );
    if ('error' in first) expect(first.error).toMatch(/terminat|Connection/i);
    else expect(first.rows).toHaveLength(1);
    expect(await db.pgRead!(SHAPES, [2])).toHaveLength(2);
    expect((await db.pool!.query<{ p: number }>('SELECT pg_backend_pid() AS p')).rows[0]!.p).not.toBe(pid);
  });
});
