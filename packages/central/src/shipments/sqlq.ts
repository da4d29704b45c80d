// Hot-path queries as hand-written portable SQL run through Kysely's executor (CompiledQuery.raw):
// the same statements on both engines, without building and compiling a query tree per call.
// Placeholders are written as `?` and become $1, $2, ... on PostgreSQL. (On SQLite the store's
// statement cache, db/database.ts, then reuses the prepared statement.)
import { CompiledQuery, type QueryResult } from 'kysely';
import type { Engine } from '../db/database';
import type { Trx } from './tx';

const pgText = new Map<string, string>();

function forEngine(engine: Engine, text: string): string {
  if (engine === 'sqlite') return text;
  let t = pgText.get(text);
  if (!t) {
    let n = 0;
    t = text.replace(/\?/g, () => `$${++n}`);
    pgText.set(text, t);
  }
  return t;
}

export async function rawQuery<R>(trx: Trx, engine: Engine, text: string, params: readonly unknown[]): Promise<QueryResult<R>> {
  return trx.executeQuery<R>(CompiledQuery.raw(forEngine(engine, text), [...params]));
}
