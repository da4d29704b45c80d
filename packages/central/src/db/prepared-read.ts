// Reads of the tenant API's hot read paths as fixed SQL texts, prepared once: no Kysely query tree
// built and compiled per request (issue 15: that was about 40 % of a small read's CPU time). The
// texts are portable SQL with `?` placeholders, the same on both engines; each caller keeps its
// set of texts small and fixed (one text per shape of request, never values in the text).
//
// SQLite: the statement runs directly on the better-sqlite3 handle as a cached prepared statement,
// synchronously, while no transaction is open on the connection. SQLite has one connection; a
// Kysely transaction holds it across awaits, and a read on the handle in the middle of one would
// see that transaction's uncommitted writes. So while a transaction is open the read goes through
// Kysely's executor instead, which waits for the connection (as every Kysely query does).
// PostgreSQL: a registered text as a named prepared statement (db/pg-prepared.ts), parsed and
// planned once per connection, pipelined with the other reads of the same turn of the event loop
// on a few connections of their own (Db.pgPipelines, db/pg-pipeline.ts), or straight from the pool
// (Db.pgRead) without them; an unnamed text from the pool; raw reads in pg's array row mode.
import type BetterSqlite3 from 'better-sqlite3';
import { CompiledQuery } from 'kysely';
import type { Db } from './database';
import { registerPreparedStatement } from './pg-prepared';
import { threadAnswer, type SqliteReadPool } from './read-pool';

const pgTexts = new Map<string, string>();

/** `?` placeholders as $1, $2, ... (the texts hold no `?` in literals), registered as prepared. */
function pgText(text: string): string {
  let t = pgTexts.get(text);
  if (t === undefined) {
    let n = 0;
    t = text.replace(/\?/g, () => `$${++n}`);
    pgTexts.set(text, t);
    registerPreparedStatement(t);
  }
  return t;
}

/** `?` placeholders as $1, $2, ... without registering the text */
function numbered(text: string): string {
  let n = 0;
  return text.replace(/\?/g, () => `$${++n}`);
}

const statements = new WeakMap<BetterSqlite3.Database, Map<string, BetterSqlite3.Statement>>();
/** the same texts prepared in raw mode (rows as arrays) or plucking their one column: a statement's mode is its own, so apart */
const rawStatements = new WeakMap<BetterSqlite3.Database, Map<string, BetterSqlite3.Statement>>();
const pluckStatements = new WeakMap<BetterSqlite3.Database, Map<string, BetterSqlite3.Statement>>();

/** The cached statement for this text in raw mode (rows as arrays), or plucking its one column. */
export function rawStatement(sqlite: BetterSqlite3.Database, text: string, pluck = false): BetterSqlite3.Statement {
  const caches = pluck ? pluckStatements : rawStatements;
  let cache = caches.get(sqlite);
  if (!cache) caches.set(sqlite, (cache = new Map()));
  let st = cache.get(text);
  if (!st) cache.set(text, (st = pluck ? sqlite.prepare(text).pluck(true) : sqlite.prepare(text).raw(true)));
  return st;
}

function sqliteStatement(sqlite: BetterSqlite3.Database, text: string): BetterSqlite3.Statement {
  let cache = statements.get(sqlite);
  if (!cache) {
    cache = new Map();
    statements.set(sqlite, cache);
  }
  let st = cache.get(text);
  if (!st) {
    st = sqlite.prepare(text);
    cache.set(text, st);
  }
  return st;
}

/**
 * Callers pass the same string constants again (a text built per call costs its hashing on every
 * lookup). `named` false (PostgreSQL): sent unnamed, parsed on every call, for texts of rare
 * shapes (e.g. a search's combinations of filters) that should not each hold a prepared statement
 * on every pooled connection.
 */
export type ReadAll = <R>(text: string, params: readonly unknown[], named?: boolean) => Promise<R[]>;

/**
 * `LIMIT ? OFFSET ?` for a SQLite text. SQLite (3.47 on) reads the bound value of a LIMIT
 * parameter while planning and then marks the statement to be planned again whenever that
 * parameter is bound anew, so a prepared page read was parsed and planned on every call (a
 * GetShipments page: about 20 us of 130). `? + 0` is an expression the planner does not read.
 */
export const SQLITE_LIMIT_OFFSET = 'LIMIT ? + 0 OFFSET ? + 0';

/** the largest LIMIT sqlitePage writes into a text; a page reaching further is stepped (iterate) */
const MAX_LITERAL_LIMIT = 4096;
/** the texts with a literal LIMIT appended, per text and limit (a few powers of two per text) */
const limitedTexts = new Map<string, string[]>();

function withLimit(text: string, limit: number): string {
  let byExp = limitedTexts.get(text);
  if (!byExp) limitedTexts.set(text, (byExp = []));
  const e = Math.log2(limit);
  return (byExp[e] ??= `${text} limit ${limit}`);
}

/**
 * SQLite: rows offset .. offset + size - 1 of an ordered read given WITHOUT limit and offset;
 * `total` is the number of rows whenever the read ended before its limit. The LIMIT is written
 * into the text as a literal, the power of two above offset + size (at most a dozen texts per
 * read): the read then runs to that limit from the first row and tells the total whenever it ends
 * before it (a bare `LIMIT ?` would also make SQLite plan the statement again on every call, see
 * SQLITE_LIMIT_OFFSET; that, not a sort, was the 69-94 us against 31-52 us measured for a locker
 * page). All rows are fetched in one call (stepping row by row from JavaScript cost a locker page
 * 42-70 us against 31-52 us) and the page is cut out of them. A page reaching beyond MAX_LITERAL_LIMIT
 * rows is stepped to its end instead. Only for reads whose rows are sorted (ORDER BY; the text
 * must take a LIMIT appended). `raw` true: rows as arrays (see preparedRawReader); 'pluck': each
 * row its one column's value. `threads` false: on the main connection, never as a quick read of
 * the read threads (a search's page the threads refused: they are running searches).
 */
export async function sqlitePage<R>(db: Db, text: string, params: readonly unknown[], offset: number, size: number, raw: boolean | 'pluck' = false, threads = true): Promise<{ rows: R[]; total?: number }> {
  const sqlite = db.sqlite!;
  const viaKysely = async (): Promise<{ rows: R[]; total?: number }> => {
    // through Kysely (it waits for the transaction), with LIMIT and OFFSET: the text's rows may be
    // many (a tenant's accounts); a page that is not full and not empty past the first tells the total
    let rows = (await db.kysely.executeQuery<R>(CompiledQuery.raw(`${text} ${SQLITE_LIMIT_OFFSET}`, [...params, size, offset]))).rows;
    if (raw) rows = rows.map((r) => (raw === 'pluck' ? Object.values(r as object)[0] : Object.values(r as object)) as R);
    return rows.length < size && (rows.length > 0 || offset === 0) ? { rows, total: offset + rows.length } : { rows };
  };
  if (sqlite.inTransaction) return viaKysely();
  const end = offset + size;
  if (end < MAX_LITERAL_LIMIT) {
    // the smallest power of two above the page's end: a read ending exactly there still tells its total
    let limit = 8;
    while (limit <= end) limit *= 2;
    // with read threads: read by one (SqliteReadPool.quick); when it cannot, here (through Kysely
    // if a transaction opened meanwhile: its uncommitted rows must not be read)
    const pool = threads ? db.readPool : undefined;
    let all = pool && (await threadRead<R>(pool, sqlite, withLimit(text, limit), params, raw === 'pluck' ? 'pluck' : raw ? 'raw' : 'object'));
    if (!all) {
      if (sqlite.inTransaction) return viaKysely();
      all = (raw ? rawStatement(sqlite, withLimit(text, limit), raw === 'pluck') : sqliteStatement(sqlite, withLimit(text, limit))).all(params as unknown[]) as R[];
    }
    const rows = offset === 0 && all.length <= size ? all : all.slice(offset, end);
    return all.length < limit ? { rows, total: all.length } : { rows };
  }
  const rows: R[] = [];
  let n = 0;
  for (const r of (raw ? rawStatement(sqlite, text, raw === 'pluck') : sqliteStatement(sqlite, text)).iterate(params as unknown[]) as IterableIterator<R>) {
    if (n++ < offset) continue;
    rows.push(r);
    if (rows.length === size) return { rows }; // leaving the loop resets the statement
  }
  return { rows, total: n };
}

/**
 * Like ReadAll, but each row is an array of its column values in the SELECT's order. On SQLite
 * the statement runs in better-sqlite3's raw mode: no object with named properties is built per
 * row (measured on the 18 lockers of a GetLockers page: 60-70 us per call against 76-150 us for
 * row objects). PostgreSQL rows come as arrays too (pg's rowMode 'array'). SQLite rows read
 * inside a transaction (through Kysely) come as objects and are turned into arrays: the texts name
 * every column once, and no column name is an integer (whose property would come first in an object).
 */
export type ReadRaw = (text: string, params: readonly unknown[]) => Promise<unknown[][]>;

/**
 * A quick read by a read thread (SqliteReadPool.quick) when no transaction is open on the main
 * connection; undefined when the caller must read it itself (then it checks for
 * a transaction again: one may have opened meanwhile).
 */
async function threadRead<R>(pool: SqliteReadPool, sqlite: BetterSqlite3.Database, text: string, params: readonly unknown[], mode: 'object' | 'raw' | 'pluck'): Promise<R[] | undefined> {
  if (sqlite.inTransaction) return undefined;
  return threadAnswer(pool.quick<R>(text, params, mode));
}

/**
 * `threads` (SQLite with read threads): outside a transaction, the reads go to a read thread,
 * gathered per turn of the event loop (SqliteReadPool.quick): the tenant API's reads. Without it
 * (the edge sync's reads) on the main connection.
 */
export interface ReaderOptions {
  threads?: boolean;
}

export function preparedRawReader(db: Db, opts: ReaderOptions = {}): ReadRaw {
  if (db.engine === 'sqlite') {
    const sqlite = db.sqlite!;
    const kysely = db.kysely;
    const pool = opts.threads ? db.readPool : undefined;
    return async (text, params) => {
      const rows = pool && (await threadRead<unknown[]>(pool, sqlite, text, params, 'raw'));
      if (rows) return rows;
      if (!sqlite.inTransaction) return rawStatement(sqlite, text).all(params as unknown[]) as unknown[][];
      return (await kysely.executeQuery<Record<string, unknown>>(CompiledQuery.raw(text, [...params]))).rows.map((r) => Object.values(r));
    };
  }
  const read = pgPointRead(db);
  return (text, params) => read<unknown[]>(pgText(text), params, true);
}

/** PostgreSQL: a registered text's read, pipelined when the store has pipelines (db/pg-pipeline.ts), else from the pool */
function pgPointRead(db: Db): NonNullable<Db['pgRead']> {
  const pipes = db.pgPipelines;
  return pipes ? (text, values, array) => pipes.read(text, values, array) : db.pgRead!;
}

/** The rows of a read (a SELECT with `?` placeholders) on the database's engine; see above. */
export function preparedReader(db: Db, opts: ReaderOptions = {}): ReadAll {
  const kysely = db.kysely;
  if (db.engine === 'sqlite') {
    const sqlite = db.sqlite!;
    let cache = statements.get(sqlite);
    if (!cache) statements.set(sqlite, (cache = new Map()));
    const stmts = cache;
    const pool = opts.threads ? db.readPool : undefined;
    return async <R>(text: string, params: readonly unknown[]) => {
      const rows = pool && (await threadRead<R>(pool, sqlite, text, params, 'object'));
      if (rows) return rows;
      if (!sqlite.inTransaction) {
        let st = stmts.get(text);
        if (!st) stmts.set(text, (st = sqlite.prepare(text)));
        return st.all(params as unknown[]) as R[];
      }
      return (await kysely.executeQuery<R>(CompiledQuery.raw(text, [...params]))).rows;
    };
  }
  // a registered text (fixed, bounded) pipelined; an unnamed one (a search's, built per filter and
  // heavier) from the pool, where it blocks no read queued behind it
  const pgRead = db.pgRead!;
  const pointRead = pgPointRead(db);
  return <R>(text: string, params: readonly unknown[], named = true) => (named ? pointRead<R>(pgText(text), params) : pgRead<R>(numbered(text), params));
}

/**
 * SQLite with read threads (db/read-pool.ts): a ReadAll whose statements a read thread runs, off
 * the event loop (committed rows only), for reads heavy enough that the message to the thread
 * costs little beside them: a search over a tenant's accounts (milliseconds, where a small read
 * costs tens of microseconds). A read the pool cannot serve is read as preparedReader reads it.
 * Without read threads (PostgreSQL, an in-memory store, database.sqliteReadThreads 0): preparedReader.
 */
export function threadedReader(db: Db): ReadAll {
  const local = preparedReader(db);
  const pool = db.readPool;
  if (!pool) return local;
  return async <R>(text: string, params: readonly unknown[], named?: boolean) => (await threadAnswer(pool.all<R>(text, params))) ?? local<R>(text, params, named);
}
