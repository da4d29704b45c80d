// Runs the shipment area's write transactions. PostgreSQL: one transaction per job. SQLite: a
// group-commit batcher. With synchronous=FULL every commit waits for fsync, so one transaction per
// request caps the write rate; instead, jobs that arrive while a batch commits are queued and run
// together in the next transaction, each inside its own SAVEPOINT (a failing job rolls back only
// its own writes and gets its own error), and every job is acknowledged only after the COMMIT
// that made it durable. Jobs must only touch the database (no network waits inside).
import type { Kysely, Transaction } from 'kysely';
import type { Db } from '../db/database';
import type { Database } from '../db/schema';
import { sqliteStatement } from './sqlq';

export type Trx = Transaction<Database>;
export type TxJob<T> = (trx: Trx) => Promise<T>;

export interface TxRunner {
  run<T>(job: TxJob<T>): Promise<T>;
}

/**
 * A PostgreSQL error after which the whole job can simply run again: a deadlock (40P01) or
 * serialization failure (40001) rolled the transaction back; two jobs wrote the same transition
 * of a shipment (shipment_transitions_pk: one decided from a row another changed; the shipment
 * service locks every shipment it changes, so this is a safety net); or a new shipment's PIN
 * collided with a valid PIN of its point in rows written with the COMMIT (access_codes_pin_unique,
 * codes.ts `strict`: the job draws new PINs when it runs again).
 */
export function isRetryablePgError(e: unknown): boolean {
  const err = e as { code?: unknown; constraint?: unknown } | null;
  if (!err || typeof err !== 'object') return false;
  if (err.code === '40P01' || err.code === '40001') return true;
  return err.code === '23505' && (err.constraint === 'shipment_transitions_pk' || err.constraint === 'access_codes_pin_unique');
}

/** A PostgreSQL data exception (SQLSTATE class 22: invalid text representation, numeric value out of range, ...): the same input fails the same way again. */
export function isPgDataError(e: unknown): boolean {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code.length === 5 && code.startsWith('22');
}

export const PG_TX_ATTEMPTS = 5;

/**
 * `job` in a PostgreSQL transaction of its own, run again (up to PG_TX_ATTEMPTS in all) after an
 * error `retryable` accepts (isRetryablePgError unless told), `pauseMs(attempt)` later. The job
 * must leave nothing behind outside the database: a rolled-back attempt is simply run again.
 */
export async function runPgTransaction<DB, T>(
  kysely: Kysely<DB>,
  job: (trx: Transaction<DB>) => Promise<T>,
  opts: { retryable?: (e: unknown) => boolean; pauseMs?: (attempt: number) => number; onRetry?: () => void } = {},
): Promise<T> {
  const retryable = opts.retryable ?? isRetryablePgError;
  for (let attempt = 1; ; attempt++) {
    try {
      return await kysely.transaction().execute(job);
    } catch (e) {
      if (attempt >= PG_TX_ATTEMPTS || !retryable(e)) throw e;
      opts.onRetry?.();
      await new Promise((r) => setTimeout(r, opts.pauseMs ? opts.pauseMs(attempt) : Math.random() * 5 * attempt));
    }
  }
}

export class PgTxRunner implements TxRunner {
  readonly stats = { retries: 0 };
  constructor(private readonly db: Db) {}
  run<T>(job: TxJob<T>): Promise<T> {
    // Jobs only touch the database (see above), so a rolled-back attempt left nothing behind.
    return runPgTransaction(this.db.kysely, job, { onRetry: () => this.stats.retries++ });
  }
}

interface Queued {
  job: TxJob<unknown>;
  resolve: (v: unknown) => void;
  reject: (e: unknown) => void;
}

export interface BatcherStats {
  batches: number;
  jobs: number;
  maxBatch: number;
}

export class SqliteGroupCommitRunner implements TxRunner {
  private queue: Queued[] = [];
  private running = false;
  readonly stats: BatcherStats = { batches: 0, jobs: 0, maxBatch: 0 };

  constructor(
    private readonly db: Db,
    private readonly maxBatch = 256,
  ) {}

  run<T>(job: TxJob<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ job, resolve: resolve as (v: unknown) => void, reject });
      if (!this.running) {
        this.running = true;
        // Let the requests that arrive in this turn of the event loop join the first batch.
        setImmediate(() => void this.drain());
      }
    });
  }

  private async drain(): Promise<void> {
    try {
      while (this.queue.length) {
        // not beside a checkpoint the timer started (db/checkpointer.ts)
        await this.db.walCheckpointer?.settled();
        const batch = this.queue.splice(0, this.maxBatch);
        await this.runBatch(batch);
        // a WAL checkpoint in its thread when one is due (db/checkpointer.ts): the next batch
        // waits for it (jobs keep queueing and join it; the event loop runs on), so no frame is
        // appended while it copies and the next write starts the WAL again from its beginning
        await this.db.walCheckpointer?.maybe();
      }
    } finally {
      this.running = false;
      // a job queued between the loop's last check and the flag reset
      if (this.queue.length) {
        this.running = true;
        setImmediate(() => void this.drain());
      }
    }
  }

  private configured = false;

  private async runBatch(batch: Queued[]): Promise<void> {
    if (!this.configured) {
      // Each job's SAVEPOINT keeps a sub-journal of the original content of every page the job
      // changes (~40 pages of 4 KiB for a booking: one per b-tree it touches). Past 64 KiB that
      // sub-journal spills to a temporary FILE, so every booking paid ~90 pwrite calls for
      // pages that are thrown away at RELEASE. In memory it is a copy. (Db.migrate() sets it too;
      // this covers a store opened without migrating.)
      this.db.sqlite!.pragma('temp_store = MEMORY');
      // wal_autocheckpoint is set where the database opens (db/database.ts, db/checkpointer.ts):
      // checkpoints in a thread between batches (drain), or in the COMMIT
      this.configured = true;
    }
    const outcomes: ({ ok: true; v: unknown } | { ok: false; e: unknown })[] = [];
    const sqlite = this.db.sqlite!;
    const savepoint = sqliteStatement(sqlite, 'SAVEPOINT job');
    const release = sqliteStatement(sqlite, 'RELEASE SAVEPOINT job');
    const rollbackTo = sqliteStatement(sqlite, 'ROLLBACK TO SAVEPOINT job');
    try {
      await this.db.kysely.transaction().execute(async (trx) => {
        for (const q of batch) {
          if (batch.length === 1) {
            // a lone job needs no savepoint: its failure rolls back the transaction
            outcomes.push({ ok: true, v: await q.job(trx) });
            continue;
          }
          // savepoints straight on the handle (cached statements): the batch's transaction runs on
          // this one connection, and they cost no trip through Kysely's executor
          savepoint.run();
          try {
            const v = await q.job(trx);
            release.run();
            outcomes.push({ ok: true, v });
          } catch (e) {
            rollbackTo.run();
            release.run();
            outcomes.push({ ok: false, e });
          }
        }
      });
    } catch (e) {
      // The lone job failed (rolled back), or the COMMIT failed: nothing of the batch is durable.
      if (batch.length === 1 && outcomes.length === 0) batch[0]!.reject(e);
      else for (const q of batch) q.reject(e);
      return;
    }
    this.stats.batches++;
    this.stats.jobs += batch.length;
    this.stats.maxBatch = Math.max(this.stats.maxBatch, batch.length);
    batch.forEach((q, i) => {
      const o = outcomes[i]!;
      if (o.ok) q.resolve(o.v);
      else q.reject(o.e);
    });
  }
}

export function createTxRunner(db: Db): TxRunner {
  return db.engine === 'sqlite' ? new SqliteGroupCommitRunner(db) : new PgTxRunner(db);
}
