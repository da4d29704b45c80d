// WAL checkpoints off the event loop (SQLite in a file; database.sqliteCheckpoints 'background').
//
// SQLite's automatic checkpoint runs inside the COMMIT that pushes the WAL past
// wal_autocheckpoint pages: on the event loop, since better-sqlite3 is synchronous. Every page the
// WAL holds is copied into the database file and the file is fsynced; with the group commit's
// 10,000 pages (~40 MiB) that COMMIT took 66-92 ms on the EPYC host (measured with 64 row updates
// per transaction: 7 such commits in 1,500, every other commit 1-2 ms). Nothing else runs
// meanwhile: no HTTP request, no MQTT message, no keepalive.
//
// Here a worker thread with its own connection runs the checkpoint, asked by the group-commit
// runner (shipments/tx.ts) between two write transactions: the runner holds its next batch until
// the answer, so no frame is appended while the checkpoint copies, the checkpoint copies every
// frame, and the next write transaction starts the WAL again from its beginning (SQLite restarts a
// WAL that is wholly in the database file). The event loop goes on serving reads and messages;
// only writes wait, as they waited for the COMMIT before. A PASSIVE checkpoint never waits for a
// reader or a writer.
//
// Writes outside the runner (and the runner's last batch before a quiet spell) are checkpointed by
// a timer once a second while no transaction is open. The main connection keeps a far larger
// wal_autocheckpoint as a safety net. When the thread fails, the main connection checkpoints in
// its commits again, as it did before (onFailure).
import { Worker } from 'node:worker_threads';

const WORKER = new URL('./checkpoint-worker.mjs', import.meta.url);

/**
 * SQLite's automatic checkpoint in a COMMIT, in pages of WAL (database.sqliteCheckpoints 'commit'):
 * a checkpoint copies each page once however often the WAL holds it; bookings rewrite the same hot
 * pages (lockers, index interiors) batch after batch, so checkpointing every 10000 frames (~40 MiB
 * of WAL) instead of every 1000 copies far fewer pages per booking (COMMIT cost per booking fell
 * from ~145 to ~100 us, bookings through inject, 64 at a time). LOCKER_SQLITE_WAL_AUTOCHECKPOINT
 * overrides it.
 */
export const WAL_AUTOCHECKPOINT_PAGES = Number(process.env.LOCKER_SQLITE_WAL_AUTOCHECKPOINT ?? 10000);
/** the main connection's own checkpoint while the thread checkpoints: a safety net */
export const WAL_SAFETY_PAGES = 4 * WAL_AUTOCHECKPOINT_PAGES;
/** the runner asks for a checkpoint after this many rows changed since the last one ... */
export const CHECKPOINT_CHANGES = 2000;
/** ... or once this long passed since the last one with any row changed */
export const CHECKPOINT_INTERVAL_MS = 1000;
/** a checkpoint not answered within this long no longer holds the writes back */
export const CHECKPOINT_WAIT_MS = 10_000;

export interface CheckpointResult {
  /** frames in the WAL when the checkpoint ran */
  log: number;
  /** frames of it now in the database file (all of them: the WAL restarts at the next write) */
  checkpointed: number;
  /** another checkpoint was running (none is done then) */
  busy: boolean;
  ms: number;
}

export interface CheckpointerStats {
  checkpoints: number;
  /** the most frames a checkpoint found in the WAL */
  maxFrames: number;
  /** checkpoints that left frames behind (a write outside the runner meanwhile) */
  partial: number;
  maxMs: number;
  totalMs: number;
}

export class CheckpointerError extends Error {
  readonly code = 'SQLITE_CHECKPOINTER_FAILED';
}

export class WalCheckpointer {
  private readonly worker: Worker;
  private readonly ready: Promise<void>;
  private nextId = 0;
  private readonly pending = new Map<number, (r: CheckpointResult | null) => void>();
  private dead: Error | null = null;
  private stopping = false;
  readonly stats: CheckpointerStats = { checkpoints: 0, maxFrames: 0, partial: 0, maxMs: 0, totalMs: 0 };

  /** total_changes() and the time at the last checkpoint */
  private checkpointedChanges = 0;
  private checkpointedAt = Date.now();
  private inFlight: Promise<CheckpointResult | null> | null = null;
  private readonly timer: NodeJS.Timeout;

  constructor(
    file: string,
    private readonly opts: {
      synchronous?: string;
      /** the main connection's total_changes(): rows written since it opened */
      changes: () => number;
      /** a transaction is open on the main connection (its writes go on meanwhile) */
      inTransaction: () => boolean;
      /** the thread failed (or could not start): checkpoints are the main connection's again */
      onFailure: (err: Error) => void;
    },
  ) {
    this.worker = new Worker(WORKER, { workerData: { file, synchronous: opts.synchronous ?? 'FULL' } });
    this.worker.unref();
    // writes outside the group-commit runner, or the runner's last batch before a quiet spell:
    // checkpointed once a second when no transaction is open (best effort: a write meanwhile
    // leaves its frames for the next checkpoint)
    this.timer = setInterval(() => {
      if (this.alive && !this.inFlight && !opts.inTransaction()) void this.maybe();
    }, CHECKPOINT_INTERVAL_MS);
    this.timer.unref();
    this.ready = new Promise<void>((resolve) => {
      const fail = (err: Error) => {
        if (this.dead || this.stopping) return;
        this.dead = new CheckpointerError(`the WAL checkpoint thread failed: ${err.message}`);
        clearInterval(this.timer);
        for (const r of this.pending.values()) r(null);
        this.pending.clear();
        resolve();
        opts.onFailure(this.dead);
      };
      this.worker.on('error', fail);
      this.worker.on('exit', (code) => fail(new Error(`exited with code ${code}`)));
      this.worker.on('message', (m: { ready?: boolean; id?: number; error?: string; busy?: number; log?: number; checkpointed?: number; ms?: number }) => {
        if (m.ready) return resolve();
        const done = this.pending.get(m.id!);
        if (!done) return;
        this.pending.delete(m.id!);
        if (m.error !== undefined) {
          // one checkpoint failed (e.g. SQLITE_BUSY on a lock): no harm, the next one copies what is left
          done(null);
          return;
        }
        const r: CheckpointResult = { log: m.log!, checkpointed: m.checkpointed!, busy: m.busy === 1, ms: m.ms! };
        this.stats.checkpoints++;
        this.stats.maxFrames = Math.max(this.stats.maxFrames, r.log);
        if (r.checkpointed < r.log) this.stats.partial++;
        this.stats.maxMs = Math.max(this.stats.maxMs, r.ms);
        this.stats.totalMs += r.ms;
        done(r);
      });
    });
  }

  /** false once the thread failed or was stopped */
  get alive(): boolean {
    return !this.dead && !this.stopping;
  }

  /**
   * A checkpoint when one is due: CHECKPOINT_CHANGES rows changed since the last, or
   * CHECKPOINT_INTERVAL_MS passed with any change. The group-commit runner awaits it between two
   * batches (shipments/tx.ts), so that nothing is appended while it copies; one under way is
   * awaited, not doubled.
   */
  async maybe(): Promise<void> {
    if (this.inFlight) {
      await this.inFlight;
      return;
    }
    if (!this.alive) return;
    const changes = this.opts.changes();
    const delta = changes - this.checkpointedChanges;
    if (delta <= 0) return;
    const now = Date.now();
    if (delta < CHECKPOINT_CHANGES && now - this.checkpointedAt < CHECKPOINT_INTERVAL_MS) return;
    this.checkpointedChanges = changes;
    this.checkpointedAt = now;
    this.inFlight = this.checkpoint();
    try {
      await this.inFlight;
    } finally {
      this.inFlight = null;
    }
  }

  /**
   * One checkpoint in the thread; null when it could not run (the thread failed, SQLite refused
   * it) or gave no answer within waitMs (it may still finish in the thread: a PASSIVE checkpoint
   * beside the writer does no harm).
   */
  async checkpoint(waitMs = CHECKPOINT_WAIT_MS): Promise<CheckpointResult | null> {
    await this.ready;
    if (!this.alive) return null;
    const id = ++this.nextId;
    return new Promise<CheckpointResult | null>((resolve) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        resolve(null);
      }, waitMs);
      this.pending.set(id, (r) => {
        clearTimeout(timer);
        resolve(r);
      });
      this.worker.postMessage({ op: 'checkpoint', id });
    });
  }

  /** Ends the thread (after the checkpoint under way, if any). */
  async stop(): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    clearInterval(this.timer);
    for (const r of this.pending.values()) r(null);
    this.pending.clear();
    if (this.dead) return;
    const exited = new Promise<void>((r) => this.worker.once('exit', () => r()));
    // held until it exits: a caller awaiting close() must not see the process end first
    this.worker.ref();
    this.worker.postMessage({ op: 'stop' });
    const timer = setTimeout(() => void this.worker.terminate(), 5000);
    await exited;
    clearTimeout(timer);
  }

  /** Tests: the thread dies as a crash would end it. */
  async kill(): Promise<void> {
    await this.ready;
    await this.worker.terminate();
  }
}
