// The PostgreSQL introspector the migrator uses (db/pg-introspector.ts): only the tables of the
// schemas on the search path, found without per-column catalog lookups (Kysely's own scans every
// column of the whole database and raced with other schemas being dropped). Migrating twice
// finds the migration table and applies nothing the second time.
import crypto from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { openDatabase, type Db } from '../src/db/database';
import { pgUrl } from './support/harness';

const url = pgUrl();
const a = `intro_a_${crypto.randomBytes(4).toString('hex')}`;
const b = `intro_b_${crypto.randomBytes(4).toString('hex')}`;

describe.skipIf(!url)('search-path introspector on PostgreSQL', () => {
  const opened: Db[] = [];
  afterAll(async () => {
    for (const db of opened) await db.close();
    const c = new pg.Client({ connectionString: url! });
    await c.connect();
    for (const s of [a, b]) await c.query(`DROP SCHEMA IF EXISTS ${s} CASCADE`);
    await c.end();
  });

  it('sees the tables of its own schema only; a second migrate applies nothing', async () => {
    const dbA = await openDatabase({ url: url!, pgSchema: a, poolSize: 2 });
    const dbB = await openDatabase({ url: url!, pgSchema: b, poolSize: 2 });
    opened.push(dbA, dbB);
    expect((await dbA.migrate()).length).toBeGreaterThan(5);
    expect(await dbA.migrate()).toEqual([]);
    const tablesA = await dbA.kysely.introspection.getTables();
    expect(tablesA.every((t) => t.schema === a)).toBe(true);
    expect(tablesA.map((t) => t.name)).toEqual(expect.arrayContaining(['shipments', 'lockers', 'kysely_migration']));
    expect(await dbB.kysely.introspection.getTables()).toEqual([]);
    expect((await dbB.kysely.introspection.getSchemas()).map((s) => s.name)).toEqual(expect.arrayContaining([a, b]));
  });
});
