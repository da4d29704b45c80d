// Kysely's SQLite dialect with a FIFO hand-over of the one connection.
//
// SQLite has one connection here, and Kysely's SqliteDriver guards it with a mutex written as
// `while (this.#promise) await this.#promise`: every release wakes every waiter, and all but one go
// back to sleep. With K queries waiting, each query costs O(K) wake-ups, a queue of K costs O(K²).
// K is small for an API under load, but a fleet reconnecting to a restarted node queues one login
// read per terminal plus the edge sync's queries: at 10,000 terminals the node spent its whole CPU
// waking waiters (a V8 tick profile: 60 % of the busy ticks in that mutex and its promise
// plumbing), answered no CONNACK within the terminals' 10 s timeout, and the retries kept the queue
// full (no terminal back after 60 s). Here a release hands the connection to the next waiter in
// line and wakes no one else: O(1) per query. Kysely's own mutex stays underneath, uncontended.
import { SqliteDialect, SqliteDriver, SqliteQueryCompiler, type DatabaseConnection, type Driver, type LimitNode, type OffsetNode, type QueryCompiler, type SqliteDialectConfig } from 'kysely';

/**
 * How long queries may follow one another without letting the event loop read its sockets. The
 * driver is synchronous, so a hand-over resumes the next waiter in a microtask: a queue of
 * thousands (a reconnect storm's statuses and snapshots) drained in one go, and the loop stalled
 * for seconds (measured: 0.6-3 s) with CONNECTs unread, so terminals missed their CONNACK timeout
 * and retried. Past this slice the next hand-over waits for setImmediate (after the I/O phase).
 */
export const FIFO_SLICE_MS = 10;

/** A mutex whose release resumes exactly one waiter, the longest waiting. */
export class FifoMutex {
  private held = false;
  private readonly waiters: (() => void)[] = [];
  private head = 0;
  private sliceStart = 0;

  constructor(private readonly sliceMs = FIFO_SLICE_MS) {}

  lock(): Promise<void> {
    if (!this.held) {
      this.held = true;
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => this.waiters.push(resolve));
  }

  unlock(): void {
    if (this.head < this.waiters.length) {
      // still held: ownership passes straight to the next waiter
      const next = this.waiters[this.head]!;
      this.waiters[this.head++] = undefined as never;
      if (this.head > 1024 && this.head * 2 > this.waiters.length) {
        this.waiters.splice(0, this.head);
        this.head = 0;
      }
      const now = performance.now();
      if (this.sliceStart === 0) this.sliceStart = now;
      if (now - this.sliceStart < this.sliceMs) next();
      else {
        // the connection stays held for `next` meanwhile: nobody overtakes it
        this.sliceStart = 0;
        setImmediate(next);
      }
    } else {
      this.sliceStart = 0;
      this.held = false;
      this.waiters.length = 0;
      this.head = 0;
    }
  }

  /** queries waiting for the connection */
  get waiting(): number {
    return this.waiters.length - this.head;
  }
}

class FifoSqliteDriver extends SqliteDriver {
  readonly fifo = new FifoMutex();

  override async acquireConnection(): Promise<DatabaseConnection> {
    await this.fifo.lock();
    return super.acquireConnection();
  }

  override async releaseConnection(): Promise<void> {
    await super.releaseConnection();
    this.fifo.unlock();
  }
}

/**
 * LIMIT and OFFSET as `? + 0`: SQLite (3.47 on) reads the bound value of a bare `LIMIT ?` while
 * planning and then expires the prepared statement whenever that parameter is bound again, so a
 * cached statement was parsed and planned anew on every call (db/prepared-read.ts
 * SQLITE_LIMIT_OFFSET, measured on GetShipments). An expression is not read; the rows are the same.
 */
export class SqliteLimitCompiler extends SqliteQueryCompiler {
  protected override visitLimit(node: LimitNode): void {
    super.visitLimit(node);
    this.append(' + 0');
  }

  protected override visitOffset(node: OffsetNode): void {
    super.visitOffset(node);
    this.append(' + 0');
  }
}

export class FifoSqliteDialect extends SqliteDialect {
  constructor(private readonly cfg: SqliteDialectConfig) {
    super(cfg);
  }
  override createDriver(): Driver {
    return new FifoSqliteDriver(this.cfg);
  }
  override createQueryCompiler(): QueryCompiler {
    return new SqliteLimitCompiler();
  }
}
