// Named prepared statements on PostgreSQL (db/pg-prepared.ts): a registered statement is prepared
// on the connection that runs it (PostgreSQL lists it in pg_prepared_statements, once however
// often it runs); with database.pgPreparedStatements false nothing is prepared. Other statements
// stay unnamed either way.
import crypto from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { CompiledQuery, sql } from 'kysely';
import pg from 'pg';
import { openDatabase, type Db } from '../src/db/database';
import { registerPreparedStatement } from '../src/db/pg-prepared';
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

describe.skipIf(!url)('named prepared statements on PostgreSQL', () => {
  const opened: Db[] = [];
  afterAll(async () => {
    for (const db of opened) await db.close();
    const c = new pg.Client({ connectionString: url! });
    await c.connect();
    await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await c.end();
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
