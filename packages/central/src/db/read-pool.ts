// SQLite's read threads (database.sqliteReadThreads): heavy reads off the event loop.
//
// better-sqlite3 is synchronous: a GetShipments page of 100 among 100,000 holds the event loop
// for about 250 us of SQL (4 joins, the items' JSON written by SQLite), during which no other
// request, MQTT message or keepalive is served, and the service's second core stays idle; a
// GetAccounts search over 20,000 accounts holds it for 5-30 ms (`GET /health` waited 64 ms at p50
// during the search bench's attack, 0 ms with the searches in a thread). Here a
// worker thread with its own read-only connection runs such reads (db/read-worker.mjs). WAL lets
// it read beside the one writing connection; it sees committed rows only, never a group-commit
// batch in progress, and a commit acknowledged before a read was sent is in that read (the WAL
// index is shared memory: a read transaction that starts after a commit sees it).
//
// A read the pool cannot serve (no thread: an in-memory store, the setting at 0, a thread that
// died and is not yet restarted) is the caller's to run on the main connection, as before: page()
// and all() answer undefined, or its promise rejects with ReadPoolError, and nothing is lost. A thread that
// dies is started again at the next read one second later.
//
// The tenant API's quick reads (a point read, a short page: SqliteReadPool.quick) go to a thread
// too, gathered per turn of the event loop: one message for all of them, read there in one read
// transaction. On the main connection each paid a read transaction of its own (the WAL read lock:
// three system calls) besides its statement; here one message and one read lock serve the turn.
//
// A thread runs at most one search at a time: the others wait in the pool until it answers, so a
// GetShipments page waits behind at most the one search its thread is running, never behind a
// queue of them (the quick reads, a page or one statement's rows, are handed to a thread at once).
// A thread holds at most MAX_POSTED reads and the pool at most MAX_WAITING searches; a read beyond
// either is the caller's (on the main connection): memory stays bounded under any flood.
import { Worker } from 'node:worker_threads';

const WORKER = new URL('./read-worker.mjs', import.meta.url);

/** wait before a thread that died is started again */
const RESTART_MS = 1000;
/** reads handed to one thread and not yet answered, at most */
export const MAX_POSTED = 1024;
/** searches waiting in the pool for a thread that runs none, at most */
export const MAX_WAITING = 1024;
/** a turn's quick reads go to a thread only while it holds fewer reads than this (none of them a search) */
export const QUICK_BEHIND = 4;

export interface PageRead {
  /** the key a total is held under (the statement's shape and parameters) */
  key: string;
  /** SELECT count(*) ... with the filter's `?` parameters */
  count: string;
  /** the page's SELECT of one column, ordered, ending in LIMIT ? ... OFFSET ? ... */
  page: string;
  params: unknown[];
  offset: number;
  size: number;
}

export interface PageResult {
  total: number;
  /** each row's one column */
  rows: unknown[];
  /** the total was counted by this read (not held from an earlier one under the same data) */
  counted: boolean;
}

export class ReadPoolError extends Error {
  constructor(
    message: string,
    readonly code: 'SQLITE_READ_THREAD_LOST' | 'SQLITE_READ_FAILED',
  ) {
    super(message);
    this.name = 'ReadPoolError';
  }
}

/** a read the thread answered with an error (the caller reads it on its own connection) */
function readFailed(error: string, code: string | null | undefined): ReadPoolError {
  return new ReadPoolError(`SQLite read thread: ${error}${code ? ` (${code})` : ''}`, 'SQLITE_READ_FAILED');
}

/**
 * What a read thread answered, or undefined when it could not serve the read (no thread could take
 * it, or ReadPoolError): the caller then reads it on its own connection. Any other error is thrown.
 */
export async function threadAnswer<T>(read: Promise<T> | undefined): Promise<T | undefined> {
  if (!read) return undefined;
  try {
    return await read;
  } catch (e) {
    if (e instanceof ReadPoolError) return undefined;
    throw e;
  }
}

export interface ReadPoolStats {
  /** reads answered by a thread (a page with its total, or one statement's rows) */
  reads: number;
  /** reads a thread failed, or that were waiting when no thread was left (the caller read them on the main connection) */
  failed: number;
  /** threads that died (error or exit) */
  threadsLost: number;
  /** reads refused because their thread held MAX_POSTED or MAX_WAITING searches waited (the caller read them on the main connection) */
  overflowed: number;
}

/** a quick read waiting for the end of the turn (SqliteReadPool.quick) */
interface QuickRead {
  text: string;
  params: readonly unknown[];
  mode: 'object' | 'raw' | 'pluck';
  resolve: (rows: unknown[]) => void;
  reject: (e: Error) => void;
}

/** a BLOB's bytes as the main connection gives them (a Buffer), from the Uint8Array a thread's message carries */
const toBuffer = (v: Uint8Array): Buffer => Buffer.from(v.buffer, v.byteOffset, v.byteLength);

/**
 * Turns the BLOBs of rows a thread answered (marked `blobs`: read-worker.mjs hasBlob) back into
 * Buffers, in place: rows as objects, as arrays ('raw'), or values ('pluck').
 */
export function asBuffers(rows: unknown[]): void {
  for (let i = 0; i < rows.length; i++) {
    const r = rows[i];
    if (r === null || typeof r !== 'object') continue;
    if (r instanceof Uint8Array) rows[i] = toBuffer(r);
    else if (Array.isArray(r)) {
      for (let j = 0; j < r.length; j++) if (r[j] instanceof Uint8Array) r[j] = toBuffer(r[j] as Uint8Array);
    } else {
      const o = r as Record<string, unknown>;
      for (const k in o) if (o[k] instanceof Uint8Array) o[k] = toBuffer(o[k] as Uint8Array);
    }
  }
}

/** a thread's answer */
interface Answer {
  ready?: boolean;
  id?: number;
  error?: string;
  code?: string | null;
  total?: number;
  rows?: unknown[];
  counted?: boolean;
  /** rows holds a BLOB (a Uint8Array here, to be made a Buffer) */
  blobs?: boolean;
  /** 'batch': each quick read's rows or error, in the order sent */
  answers?: { rows?: unknown[]; error?: string; code?: string | null; blobs?: boolean }[];
}

interface Pending {
  resolve: (m: Answer) => void;
  reject: (e: Error) => void;
  /** a search (at most one per thread) */
  slow: boolean;
}

/** a read on its way to a thread (a search waits in the pool for one that runs none) */
interface Waiting extends Pending {
  message: Record<string, unknown>;
}

class ReadThread {
  readonly worker: Worker;
  readonly pending = new Map<number, Pending>();
  /** a search among `pending` */
  slowPosted = false;
  dead = false;
  constructor(file: string, onDeath: (t: ReadThread, err: Error) => void, onAnswer: () => void) {
    this.worker = new Worker(WORKER, { workerData: { file } });
    // an idle read thread does not keep the process alive
    this.worker.unref();
    const die = (err: Error) => {
      if (this.dead) return;
      this.dead = true;
      const lost = new ReadPoolError(`SQLite read thread lost: ${err.message}`, 'SQLITE_READ_THREAD_LOST');
      for (const p of this.pending.values()) p.reject(lost);
      this.pending.clear();
      void this.worker.terminate();
      onDeath(this, err);
    };
    this.worker.on('error', die);
    this.worker.on('exit', (code) => die(new Error(`exited with code ${code}`)));
    this.worker.on('message', (m: Answer) => {
      if (m.ready) return;
      const p = this.pending.get(m.id!);
      if (!p) return;
      this.pending.delete(m.id!);
      if (this.pending.size === 0) this.worker.unref();
      if (p.slow) this.slowPosted = false;
      if (m.error !== undefined) p.reject(readFailed(m.error, m.code));
      else {
        if (m.blobs) asBuffers(m.rows!);
        if (m.answers) for (const a of m.answers) if (a.blobs) asBuffers(a.rows!);
        p.resolve(m);
      }
      onAnswer();
    });
  }
}

export class SqliteReadPool {
  private readonly threads: (ReadThread | null)[];
  /** per slot: no thread is started before this time (a thread died there) */
  private readonly restartAt: number[];
  private nextId = 0;
  private stopped = false;
  /** searches waiting for a thread that runs none, in arrival order */
  private readonly slow: Waiting[] = [];
  readonly stats: ReadPoolStats = { reads: 0, failed: 0, threadsLost: 0, overflowed: 0 };

  constructor(
    private readonly file: string,
    size: number,
    private readonly opts: { onThreadLost?: (err: Error) => void } = {},
  ) {
    this.threads = new Array<ReadThread | null>(size).fill(null);
    this.restartAt = new Array<number>(size).fill(0);
  }

  get size(): number {
    return this.threads.length;
  }

  /** the live threads' workers (diagnostics and fault tests) */
  workers(): Worker[] {
    return this.threads.filter((t): t is ReadThread => t !== null && !t.dead).map((t) => t.worker);
  }

  /**
   * The page and its total from a read thread, in one snapshot; undefined when no thread can take
   * it now (the caller reads on its own connection). The promise rejects with ReadPoolError when
   * the thread failed the read or died with it: the caller reads it on its own connection then.
   */
  page(req: PageRead): Promise<PageResult> | undefined {
    return this.send<PageResult>({ op: 'page', key: req.key, count: req.count, page: req.page, params: req.params, offset: req.offset, size: req.size }, (m) => ({ total: m.total!, rows: m.rows!, counted: m.counted! }));
  }

  /**
   * `slow`: a read of milliseconds (a search), at most one per thread: true waits in the pool for
   * a thread that runs none; 'now' does not wait (undefined when every thread runs one: the caller
   * reads it on its own connection at once).
   */
  private send<T>(message: Record<string, unknown>, answer: (m: Answer) => T, slow: boolean | 'now' = false): Promise<T> | undefined {
    // no thread can take it now (none live or startable): the caller's
    if (!this.anyThread()) return undefined;
    // searches that waited go first (a thread started again just now has room for them)
    if (this.slow.length) this.dispatch();
    const t = this.pick(slow !== false);
    if (!t && (slow !== true || this.slow.length >= MAX_WAITING)) {
      this.stats.overflowed++;
      return undefined;
    }
    return new Promise<T>((resolve, reject) => {
      const w: Waiting = {
        message,
        slow: slow !== false,
        resolve: (m) => {
          this.stats.reads++;
          resolve(answer(m));
        },
        reject: (e) => {
          this.stats.failed++;
          reject(e);
        },
      };
      if (t) this.post(t, w);
      else this.slow.push(w); // every thread runs a search: this one goes when one answers
    });
  }

  /** hands waiting searches to threads that run none; with no live thread left, they are the callers' */
  private dispatch(): void {
    while (this.slow.length) {
      const t = this.pick(true);
      if (!t) {
        if (!this.anyThread()) this.failWaiting(new ReadPoolError('SQLite read thread lost: no thread to read on', 'SQLITE_READ_THREAD_LOST'));
        return;
      }
      this.post(t, this.slow.shift()!);
    }
  }

  private post(t: ReadThread, w: Waiting): void {
    const id = this.nextId++;
    if (t.pending.size === 0) t.worker.ref();
    t.pending.set(id, w);
    if (w.slow) t.slowPosted = true;
    try {
      t.worker.postMessage({ ...w.message, id });
    } catch (err) {
      // a value the message cannot carry: this read fails over, the thread goes on
      t.pending.delete(id);
      if (w.slow) t.slowPosted = false;
      if (t.pending.size === 0) t.worker.unref();
      w.reject(new ReadPoolError(`SQLite read thread: the read could not be sent (${(err as Error).message})`, 'SQLITE_READ_FAILED'));
    }
  }

  private failWaiting(err: ReadPoolError): void {
    for (const w of this.slow.splice(0)) w.reject(err);
  }

  /**
   * The rows of one read statement, as objects, from a read thread (committed rows only);
   * undefined when no thread can take it now. Rejects with ReadPoolError as page() does: the
   * caller reads it on its own connection then. `slow`: a statement that may take milliseconds (a
   * count over a tenant's accounts): it runs as a search does (no quick read is queued behind it);
   * 'now': only if a thread runs no search at once, else undefined (the caller reads it itself)
   * rather than wait behind the searches.
   */
  all<R>(text: string, params: readonly unknown[], slow: boolean | 'now' = false): Promise<R[]> | undefined {
    return this.send<R[]>({ op: 'all', text, params }, (m) => m.rows as R[], slow);
  }

  /**
   * A page of a search's matches (each row's one column, in `asc` order) and its total, in one
   * snapshot (read-worker.mjs search): `asc` and `desc` are the matches' SELECT ordered both ways,
   * without LIMIT; `count` counts them. Undefined or ReadPoolError as page(). `wait` false: not
   * behind other searches (undefined when every thread runs one: the caller reads it itself).
   */
  search(req: { count: string; asc: string; desc: string; params: readonly unknown[]; offset: number; size: number }, wait = true): Promise<{ total: number; rows: unknown[] }> | undefined {
    return this.send({ op: 'search', ...req }, (m) => ({ total: m.total!, rows: m.rows! }), wait ? true : 'now');
  }

  /** quick reads gathered during this turn of the event loop, sent as one message at setImmediate (at most MAX_POSTED) */
  private quickReads: QuickRead[] = [];

  /**
   * The rows of one quick read statement (a point read, a short page: the tenant API's reads),
   * from a read thread. The quick reads of one turn of the event loop go to a thread as one
   * message (at setImmediate) and are read there in one read transaction, each answered apart:
   * one message each way and one WAL read lock for all of them, instead of a statement and a read
   * lock each on the main connection. Rows as objects, as arrays ('raw') or their one column
   * ('pluck'). Undefined when no thread can take it now, or MAX_POSTED wait for the turn's end;
   * rejects with ReadPoolError (the thread failed this read, or died with it, or at the turn's end
   * every thread was running a search or held QUICK_BEHIND reads: quick reads do not wait behind
   * those): the caller reads it on its own connection.
   */
  quick<R>(text: string, params: readonly unknown[], mode: 'object' | 'raw' | 'pluck'): Promise<R[]> | undefined {
    if (!this.anyThread()) return undefined;
    if (this.quickReads.length >= MAX_POSTED) {
      this.stats.overflowed++;
      return undefined;
    }
    return new Promise<R[]>((resolve, reject) => {
      if (this.quickReads.length === 0) setImmediate(this.flushQuick);
      this.quickReads.push({ text, params, mode, resolve: resolve as (rows: unknown[]) => void, reject });
    });
  }

  private readonly flushQuick = (): void => {
    const reads = this.quickReads;
    this.quickReads = [];
    if (reads.length === 0) return;
    const t = this.pick(false);
    if (!t || t.slowPosted || t.pending.size >= QUICK_BEHIND) {
      // no live thread with room, or the best one busy with a search (milliseconds) or a queue of
      // pages: the callers read them on their own connection at once rather than wait behind that
      this.stats.overflowed += reads.length;
      const err = new ReadPoolError('SQLite read thread: no thread free for quick reads', 'SQLITE_READ_FAILED');
      for (const r of reads) r.reject(err);
      return;
    }
    this.post(t, {
      message: { op: 'batch', reads: reads.map((r) => ({ text: r.text, params: r.params, mode: r.mode })) },
      slow: false,
      resolve: (m) => {
        const answers = m.answers!;
        for (let i = 0; i < reads.length; i++) {
          const a = answers[i]!;
          if (a.error !== undefined) {
            this.stats.failed++;
            reads[i]!.reject(readFailed(a.error, a.code));
          } else {
            this.stats.reads++;
            reads[i]!.resolve(a.rows!);
          }
        }
      },
      reject: (e) => {
        this.stats.failed += reads.length;
        for (const r of reads) r.reject(e);
      },
    });
  };

  /** a live thread, or one started now (its slot's restart delay passed), if any */
  private anyThread(): boolean {
    if (this.stopped) return false;
    const now = Date.now();
    for (let i = 0; i < this.threads.length; i++) {
      if (this.threads[i]) return true;
      if (now >= this.restartAt[i]! && this.startAt(i, now)) return true;
    }
    return false;
  }

  /** starts the thread of slot i; false when it cannot even be created (its reads go to the main connection meanwhile) */
  private startAt(i: number, now: number): boolean {
    try {
      this.threads[i] = this.start(i);
      return true;
    } catch (err) {
      this.restartAt[i] = now + RESTART_MS;
      this.lost(err as Error);
      return false;
    }
  }

  /** the live thread with room (fewer than MAX_POSTED reads; for a search, none running) and the fewest reads in flight */
  private pick(search: boolean): ReadThread | undefined {
    if (this.stopped) return undefined;
    let best: ReadThread | undefined;
    const now = Date.now();
    for (let i = 0; i < this.threads.length; i++) {
      if (!this.threads[i] && (now < this.restartAt[i]! || !this.startAt(i, now))) continue;
      const t = this.threads[i]!;
      if (t.pending.size >= MAX_POSTED || (search && t.slowPosted)) continue;
      // a quick read prefers a thread that runs no search
      if (!best || Number(t.slowPosted) - Number(best.slowPosted) < 0 || (t.slowPosted === best.slowPosted && t.pending.size < best.pending.size)) best = t;
      if (best.pending.size === 0 && !best.slowPosted) break;
    }
    return best;
  }

  private start(i: number): ReadThread {
    return new ReadThread(
      this.file,
      (dead, err) => {
        if (this.threads[i] === dead) this.threads[i] = null;
        this.restartAt[i] = Date.now() + RESTART_MS;
        if (this.stopped) return;
        this.lost(err);
        // the waiting reads go to another thread, or back to their callers when none is left
        this.dispatch();
      },
      () => this.dispatch(),
    );
  }

  private lost(err: Error): void {
    this.stats.threadsLost++;
    try {
      this.opts.onThreadLost?.(err);
    } catch {
      /* the caller's handler must not take the process down */
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.failWaiting(new ReadPoolError('SQLite read pool stopped', 'SQLITE_READ_THREAD_LOST'));
    const live = this.threads.filter((t): t is ReadThread => t !== null);
    this.threads.fill(null);
    await Promise.all(
      live.map(async (t) => {
        t.dead = true;
        for (const p of t.pending.values()) p.reject(new ReadPoolError('SQLite read pool stopped', 'SQLITE_READ_THREAD_LOST'));
        t.pending.clear();
        await t.worker.terminate();
      }),
    );
  }
}
