// Hot-path queries as hand-written portable SQL: the same statements on both engines, without
// building and compiling a Kysely query tree per call. Placeholders are written as `?` and become
// $1, $2, ... on PostgreSQL.
//
// SQLite: the statement runs directly on the better-sqlite3 handle as a cached prepared statement
// (synchronously, no trip through Kysely's executor). That is the same connection the enclosing
// Kysely transaction runs on (SQLite has exactly one), so the statement is part of that
// transaction; callers must only use rawQuery inside a job of the TxRunner (they pass its trx).
// PostgreSQL: through the transaction's own connection (trx.executeQuery), as a named prepared
// statement (db/pg-prepared.ts): parsed and planned once per connection, not on every call.
import type BetterSqlite3 from 'better-sqlite3';
import { CompiledQuery } from 'kysely';
import type { Db } from '../db/database';
import type { Trx } from './tx';
import { AtCommit, registerPreparedStatement } from '../db/pg-prepared';

export interface RawResult<R> {
  rows: R[];
  /** rows changed by an INSERT/UPDATE/DELETE; with RETURNING (or a SELECT) the rows returned */
  numAffectedRows: number;
}

const pgText = new Map<string, string>();

function pgSql(text: string): string {
  let t = pgText.get(text);
  if (!t) {
    let n = 0;
    t = text.replace(/\?/g, () => `$${++n}`);
    pgText.set(text, t);
    registerPreparedStatement(t);
  }
  return t;
}

interface CachedStatement {
  st: BetterSqlite3.Statement;
  /** st.reader, read once (a native getter: a call into the addon on every read) */
  reader: boolean;
}

const stmtCaches = new WeakMap<BetterSqlite3.Database, Map<string, CachedStatement>>();

function cached(sqlite: BetterSqlite3.Database, text: string): CachedStatement {
  let cache = stmtCaches.get(sqlite);
  if (!cache) {
    cache = new Map();
    stmtCaches.set(sqlite, cache);
  }
  let c = cache.get(text);
  if (!c) {
    const st = sqlite.prepare(text);
    c = { st, reader: st.reader };
    cache.set(text, c);
  }
  return c;
}

/** The cached prepared statement for this SQL text on this SQLite handle. */
export function sqliteStatement(sqlite: BetterSqlite3.Database, text: string): BetterSqlite3.Statement {
  return cached(sqlite, text).st;
}

const TIMES: Map<string, [number, number]> | undefined = process.env.LOCKER_SQL_TIMES ? ((globalThis as { __stmtTimes?: Map<string, [number, number]> }).__stmtTimes = new Map()) : undefined;

export async function rawQuery<R>(trx: Trx, db: Db, text: string, params: readonly unknown[]): Promise<RawResult<R>> {
  if (db.engine === 'sqlite') {
    const { st, reader } = cached(db.sqlite!, text);
    if (TIMES) {
      const t0 = performance.now();
      const r = reader ? st.all(params) : st.run(params);
      const e = TIMES.get(text) ?? [0, 0];
      e[0]++;
      e[1] += performance.now() - t0;
      TIMES.set(text, e);
      return reader ? { rows: r as R[], numAffectedRows: (r as R[]).length } : { rows: [], numAffectedRows: (r as BetterSqlite3.RunResult).changes };
    }
    // the parameters bound as one array (better-sqlite3 takes it as the anonymous parameters), not
    // spread into the call: a spread of the 29 shipment or 60 access-code values cost more than
    // some of the statements themselves
    if (reader) {
      const rows = st.all(params) as R[];
      return { rows, numAffectedRows: rows.length };
    }
    return { rows: [], numAffectedRows: st.run(params).changes };
  }
  const r = await trx.executeQuery<R>(CompiledQuery.raw(pgSql(text), [...params]));
  return { rows: r.rows, numAffectedRows: Number(r.numAffectedRows ?? r.rows.length) };
}

/**
 * A write whose answer the job does not wait for, written with the transaction's COMMIT on
 * PostgreSQL (one round trip less; db/pg-prepared.ts AtCommit). Resolves once the transaction's
 * client holds the statement (await that before the job ends, or COMMIT may go first); `answer`
 * then settles when the transaction commits (the statement's rows) or fails (the error that failed
 * the COMMIT, or a rollback). The job must not await `answer`; a statement it sends after this one
 * writes this one first. A failure of it fails the COMMIT, so the transaction rolls back whole
 * (PgTxRunner runs a retryable one again). SQLite: runs at once, as rawQuery.
 */
export async function rawQueryAtCommit<R>(trx: Trx, db: Db, text: string, params: readonly unknown[]): Promise<{ answer: Promise<RawResult<R>> }> {
  if (db.engine === 'sqlite') return { answer: rawQuery<R>(trx, db, text, params) };
  const at = new AtCommit();
  await trx.executeQuery(CompiledQuery.raw(pgSql(text), [...params, at]));
  const answer = at.promise.then((r) => {
    const res = r as { rows: R[]; rowCount: number | null };
    return { rows: res.rows, numAffectedRows: Number(res.rowCount ?? res.rows.length) };
  });
  answer.catch(() => {}); // whoever needs it observes it
  return { answer };
}

export type Exec = <R>(text: string, params: readonly unknown[]) => Promise<RawResult<R>>;

interface Queued {
  text: string;
  params: readonly unknown[];
  resolve: (r: RawResult<unknown>) => void;
  reject: (e: unknown) => void;
}

/**
 * Independent writes of one job sent together. SQLite: run() executes at once (there is no round
 * trip to save). PostgreSQL: run() queues the statement and flush() sends all queued ones as ONE
 * statement, each as a data-modifying CTE (WITH s1 AS (INSERT ... RETURNING ...), s2 AS (...)
 * SELECT the rows of each as JSON); every run() promise then resolves with its own rows. The
 * statements must not depend on each other's effects (they all see the same snapshot) and must
 * be INSERT/UPDATE/DELETE; one without RETURNING gets `RETURNING 1` so its row count is known.
 * A run() after flush() executes at once (retries).
 */
export class StatementBatch {
  private queued: Queued[] = [];
  private flushed = false;

  constructor(
    private readonly trx: Trx,
    private readonly db: Db,
  ) {}

  readonly run: Exec = <R>(text: string, params: readonly unknown[]) => {
    if (this.db.engine === 'sqlite' || this.flushed) return rawQuery<R>(this.trx, this.db, text, params);
    return new Promise<RawResult<R>>((resolve, reject) => this.queued.push({ text, params, resolve: resolve as (r: RawResult<unknown>) => void, reject }));
  };

  async flush(): Promise<void> {
    return this.send(false);
  }

  /**
   * flush(), written with the transaction's COMMIT (rawQueryAtCommit): resolves once the
   * statement is held for the COMMIT (await it before the job ends); the run() promises settle
   * when the transaction commits or fails, so the job must not await them.
   */
  flushAtCommit(): Promise<void> {
    return this.send(true);
  }

  private async send(atCommit: boolean): Promise<void> {
    this.flushed = true;
    const q = this.queued;
    this.queued = [];
    if (q.length === 0) return;
    // the statement's answer: now (flush), or once the transaction commits (flushAtCommit, which
    // waits only until the client holds the statement)
    const exec = async <R>(text: string, params: readonly unknown[]): Promise<{ answer: Promise<RawResult<R>> }> =>
      atCommit ? rawQueryAtCommit<R>(this.trx, this.db, text, params) : { answer: rawQuery<R>(this.trx, this.db, text, params) };
    if (q.length === 1) {
      const one = q[0]!;
      let answer: Promise<RawResult<unknown>>;
      try {
        answer = (await exec(one.text, one.params)).answer;
      } catch (e) {
        one.reject(e);
        throw e;
      }
      const settled = answer.then(one.resolve, one.reject);
      if (!atCommit) await settled;
      return;
    }
    const ctes = q.map((s, i) => `s${i} AS (${/\bRETURNING\b/i.test(s.text) ? s.text : `${s.text} RETURNING 1 AS one`})`);
    const text = `WITH ${ctes.join(', ')} SELECT ${q.map((_, i) => `(SELECT json_agg(s${i}) FROM s${i}) AS r${i}`).join(', ')}`;
    const spread = (res: RawResult<Record<string, unknown[] | null>>) => {
      const row = res.rows[0] ?? {};
      q.forEach((s, i) => {
        const rows = (row[`r${i}`] ?? []) as unknown[];
        s.resolve({ rows: /\bRETURNING\b/i.test(s.text) ? rows : [], numAffectedRows: rows.length });
      });
    };
    try {
      const { answer } = await exec<Record<string, unknown[] | null>>(text, q.flatMap((s) => s.params));
      if (atCommit) {
        // (a throw of spread rejects the rest too: nothing is left unsettled, nothing unhandled)
        answer.then(spread).catch((e: unknown) => {
          for (const s of q) s.reject(e);
        });
        return;
      }
      spread(await answer);
    } catch (e) {
      for (const s of q) s.reject(e);
      throw e;
    }
  }
}
