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
  ms: number;
}

export interface CheckpointerStats {
  checkpoints: number;
  /** checkpoints SQLite refused (the next one copies what is left; MAX_CONSECUTIVE_ERRORS in a row fail the thread) */
  errors: number;
  /** the most frames a checkpoint found in the WAL */
  maxFrames: number;
  /** checkpoints during which the main connection wrote anyway (a writer outside the runner): the WAL does not restart after them */
  overlapped: number;
  maxMs: number;
}

export class CheckpointerError extends Error {
  readonly code = 'SQLITE_CHECKPOINTER_FAILED';
}

/** checkpoints that fail one after another before the thread counts as failed */
const MAX_CONSECUTIVE_ERRORS = 5;

export class WalCheckpointer {
  private readonly worker: Worker;
  private readonly ready: Promise<void>;
  private started = false;
  private nextId = 0;
  private readonly pending = new Map<number, (r: CheckpointResult | null) => void>();
  private dead: Error | null = null;
  private stopping = false;
  private consecutiveErrors = 0;
  readonly stats: CheckpointerStats = { checkpoints: 0, errors: 0, maxFrames: 0, overlapped: 0, maxMs: 0 };

  /** total_changes() and the time at the last checkpoint */
  private checkpointedChanges = 0;
  private checkpointedAt = Date.now();
  private inFlight: Promise<void> | null = null;
  private readonly timer: NodeJS.Timeout;
  private readonly failed: (err: Error) => void;

  constructor(
    file: string,
    private readonly opts: {
      synchronous?: string;
      /** the main connection's total_changes(): rows written since it opened (DDL is not counted) */
      changes: () => number;
      /** a transaction is open on the main connection (its writes go on meanwhile) */
      inTransaction: () => boolean;
      /** the thread failed (or could not start): checkpoints are the main connection's again */
      onFailure: (err: Error) => void;
    },
  ) {
    this.worker = new Worker(WORKER, { workerData: { file, synchronous: opts.synchronous ?? 'FULL' } });
    let resolveReady!: () => void;
    this.ready = new Promise<void>((r) => (resolveReady = r));
    this.failed = (err: Error) => {
      resolveReady();
      if (this.dead || this.stopping) return;
      const dead = new CheckpointerError(`the WAL checkpoint thread failed: ${err.message}`);
      this.dead = dead;
      clearInterval(this.timer);
      for (const r of this.pending.values()) r(null);
      this.pending.clear();
      this.worker.unref();
      void this.worker.terminate();
      try {
        opts.onFailure(dead);
      } catch {
        /* the caller's handler must not take the process down */
      }
    };
    this.worker.on('error', this.failed);
    this.worker.on('exit', (code) => this.failed(new Error(`exited with code ${code}`)));
    this.worker.on('message', (m: { ready?: boolean; id?: number; error?: string; log?: number; checkpointed?: number; ms?: number }) => {
      if (m.ready) {
        this.started = true;
        resolveReady();
        this.refresh();
        return;
      }
      const done = this.pending.get(m.id!);
      if (!done) return;
      this.pending.delete(m.id!);
      if (m.error !== undefined) {
        // one checkpoint failed (e.g. SQLITE_BUSY on a lock): the next one copies what is left;
        // several in a row: the thread is of no use, the commits checkpoint again
        this.stats.errors++;
        if (++this.consecutiveErrors >= MAX_CONSECUTIVE_ERRORS) this.failed(new Error(`${this.consecutiveErrors} checkpoints failed in a row, the last: ${m.error}`));
        done(null);
        return;
      }
      this.consecutiveErrors = 0;
      const r: CheckpointResult = { log: m.log!, checkpointed: m.checkpointed!, ms: m.ms! };
      this.stats.checkpoints++;
      this.stats.maxFrames = Math.max(this.stats.maxFrames, r.log);
      this.stats.maxMs = Math.max(this.stats.maxMs, r.ms);
      done(r);
    });
    // the thread keeps the process alive only while it is starting or a checkpoint is asked
    // (refresh): a process that never closes the database still exits
    this.refresh();
    // writes outside the group-commit runner, or the runner's last batch before a quiet spell:
    // checkpointed once a second when no transaction is open (best effort: a write meanwhile
    // leaves its frames for the next checkpoint)
    this.timer = setInterval(() => {
      if (this.alive && !this.inFlight && !opts.inTransaction()) this.maybe().catch(() => undefined);
    }, CHECKPOINT_INTERVAL_MS);
    this.timer.unref();
  }

  /** ref'd while starting or while a checkpoint is pending, unref'd otherwise */
  private refresh(): void {
    if (this.dead || this.stopping) return;
    if (!this.started || this.pending.size) this.worker.ref();
    else this.worker.unref();
  }

  /** false once the thread failed or was stopped */
  get alive(): boolean {
    return !this.dead && !this.stopping;
  }

  /** Resolves when no checkpoint is under way (the runner waits for one the timer started). */
  async settled(): Promise<void> {
    while (this.inFlight) await this.inFlight;
  }

  /**
   * A checkpoint when one is due: CHECKPOINT_CHANGES rows changed since the last, or
   * CHECKPOINT_INTERVAL_MS passed with any change. The group-commit runner awaits it between two
   * batches (shipments/tx.ts), so that nothing is appended while it copies. A checkpoint during
   * which the main connection wrote anyway (a writer outside the runner) counts as overlapped:
   * its WAL does not restart then, the next checkpoint copies the rest.
   */
  async maybe(): Promise<void> {
    // no await when none is under way: the check and the start below happen in one go, so a batch
    // of the runner cannot slip in between (it awaits settled() first)
    if (this.inFlight) await this.settled();
    if (!this.alive) return;
    const changes = this.opts.changes();
    const delta = changes - this.checkpointedChanges;
    if (delta <= 0) return;
    const now = Date.now();
    if (delta < CHECKPOINT_CHANGES && now - this.checkpointedAt < CHECKPOINT_INTERVAL_MS) return;
    this.checkpointedChanges = changes;
    this.checkpointedAt = now;
    const run = async () => {
      const r = await this.checkpoint();
      if (r && this.alive && this.opts.changes() !== changes) this.stats.overlapped++;
    };
    this.inFlight = run();
    try {
      await this.inFlight;
    } finally {
      this.inFlight = null;
    }
  }

  /**
   * One checkpoint in the thread; null when it could not run (the thread failed, SQLite refused
   * it) or gave no answer within waitMs, the thread's start included (it may still finish in the
   * thread: a PASSIVE checkpoint beside the writer does no harm).
   */
  async checkpoint(waitMs = CHECKPOINT_WAIT_MS): Promise<CheckpointResult | null> {
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<'expired'>((r) => (timer = setTimeout(() => r('expired'), waitMs)));
    try {
      if ((await Promise.race([this.ready.then(() => 'ready' as const), expired])) === 'expired' || !this.alive) return null;
      const id = ++this.nextId;
      const answer = new Promise<CheckpointResult | null>((resolve) => this.pending.set(id, resolve));
      this.refresh();
      this.worker.postMessage({ op: 'checkpoint', id });
      const r = await Promise.race([answer, expired]);
      if (r === 'expired') {
        this.pending.delete(id);
        return null;
      }
      return r;
    } finally {
      clearTimeout(timer);
      this.refresh();
    }
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
