// Hot-path queries as hand-written portable SQL: the same statements on both engines, without
// building and compiling a Kysely query tree per call. Placeholders are written as `?` and become
// $1, $2, ... on PostgreSQL.
//
// SQLite: the statement runs directly on the better-sqlite3 handle as a cached prepared statement
// (synchronously, no trip through Kysely's executor). That is the same connection the enclosing
// Kysely transaction runs on (SQLite has exactly one), so the statement is part of that
// transaction; callers must only use rawQuery inside a job of the TxRunner (they pass its trx).
// PostgreSQL: through the transaction's own connection (trx.executeQuery).
import type BetterSqlite3 from 'better-sqlite3';
import { CompiledQuery } from 'kysely';
import type { Db } from '../db/database';
import type { Trx } from './tx';

export interface RawResult<R> {
  rows: R[];
  /** rows changed by an INSERT/UPDATE/DELETE without RETURNING */
  numAffectedRows: number;
}

const pgText = new Map<string, string>();

function pgSql(text: string): string {
  let t = pgText.get(text);
  if (!t) {
    let n = 0;
    t = text.replace(/\?/g, () => `$${++n}`);
    pgText.set(text, t);
  }
  return t;
}

const stmtCaches = new WeakMap<BetterSqlite3.Database, Map<string, BetterSqlite3.Statement>>();

/** The cached prepared statement for this SQL text on this SQLite handle. */
export function sqliteStatement(sqlite: BetterSqlite3.Database, text: string): BetterSqlite3.Statement {
  let cache = stmtCaches.get(sqlite);
  if (!cache) {
    cache = new Map();
    stmtCaches.set(sqlite, cache);
  }
  let st = cache.get(text);
  if (!st) {
    st = sqlite.prepare(text);
    cache.set(text, st);
  }
  return st;
}

const TIMES: Map<string, [number, number]> | undefined = process.env.LOCKER_SQL_TIMES ? ((globalThis as { __stmtTimes?: Map<string, [number, number]> }).__stmtTimes = new Map()) : undefined;

export async function rawQuery<R>(trx: Trx, db: Db, text: string, params: readonly unknown[]): Promise<RawResult<R>> {
  if (db.engine === 'sqlite') {
    const st = sqliteStatement(db.sqlite!, text);
    if (TIMES) {
      const t0 = performance.now();
      const r = st.reader ? st.all(...params) : st.run(...params);
      const e = TIMES.get(text) ?? [0, 0];
      e[0]++;
      e[1] += performance.now() - t0;
      TIMES.set(text, e);
      return st.reader ? { rows: r as R[], numAffectedRows: 0 } : { rows: [], numAffectedRows: (r as BetterSqlite3.RunResult).changes };
    }
    if (st.reader) return { rows: st.all(...params) as R[], numAffectedRows: 0 };
    return { rows: [], numAffectedRows: st.run(...params).changes };
  }
  const r = await trx.executeQuery<R>(CompiledQuery.raw(pgSql(text), [...params]));
  return { rows: r.rows, numAffectedRows: Number(r.numAffectedRows ?? r.rows.length) };
}
