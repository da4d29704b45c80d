// Opens the store: SQLite (better-sqlite3, WAL, synchronous set explicitly on every open) for a
// file path, PostgreSQL (pg pool) for a postgres:// URL. Both behind the same Kysely<Database>.
import fs from 'node:fs';
import path from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { Kysely, Migrator, sql, type MigrationProvider, type Migration } from 'kysely';
import pg from 'pg';
import type { Database } from './schema';
import { migrations as allMigrations } from './migrations/index';
import { SHIPMENT_ITEMS_WRITTEN, syncShipmentItems } from '../shipments/items';
import { pooledReader, withPreparedStatements } from './pg-prepared';
import { PgReadPipelines } from './pg-pipeline';
import { LockerPostgresDialect } from './pg-introspector';
import { FifoSqliteDialect } from './sqlite-dialect';
import { SqliteReadPool } from './read-pool';
import { WAL_AUTOCHECKPOINT_PAGES, WAL_SAFETY_PAGES, WalCheckpointer } from './checkpointer';

export type Engine = 'sqlite' | 'postgres';

export interface Db {
  readonly kysely: Kysely<Database>;
  readonly engine: Engine;
  /** Applies pending migrations; returns the names applied. */
  migrate(): Promise<string[]>;
  close(): Promise<void>;
  /** The raw better-sqlite3 handle (SQLite only), for engine-specific work such as group commit. */
  readonly sqlite?: BetterSqlite3.Database;
  /**
   * SQLite in a file: one row of a fixed SQL text read at once from a second, read-only
   * connection. WAL lets it read beside the writer: it sees committed rows only, and it never
   * waits in the queue for the one writing connection (which a transaction holds across awaits).
   * For reads that must not queue behind the writer's work, e.g. a terminal's login during a
   * reconnect storm. Absent for PostgreSQL and an in-memory SQLite database.
   */
  readonly committedGet?: <R>(text: string, params: readonly unknown[]) => R | undefined;
  /**
   * The rows of a fixed SQL text from the same read-only connection, one at a time: a caller may
   * yield to the event loop between rows (the statement's snapshot stays the same) instead of
   * holding it for a read of thousands of rows. Absent where committedGet is.
   */
  readonly committedIterate?: <R>(text: string, params: readonly unknown[]) => IterableIterator<R>;
  readonly pool?: pg.Pool;
  /**
   * PostgreSQL: the rows of one statement (placeholders $1, $2, ...) straight from the pool, not
   * through Kysely's executor (its connection provider and the prepared-statement proxy cost about
   * a tenth of a small read's CPU time). A text registered with registerPreparedStatement goes as
   * its named prepared statement unless database.pgPreparedStatements is false. `array`: each row
   * as an array of its columns in the SELECT's order (pg's rowMode 'array'). Outside transactions
   * only: the statement runs on whichever pooled connection is free.
   */
  readonly pgRead?: <R>(text: string, values: readonly unknown[], array?: boolean) => Promise<R[]>;
  /**
   * PostgreSQL with database.pgReadPipelines > 0: connections of their own on which small fixed
   * reads are pipelined (db/pg-pipeline.ts); db/prepared-read.ts sends its registered texts here.
   * Outside transactions only, as pgRead.
   */
  readonly pgPipelines?: PgReadPipelines;
  /** SQLite in a file with database.sqliteReadThreads > 0: heavy reads (a GetShipments page) in threads of their own (db/read-pool.ts) */
  readonly readPool?: SqliteReadPool;
  /** SQLite in a file with database.sqliteCheckpoints 'background': the WAL checkpoint thread (the group-commit runner asks it) */
  readonly walCheckpointer?: WalCheckpointer;
}

export interface OpenDatabaseOptions {
  url: string;
  sqliteSynchronous?: 'FULL' | 'NORMAL' | 'EXTRA';
  poolSize?: number;
  /** PostgreSQL: send the registered hot statements as named prepared statements (default true) */
  pgPreparedStatements?: boolean;
  /** PostgreSQL: connections on which the small fixed reads are pipelined (db/pg-pipeline.ts; default 2, or 0 with pgPreparedStatements false; 0: every read from the pool) */
  pgReadPipelines?: number;
  /** PostgreSQL schema to use (created if missing); tests use one per test file. */
  pgSchema?: string;
  /** SQLite in a file: WAL checkpoints in a thread of their own ('background', the default) or in the COMMIT ('commit') */
  sqliteCheckpoints?: 'background' | 'commit';
  /** SQLite in a file: threads for heavy reads, each with its own read-only connection (0: none; db/read-pool.ts) */
  sqliteReadThreads?: number;
  /** told when a read thread dies (its reads go to the main connection until it is started again) */
  onReadThreadLost?: (err: Error) => void;
  /** told when the checkpoint thread fails (checkpoints are the main connection's again) */
  onCheckpointerFailure?: (err: Error) => void;
}

class StaticProvider implements MigrationProvider {
  constructor(private readonly list: Record<string, Migration>) {}
  async getMigrations() {
    return this.list;
  }
}

// Integers from COUNT(*) and bigint columns come back from pg as strings; numeric too.
pg.types.setTypeParser(20, (v) => Number(v));
pg.types.setTypeParser(1700, (v) => Number(v));

export class DatabaseError extends Error {
  readonly code = 'DB_OPEN_FAILED';
}

/**
 * The service never analyzes its SQLite store, but an operator's ANALYZE (or PRAGMA optimize)
 * leaves STAT4 samples (better-sqlite3 builds SQLite with SQLITE_ENABLE_STAT4). With samples, the
 * planner reads the bound value of every `column = ?` on an indexed column and marks the statement
 * to be planned again whenever that parameter is bound anew: every prepared read would be parsed
 * and planned again on every call (a GetShipments page: 20-45 us of 110-220 us). The samples are
 * dropped when the store opens; sqlite_stat1's row counts stay.
 */
export function dropStat4Samples(sqlite: BetterSqlite3.Database): boolean {
  const has = sqlite.prepare("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'sqlite_stat4'").get();
  if (!has || !sqlite.prepare('SELECT 1 FROM sqlite_stat4 LIMIT 1').get()) return false;
  sqlite.exec('DELETE FROM sqlite_stat4; ANALYZE sqlite_schema');
  return true;
}

export async function openDatabase(opts: OpenDatabaseOptions): Promise<Db> {
  const isPg = /^postgres(ql)?:\/\//i.test(opts.url);
  if (isPg) {
    const schema = opts.pgSchema;
    if (schema && !/^[a-z_][a-z0-9_]*$/.test(schema)) throw new DatabaseError(`invalid PostgreSQL schema name ${schema}`);
    const pool = new pg.Pool({
      connectionString: opts.url,
      max: opts.poolSize ?? 10,
      ...(schema ? { options: `-c search_path=${schema}` } : {}),
    });
    pool.on('error', () => {
      /* idle client errors are surfaced on the next query */
    });
    if (schema) await pool.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
    const named = opts.pgPreparedStatements !== false;
    const kysely = new Kysely<Database>({ dialect: new LockerPostgresDialect({ pool: withPreparedStatements(pool, named) }) });
    // unset: 2; none when prepared statements are off (a transaction-mode pooler is in between)
    const pipes = opts.pgReadPipelines ?? (named ? 2 : 0);
    const pgPipelines = pipes > 0 ? new PgReadPipelines({ connectionString: opts.url, ...(schema ? { options: `-c search_path=${schema}` } : {}) }, named, pipes) : undefined;
    return makeDb(kysely, 'postgres', { pool, pgRead: pooledReader(pool, named), pgPipelines }, schema);
  }
  const file = opts.url.replace(/^sqlite:(\/\/)?/i, '');
  if (file !== ':memory:') {
    try {
      fs.mkdirSync(path.dirname(path.resolve(file)), { recursive: true });
    } catch (err) {
      throw Object.assign(new Error(`database.url ${file}: cannot create its directory ${path.dirname(path.resolve(file))} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}); set LOCKER_DATABASE_URL to a writable place`), { code: 'DATABASE_UNAVAILABLE' });
    }
  }
  const sqlite = new BetterSqlite3(file);
  sqlite.pragma('journal_mode = WAL');
  sqlite.pragma(`synchronous = ${opts.sqliteSynchronous ?? 'FULL'}`);
  sqlite.pragma('busy_timeout = 5000');
  sqlite.pragma('foreign_keys = ON');
  dropStat4Samples(sqlite);
  const inFile = file !== ':memory:' && file !== '';
  // SQLite's own checkpoint in a COMMIT: the group commit's size, or (a thread checkpoints) a far
  // larger safety net that only a writer outside the runner's pauses ever reaches
  const background = inFile && (opts.sqliteCheckpoints ?? 'background') === 'background';
  sqlite.pragma(`wal_autocheckpoint = ${background ? WAL_SAFETY_PAGES : WAL_AUTOCHECKPOINT_PAGES}`);
  const totalChanges = sqlite.prepare('SELECT total_changes() AS c');
  const walCheckpointer = background
    ? new WalCheckpointer(file, {
        synchronous: opts.sqliteSynchronous ?? 'FULL',
        changes: () => (totalChanges.get() as { c: number }).c,
        inTransaction: () => sqlite.inTransaction,
        onFailure: (err) => {
          if (sqlite.open) sqlite.pragma(`wal_autocheckpoint = ${WAL_AUTOCHECKPOINT_PAGES}`);
          opts.onCheckpointerFailure?.(err);
        },
      })
    : undefined;
  const kysely = new Kysely<Database>({ dialect: new FifoSqliteDialect({ database: withStatementCache(sqlite) }) });
  const reader = inFile ? committedReader(file) : null;
  const readPool = inFile && (opts.sqliteReadThreads ?? 0) > 0 ? new SqliteReadPool(file, opts.sqliteReadThreads!, { onThreadLost: opts.onReadThreadLost }) : undefined;
  const db = makeDb(kysely, 'sqlite', { sqlite, ...(reader ? { committedGet: reader.get, committedIterate: reader.iterate } : {}) });
  if (!reader && !walCheckpointer) return db;
  return {
    ...db,
    ...(readPool ? { readPool } : {}),
    ...(walCheckpointer
      ? {
          walCheckpointer,
          // migrations write DDL and index builds, which total_changes() does not count: their
          // frames are copied at once, not left for the safety net
          async migrate() {
            const applied = await db.migrate();
            if (applied.length) await walCheckpointer.checkpoint();
            return applied;
          },
        }
      : {}),
    async close() {
      await readPool?.stop();
      await walCheckpointer?.stop();
      reader?.close();
      await db.close();
    },
  };
}

/** The read-only second connection behind Db.committedGet: opened at the first read (after migrations), statements prepared once. */
function committedReader(file: string) {
  let conn: BetterSqlite3.Database | null = null;
  const statements = new Map<string, BetterSqlite3.Statement>();
  const statement = (text: string) => {
    if (!conn) {
      conn = new BetterSqlite3(file, { readonly: true, fileMustExist: true });
      conn.pragma('busy_timeout = 5000');
    }
    let st = statements.get(text);
    if (!st) {
      st = conn.prepare(text);
      statements.set(text, st);
    }
    return st;
  };
  return {
    get<R>(text: string, params: readonly unknown[]): R | undefined {
      return statement(text).get(...(params as unknown[])) as R | undefined;
    },
    iterate<R>(text: string, params: readonly unknown[]): IterableIterator<R> {
      return statement(text).iterate(...(params as unknown[])) as IterableIterator<R>;
    },
    close() {
      conn?.close();
      conn = null;
      statements.clear();
    },
  };
}

/**
 * Kysely prepares every query afresh; better-sqlite3 statements are reusable (the driver is
 * synchronous, so one statement is never in use twice at once). A bounded cache by SQL text saves
 * the re-prepare on every request.
 */
function withStatementCache(sqlite: BetterSqlite3.Database, max = 1000) {
  const cache = new Map<string, BetterSqlite3.Statement>();
  return {
    close: () => sqlite.close(),
    prepare: (sqlText: string) => {
      let stmt = cache.get(sqlText);
      if (!stmt) {
        stmt = sqlite.prepare(sqlText);
        if (cache.size >= max) cache.delete(cache.keys().next().value as string);
        cache.set(sqlText, stmt);
      }
      return stmt;
    },
  };
}

function makeDb(kysely: Kysely<Database>, engine: Engine, extra: { sqlite?: BetterSqlite3.Database; pool?: pg.Pool; pgRead?: Db['pgRead']; pgPipelines?: PgReadPipelines; committedGet?: Db['committedGet'] }, pgSchema?: string): Db {
  return {
    kysely,
    engine,
    ...extra,
    async migrate() {
      // migrationTableSchema: otherwise Kysely finds its lock table in ANY schema (another test
      // file's) and then fails to use it in this one.
      // Areas own number ranges (1xx accounts, 2xx shipments, ...): a new 1xx may arrive after a 3xx
      // was applied, so unordered application is allowed.
      const migrator = new Migrator({ db: kysely, provider: new StaticProvider(allMigrations), allowUnorderedMigrations: true, ...(pgSchema ? { migrationTableSchema: pgSchema } : {}) });
      const { error, results } = await migrator.migrateToLatest();
      if (error) throw error;
      const applied = (results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
      // the shipments' stored items and their triggers as this code writes them: an item changed
      // in code is written anew in every store, and said among the applied (the service logs
      // them; on SQLite openDatabase's migrate() then checkpoints, copying the rewrite at once); nothing when they are the same
      if (await syncShipmentItems(kysely)) applied.push(SHIPMENT_ITEMS_WRITTEN);
      if (engine === 'sqlite') {
        // Statement and savepoint journals in memory from now on (migrations keep SQLite's default,
        // so an index built on a big table may sort in a file): a booking's sub-journal spilled to a
        // file (shipments/tx.ts), and every write of a shipment keeps a statement journal for its
        // triggers (shipments/items.ts: 50 -> 80 us in memory, 100 us in a file)
        await sql`PRAGMA temp_store = MEMORY`.execute(kysely);
      }
      return applied;
    },
    async close() {
      await extra.pgPipelines?.end();
      await kysely.destroy();
    },
  };
}

/** Both engines: integers 0/1 for booleans. */
export const toBool = (b: boolean): 0 | 1 => (b ? 1 : 0);
export const fromBool = (v: unknown): boolean => v === 1 || v === true || v === '1';
