// Hot-path queries as hand-written portable SQL run through Kysely's executor (CompiledQuery.raw):
// the same statements on both engines, without building and compiling a query tree per call.
// Placeholders are written as `?` and become $1, $2, ... on PostgreSQL. On SQLite, prepared
// statements are cached per SQL text (better-sqlite3 prepares on every Kysely call otherwise).
import { CompiledQuery, type QueryResult } from 'kysely';
import type BetterSqlite3 from 'better-sqlite3';
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

const patched = new WeakSet<object>();

/**
 * Caches prepared statements of a better-sqlite3 connection by SQL text (bounded). A cached
 * statement busy in an iterate() is not handed out again: a fresh one is prepared instead.
 */
export function enableStatementCache(db: BetterSqlite3.Database, max = 500): void {
  if (patched.has(db)) return;
  patched.add(db);
  const prepare = db.prepare.bind(db);
  const cache = new Map<string, BetterSqlite3.Statement>();
  (db as { prepare: (sql: string) => BetterSqlite3.Statement }).prepare = (source: string) => {
    const hit = cache.get(source);
    if (hit && !hit.busy) return hit;
    const st = prepare(source);
    if (!hit) {
      if (cache.size >= max) cache.delete(cache.keys().next().value!);
      cache.set(source, st);
    }
    return st;
  };
}
