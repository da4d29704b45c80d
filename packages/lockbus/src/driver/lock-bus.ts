// The bus driver: one transaction at a time on one RS485 bus, polling every board, turning wire
// bits into door / latch / item state and events, and surviving a lost port.
//
// A transaction: wait for the inter-frame gap (and for the line to be quiet), drop whatever the
// line said meanwhile, write the request and wait for it to drain, then (if the dialect answers
// this request) collect bytes: the adapter's echo of our own request is dropped, the stream
// parser finds frames by header, length and checksum, and the first frame that answers the
// request ends it. No answer within the reply timeout: wait for silence and throw away late
// bytes so they cannot prefix the next answer, and hold that board's next request that expects an
// answer for lateReplyWindowMs, so its late answer is not taken for the next one. Nothing is ever
// retried here; polling is its own retry, and an unlock, once written, is never written again.
import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';
import pino, { type Logger } from 'pino';
import { dialects, isDialectName } from '../codec/index';
import type { Dialect, DialectName, LockReply, LockRequest } from '../codec/types';
import { LockBusError, type LockBusErrorCode } from '../errors';
import { createTransport, resolveBaudRate } from '../transport/factory';
import type { Transport } from '../transport/types';
import { boardStep, initialBoard, viewLocks, type BoardConfig, type BoardEvent, type BoardState, type LockView } from './board-state';

export type Polarity = 'closed-high' | 'closed-low';

export interface BoardSpec {
  address: number;
  /** Locks fitted; default the dialect's locksPerBoard. */
  locks?: number;
}

export interface LockBusOptions {
  /** Bus name used in events and logs. */
  name: string;
  /** URL-ish port: /dev/ttyUSB0, /dev/ttyUSB0?baud=19200, serial:///dev/..., tcp://host:port. */
  port?: string;
  /** Or a ready transport (tests: MemoryTransport). One of port / transport is required. */
  transport?: Transport;
  /**
   * Opens `port` (default: the transport factory's createTransport, at the bus's resolved baud
   * rate). A test wraps the real one to inject a fault into the real link.
   */
  createTransport?: (port: string, opts: { baudRate: number }) => Transport;
  dialect: DialectName | Dialect;
  /**
   * Default: `?baud=` of the port string, else the dialect's default (CU16 19200, 8A/80 9600).
   * Used for the port and timings; a value that contradicts the port string is BAD_CONFIG.
   */
  baudRate?: number;
  /** How a latched / closed lock reads on the wire. Default 'closed-high' (bit 1 = closed). */
  polarity?: Polarity;
  boards: BoardSpec[];
  /** Poll cycle period: every board read once per cycle. Default 500 ms. */
  pollIntervalMs?: number;
  /** Default true. false: no background polling (wiring check, one-shot commands). */
  polling?: boolean;
  /** Wait for an answer this long after the request drained. Default 150 ms. */
  replyTimeoutMs?: number;
  /**
   * Silence that ends a drain after a timeout, counted from the timeout or from the last byte
   * received, whichever is later (never from our own request). Default 25 ms.
   */
  quietMs?: number;
  /** Upper bound on waiting for the line to go quiet. Default 500 ms. */
  maxDrainMs?: number;
  /**
   * After a failed answer from a board (no reply, garbled, bad checksum), the next request to that
   * board that expects an answer is not written until this long after the failure, so an answer
   * up to replyTimeoutMs + lateReplyWindowMs late is discarded, never taken for the next one
   * (other boards' requests are not held themselves, but one queued behind a held request waits
   * for it). Default replyTimeoutMs.
   */
  lateReplyWindowMs?: number;
  /**
   * A bus scan (CU16 0x32 to the whole bus) is answered by every board, in a layout the driver
   * does not decode: the bus stays held for at least this long after the request, and then until
   * quietMs of silence (bounded by maxDrainMs), so no request is written while answers arrive.
   * Default replyTimeoutMs.
   */
  scanWindowMs?: number;
  /** Inter-frame gap. Default 3.5 character times + 1 ms. */
  gapMs?: number;
  /** A write not drained within this long fails WRITE_FAILED (never re-sent). Default 1000 ms. */
  writeTimeoutMs?: number;
  /** Failed polls in a row before boardOffline. Default 3. */
  offlineAfter?: number;
  /** If set, sent (setPulse) to every board that comes online, where the dialect can. */
  pulseMs?: number | null;
  /** A low lock bit within this long after an unlock is the latch, not yet the door. Default (pulseMs ?? 500) + 100. */
  releaseGraceMs?: number;
  /** No opening this long after an unlock: jam. Default 10 000 ms. */
  jamWindowMs?: number;
  /** Open longer than this: doorLeftOpen. Default 120 000 ms; null = never. */
  doorLeftOpenMs?: number | null;
  /** A change this soon after a command is not forced. Default jamWindowMs. */
  commandWindowMs?: number;
  /**
   * A pending unlock whose door was not seen for this long (no good poll: a stalled poll loop; a low
   * bit inside the release grace shows only the latch) is blind, as after a failed poll: no jam, its
   * outcome settled by the door and item seen next. Default max(1500, 3 x pollIntervalMs,
   * releaseGraceMs + 2 x pollIntervalMs).
   */
  unwatchedGapMs?: number;
  /** Reopen a lost port with exponential back-off. Defaults 250 ms doubling to 10 s. */
  reconnect?: { initialMs?: number; maxMs?: number; factor?: number };
  /** start() rejects when the first open fails (wiring check). Default false: keep retrying. */
  failIfPortMissing?: boolean;
  logger?: Logger;
  /** Wall clock for event timestamps and state timers. Default Date.now. */
  now?: () => number;
}

interface Base {
  bus: string;
  at: number;
}
type WithBus<E> = E extends { type: string } ? Omit<E, 'type'> & Base : never;
type Ev<T extends BoardEvent['type']> = WithBus<Extract<BoardEvent, { type: T }>>;

export interface UnlockSentEvent extends Base {
  board: number;
  lock: number | 'all';
  alreadyOpen: boolean;
  /** The write broke off (WRITE_FAILED): the board may or may not have taken the pulse. */
  uncertain: boolean;
}

export interface LockBusEvents {
  unlockSent: [UnlockSentEvent];
  doorOpened: [Ev<'doorOpened'>];
  doorClosed: [Ev<'doorClosed'>];
  itemPlaced: [Ev<'itemPlaced'>];
  itemRemoved: [Ev<'itemRemoved'>];
  jam: [Ev<'jam'>];
  unlockUnobserved: [Ev<'unlockUnobserved'>];
  doorLeftOpen: [Ev<'doorLeftOpen'>];
  forcedOpen: [Ev<'forcedOpen'>];
  boardOffline: [Ev<'boardOffline'>];
  boardOnline: [Ev<'boardOnline'>];
  portOpened: [Base];
  portClosed: [Base & { error: string | null }];
  pollCycle: [Base & { durationMs: number }];
  /** One request on the line ended (emitted only while someone listens): ok, or the error code (NO_REPLY, BAD_CHECKSUM, ...). Board null: a whole-bus scan. */
  transaction: [TransactionEvent];
  frame: [{ bus: string; dir: 'tx' | 'rx'; hex: string }];
}

export interface TransactionEvent extends Base {
  board: number | null;
  kind: LockRequest['kind'];
  outcome: 'ok' | LockBusErrorCode;
  durationMs: number;
}

/** One address of a bus scan (LockBus.scan). */
export interface AddressScan {
  address: number;
  /** answers: good status replies only; garbled: garbled / bad-checksum answers (two boards on one address, wiring); no-answer: silent */
  result: 'answers' | 'no-answer' | 'garbled';
  /** Attempts made and how each ended (ok / NO_REPLY / GARBLED_REPLY / BAD_CHECKSUM). */
  attempts: string[];
  /** Locks read (answering boards). */
  locks?: number;
}

export interface TransactionResult {
  /** When the request finished draining (performance.now()). */
  drainedAt: number;
  reply: LockReply | null;
  /** The adapter echoed our request back. */
  echoed: boolean;
}

export interface UnlockResult {
  sentAt: number;
  /** 8A/80 boards answer unlocks; CU16 / 48 do not (null). */
  reply: LockReply | null;
  /**
   * Why there is no reply although the dialect answers unlocks; WRITE_FAILED: the write broke off,
   * so the lock may or may not have pulsed (the door is watched for either).
   */
  replyError: LockBusErrorCode | null;
}

interface Job {
  req: LockRequest;
  frame: Buffer;
  priority: number;
  onWritten?: (drainedAt: number) => void;
  resolve: (r: TransactionResult) => void;
  reject: (e: LockBusError) => void;
}

interface Collector {
  onChunk(chunk: Buffer): void;
  abort(err: LockBusError): void;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export class LockBus extends EventEmitter<LockBusEvents> {
  readonly name: string;
  readonly dialect: Dialect;
  readonly baudRate: number;
  readonly polarity: Polarity;
  private readonly transport: Transport;
  private readonly log: Logger;
  private readonly now: () => number;
  private readonly cfg: BoardConfig;
  private readonly t: {
    pollIntervalMs: number;
    replyTimeoutMs: number;
    scanWindowMs: number;
    quietMs: number;
    maxDrainMs: number;
    lateReplyWindowMs: number;
    gapMs: number;
    writeTimeoutMs: number;
    reconnectInitialMs: number;
    reconnectMaxMs: number;
    reconnectFactor: number;
  };
  private readonly boardSpecs: { address: number; locks: number }[];
  private readonly states = new Map<number, BoardState>();
  private readonly parser;

  private running = false;
  private queue: Job[] = [];
  private pumping: Promise<void> | null = null;
  private collector: Collector | null = null;
  private lastLineActivity = 0; // performance.now() of the last byte sent or received
  private lastRxAt = 0; // performance.now() of the last byte received
  /** Per board: performance.now() before which no request expecting its answer is written (a late answer may still come). */
  private readonly lateUntil = new Map<number, number>();
  private reconnectTimer: NodeJS.Timeout | null = null;
  private backoffMs: number;
  private pollWake: (() => void) | null = null;
  private pollLoopDone: Promise<void> | null = null;
  /** pause(): the poll loop reads no board (a scan holds the bus); resume() ends it */
  private pausedFor: string | null = null;
  private pauseWake: (() => void) | null = null;
  /** the poll of one board under way (pause() waits for it) */
  private polling: Promise<void> | null = null;
  private readonly handlers: { data: (c: Buffer) => void; close: (e?: Error) => void; error: (e: Error) => void };

  constructor(private readonly opts: LockBusOptions) {
    super();
    this.name = opts.name;
    const d = typeof opts.dialect === 'string' ? (isDialectName(opts.dialect) ? dialects[opts.dialect] : undefined) : opts.dialect;
    if (!d) throw new LockBusError('BAD_CONFIG', `unknown dialect ${String(opts.dialect)}`);
    this.dialect = d;
    if (!opts.transport && !opts.port) throw new LockBusError('BAD_CONFIG', `bus ${opts.name}: port or transport required`);
    // one source of truth: the port opens at this rate and the gap / timings are computed from it
    this.baudRate = resolveBaudRate(opts.transport ? undefined : opts.port, opts.baudRate, d.defaultBaudRate);
    this.polarity = opts.polarity ?? 'closed-high';
    this.transport = opts.transport ?? (opts.createTransport ?? createTransport)(opts.port!, { baudRate: this.baudRate });
    this.log = (opts.logger ?? pino({ level: 'info' })).child({ ns: 'lockbus.driver', bus: opts.name });
    this.now = opts.now ?? Date.now;
    const charMs = (10 * 1000) / this.baudRate;
    const jamWindowMs = opts.jamWindowMs ?? 10_000;
    const releaseGraceMs = opts.releaseGraceMs ?? (opts.pulseMs ?? 500) + 100;
    const pollIntervalMs = opts.pollIntervalMs ?? 500;
    this.cfg = {
      offlineAfter: opts.offlineAfter ?? 3,
      releaseGraceMs,
      jamWindowMs,
      doorLeftOpenMs: opts.doorLeftOpenMs === undefined ? 120_000 : opts.doorLeftOpenMs,
      commandWindowMs: opts.commandWindowMs ?? jamWindowMs,
      // above the longest a door goes unseen after an unlock in normal polling (the grace, then up
      // to a poll interval, with room for jitter): otherwise the same jammed door would end as a jam
      // or as unobserved by the poll's timing
      unwatchedGapMs: opts.unwatchedGapMs ?? Math.max(1500, 3 * pollIntervalMs, releaseGraceMs + 2 * pollIntervalMs),
    };
    this.t = {
      pollIntervalMs,
      replyTimeoutMs: opts.replyTimeoutMs ?? 150,
      scanWindowMs: opts.scanWindowMs ?? opts.replyTimeoutMs ?? 150,
      quietMs: opts.quietMs ?? 25,
      maxDrainMs: opts.maxDrainMs ?? 500,
      lateReplyWindowMs: opts.lateReplyWindowMs ?? opts.replyTimeoutMs ?? 150,
      gapMs: opts.gapMs ?? 3.5 * charMs + 1,
      writeTimeoutMs: opts.writeTimeoutMs ?? 1000,
      reconnectInitialMs: opts.reconnect?.initialMs ?? 250,
      reconnectMaxMs: opts.reconnect?.maxMs ?? 10_000,
      reconnectFactor: opts.reconnect?.factor ?? 2,
    };
    this.backoffMs = this.t.reconnectInitialMs;
    const [lo, hi] = d.boardRange;
    for (const b of opts.boards) {
      if (!Number.isInteger(b.address) || b.address < lo || b.address > hi) throw new LockBusError('BAD_CONFIG', `bus ${opts.name}: board ${b.address} not in ${lo}..${hi} for ${d.name}`);
    }
    this.boardSpecs = opts.boards.map((b) => ({ address: b.address, locks: b.locks ?? d.locksPerBoard }));
    for (const b of this.boardSpecs) this.states.set(b.address, initialBoard(b.address, b.locks));
    this.parser = d.createParser('replies');
    this.handlers = {
      data: (c) => this.onData(c),
      close: (e) => this.onTransportClose(e),
      error: (e) => this.log.warn({ err: e.message }, 'transport error'),
    };
  }

  /** Milliseconds of one 8N1 character at this bus's baud rate. */
  get charMs(): number {
    return (10 * 1000) / this.baudRate;
  }

  /** The inter-frame gap in use (ms). */
  get gapMs(): number {
    return this.t.gapMs;
  }

  /** The pulse time this driver sets on boards (null: left as the boards have it). */
  get pulseMs(): number | null {
    return this.opts.pulseMs ?? null;
  }

  get portOpen(): boolean {
    return this.transport.isOpen;
  }

  get boards(): number[] {
    return this.boardSpecs.map((b) => b.address);
  }

  /** Door / latch / item of every lock of a board ('unknown' / null while offline or not yet polled). */
  locks(board: number): LockView[] {
    const s = this.states.get(board);
    if (!s) throw new LockBusError('UNKNOWN_BOARD', `bus ${this.name} has no board ${board}`);
    return viewLocks(s);
  }

  boardOnline(board: number): boolean | null {
    return this.states.get(board)?.online ?? null;
  }

  async start(): Promise<void> {
    if (this.running) return;
    this.running = true;
    this.transport.on('data', this.handlers.data);
    this.transport.on('close', this.handlers.close);
    this.transport.on('error', this.handlers.error);
    try {
      await this.transport.open();
      this.onOpened();
    } catch (err) {
      if (this.opts.failIfPortMissing) {
        this.running = false;
        this.detach();
        throw err instanceof LockBusError ? err : new LockBusError('PORT_OPEN_FAILED', String(err));
      }
      this.log.warn({ err: (err as Error).message, port: this.transport.description }, 'port not available; retrying');
      this.scheduleReconnect();
    }
    if (this.opts.polling !== false) this.pollLoopDone = this.pollLoop();
    this.log.info({ port: this.transport.description, dialect: this.dialect.name, baud: this.baudRate, boards: this.boards }, 'lock bus started');
  }

  async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    this.reconnectTimer = null;
    const stopped = new LockBusError('STOPPED', `bus ${this.name} stopped`);
    for (const j of this.queue.splice(0)) j.reject(new LockBusError('NOT_SENT', 'bus stopped before the request was sent'));
    this.collector?.abort(stopped);
    this.pollWake?.();
    this.pauseWake?.();
    await this.pumping;
    await this.pollLoopDone;
    this.detach();
    await this.transport.close().catch(() => undefined);
    this.log.info('lock bus stopped');
  }

  /**
   * Pulse one lock. Resolves once the frame has left the port (and, for dialects that answer
   * unlocks, once the answer came or timed out). Rejects with NOT_SENT when nothing was written
   * (safe to try again). A write that broke off resolves with replyError WRITE_FAILED: the lock may
   * have pulsed, so it counts as sent (do not blindly repeat) and its door is watched without a
   * jam window. Never re-sent by the driver.
   */
  async unlock(board: number, lock: number): Promise<UnlockResult> {
    this.requireBoard(board);
    this.refuseWhilePaused();
    return this.sendUnlock({ kind: 'unlock', board, lock }, lock);
  }

  async unlockAll(board: number): Promise<UnlockResult> {
    this.requireBoard(board);
    if (!this.dialect.supports('unlockAll')) throw new LockBusError('UNSUPPORTED', `${this.dialect.name} has no unlock-all`);
    this.refuseWhilePaused();
    return this.sendUnlock({ kind: 'unlockAll', board }, 'all');
  }

  /** Why the poll loop is paused (pause()), or null while it polls. */
  get paused(): string | null {
    return this.pausedFor;
  }

  /**
   * Stops the poll loop reading boards (the poll under way finishes first) until resume(): the
   * transport stays open and other requests (readStatus, transact) still run, so the bus's owner
   * can use the line alone, e.g. for a scan. Nothing is tracked meanwhile, so no board goes
   * offline and no jam is judged. Unlocks are refused (BUSY) while paused: a door opened unwatched
   * would be judged jammed or forced when polling resumes. Refused (BUSY) while already paused, or
   * while an unlock is still being watched (its jam window has not run out).
   */
  async pause(why: string): Promise<void> {
    if (!this.running) throw new LockBusError('NOT_SENT', `bus ${this.name} is not started`);
    if (this.pausedFor !== null) throw new LockBusError('BUSY', `bus ${this.name} is paused already (${this.pausedFor})`);
    if ([...this.states.values()].some((s) => s.locks.some((l) => l.unlockAt !== null))) {
      throw new LockBusError('BUSY', `bus ${this.name}: an unlock is still being watched; try again in a few seconds`);
    }
    this.pausedFor = why;
    this.log.info({ why }, 'polling paused');
    await this.polling;
  }

  /** Polling again after pause(). */
  resume(): void {
    if (this.pausedFor === null) return;
    this.pausedFor = null;
    this.log.info('polling resumed');
    const wake = this.pauseWake;
    this.pauseWake = null;
    wake?.();
  }

  /**
   * Which addresses answer (default: the dialect's whole address range), with polling paused
   * meanwhile, over this bus's own transport: the answers cannot be mixed up with the poll
   * loop's (a second program on the same line reports ghost boards). Every address is read once
   * (a silent one costs one reply timeout); answering or garbled ones twice more. Tracked state
   * is not touched: no board goes offline or online through a scan. BUSY while paused already.
   */
  async scan(addresses?: number[]): Promise<AddressScan[]> {
    const [lo, hi] = this.dialect.boardRange;
    const list = addresses ?? Array.from({ length: hi - lo + 1 }, (_, i) => lo + i);
    for (const a of list) if (!Number.isInteger(a) || a < lo || a > hi) throw new LockBusError('BAD_CONFIG', `bus ${this.name}: address ${a} not in ${lo}..${hi} for ${this.dialect.name}`);
    if (!this.transport.isOpen) throw new LockBusError('NOT_SENT', `port ${this.transport.description} is not open`);
    await this.pause('scan');
    const out: AddressScan[] = [];
    try {
      for (const address of list) {
        const attempts: string[] = [];
        let locks: number | undefined;
        for (let i = 0; i < 3; i++) {
          try {
            locks = (await this.readStatus(address)).closed.length;
            attempts.push('ok');
          } catch (err) {
            const code = err instanceof LockBusError ? err.code : 'ERROR';
            attempts.push(code);
            if (code === 'PORT_LOST' || code === 'NOT_SENT' || code === 'STOPPED' || code === 'WRITE_FAILED') throw err;
          }
          if (i === 0 && attempts[0] === 'NO_REPLY') break;
        }
        const ok = attempts.filter((a) => a === 'ok').length;
        const bad = attempts.filter((a) => a === 'GARBLED_REPLY' || a === 'BAD_CHECKSUM').length;
        out.push({ address, result: bad > 0 ? 'garbled' : ok > 0 ? 'answers' : 'no-answer', attempts, ...(locks !== undefined ? { locks } : {}) });
      }
    } finally {
      this.resume();
    }
    this.log.info({ found: out.filter((r) => r.result === 'answers').map((r) => r.address), garbled: out.filter((r) => r.result === 'garbled').map((r) => r.address) }, 'bus scanned');
    return out;
  }

  private refuseWhilePaused(): void {
    if (this.pausedFor !== null) throw new LockBusError('BUSY', `bus ${this.name} is paused (${this.pausedFor}): no unlock until polling resumes`);
  }

  /** One status read outside the poll cycle (wiring check). Does not change tracked state. */
  async readStatus(board: number): Promise<{ closed: boolean[]; items: boolean[] | null; reply: LockReply }> {
    const r = await this.transact({ kind: 'status', board });
    if (!r.reply || r.reply.kind !== 'status') throw new LockBusError('NO_REPLY', `board ${board}: no status`);
    const n = this.boardSpecs.find((b) => b.address === board)?.locks ?? this.dialect.locksPerBoard;
    return { ...this.toClosed(r.reply, n), reply: r.reply };
  }

  async setPulse(board: number, ms: number): Promise<void> {
    if (!this.dialect.supports('setPulse')) throw new LockBusError('UNSUPPORTED', `${this.dialect.name} cannot set the pulse time`);
    await this.transact({ kind: 'setPulse', board, ms }, 1);
  }

  /** Queue one request; resolves with its reply (null when the dialect sends none). */
  transact(req: LockRequest, priority = 1, onWritten?: (drainedAt: number) => void): Promise<TransactionResult> {
    if (!this.running) return Promise.reject(new LockBusError('NOT_SENT', `bus ${this.name} is not started`));
    let frame: Buffer;
    try {
      frame = this.dialect.encodeRequest(req);
    } catch (err) {
      const code = (err as { code?: string }).code === 'UNSUPPORTED' ? 'UNSUPPORTED' : 'BAD_CONFIG';
      return Promise.reject(new LockBusError(code, (err as Error).message));
    }
    return new Promise<TransactionResult>((resolve, reject) => {
      const job: Job = { req, frame, priority, onWritten, resolve, reject };
      // higher priority first, FIFO within a priority
      const at = this.queue.findIndex((j) => j.priority < priority);
      if (at < 0) this.queue.push(job);
      else this.queue.splice(at, 0, job);
      this.pump();
    });
  }

  // ---------------------------------------------------------------- internals

  private requireBoard(board: number): void {
    if (!this.states.has(board)) throw new LockBusError('UNKNOWN_BOARD', `bus ${this.name} has no board ${board}`);
  }

  private async sendUnlock(req: LockRequest, lock: number | 'all'): Promise<UnlockResult> {
    const board = (req as { board: number }).board;
    let sentAt = 0;
    const sent = (uncertain: boolean) => {
      sentAt = this.now();
      const s = this.states.get(board)!;
      const alreadyOpen = lock !== 'all' && s.online === true && s.locks[lock - 1]?.door === 'open';
      this.applyBoard(board, { kind: 'unlockSent', at: sentAt, lock, uncertain });
      if (uncertain) this.log.warn({ board, lock, alreadyOpen }, 'unlock write broke off: the lock may have pulsed; its door is watched');
      else this.log.info({ board, lock, alreadyOpen }, 'unlock sent');
      this.safeEmit('unlockSent', { bus: this.name, at: sentAt, board, lock, alreadyOpen, uncertain });
    };
    try {
      const r = await this.transact(req, 10, () => sent(false));
      return { sentAt, reply: r.reply, replyError: null };
    } catch (err) {
      const e = err as LockBusError;
      // Written, but the answer did not come: the unlock stands (never repeated).
      if (sentAt && (e.code === 'NO_REPLY' || e.code === 'GARBLED_REPLY' || e.code === 'BAD_CHECKSUM' || e.code === 'PORT_LOST' || e.code === 'STOPPED')) {
        return { sentAt, reply: null, replyError: e.code };
      }
      // The write broke off (the adapter vanished mid-drain, or the drain never returned): the
      // whole frame may have reached the board. Treated as sent and never repeated, so a door
      // that opens is the unlock's and not forced; no jam is concluded until a poll sees the latch
      // released (board-state.ts `uncertain`): a door still shut past the grace is
      // unlockUnobserved.
      if (!sentAt && e.code === 'WRITE_FAILED') {
        sent(true);
        return { sentAt, reply: null, replyError: e.code };
      }
      throw e;
    }
  }

  private pump(): void {
    if (this.pumping) return;
    this.pumping = (async () => {
      while (this.running && this.queue.length) {
        const job = this.queue.shift()!;
        await this.run(this.listenerCount('transaction') > 0 ? this.observed(job) : job);
      }
    })()
      .catch((err: Error) => this.log.error({ err: err.message }, 'transaction loop failed'))
      .finally(() => {
        this.pumping = null;
        if (this.running && this.queue.length) this.pump();
      });
  }

  /** The job, reporting its end as a `transaction` event (metrics: packages/agent/src/metrics.ts). */
  private observed(job: Job): Job {
    const board = (job.req as { board?: number }).board ?? null;
    const started = performance.now();
    const report = (outcome: TransactionEvent['outcome']) => this.safeEmit('transaction', { bus: this.name, at: this.now(), board, kind: job.req.kind, outcome, durationMs: performance.now() - started });
    return {
      ...job,
      resolve: (r) => {
        report('ok');
        job.resolve(r);
      },
      reject: (e) => {
        report(e.code);
        job.reject(e);
      },
    };
  }

  private async waitForQuietLine(): Promise<void> {
    const start = performance.now();
    for (;;) {
      const since = performance.now() - this.lastLineActivity;
      if (since >= this.t.gapMs) return;
      if (performance.now() - start > this.t.maxDrainMs) return; // a babbling line: go anyway
      await sleep(Math.max(1, Math.ceil(this.t.gapMs - since)));
    }
  }

  private async run(job: Job): Promise<void> {
    if (!this.transport.isOpen) {
      job.reject(new LockBusError('NOT_SENT', `port ${this.transport.description} is not open`));
      return;
    }
    const expectsReply = this.dialect.repliesTo(job.req);
    const board = (job.req as { board?: number }).board;
    if (expectsReply && board !== undefined) await this.waitOutLateAnswer(board);
    await this.waitForQuietLine();
    if (!this.running) {
      job.reject(new LockBusError('NOT_SENT', 'bus stopped before the request was sent'));
      return;
    }
    // flush: whatever the line said before our request is not its answer
    this.parser.reset();
    // the configured channel count frames replies whose length depends on it (8A/80 read-all)
    const locks = this.boardSpecs.find((b) => b.address === board)?.locks;
    this.parser.expect(expectsReply ? job.req : null, { locks });
    const pending = expectsReply ? this.collect(job) : null;
    this.emitFrame('tx', job.frame);
    try {
      await this.writeWithTimeout(job.frame);
    } catch (err) {
      this.collector = null;
      this.lastLineActivity = performance.now();
      const e = err as LockBusError;
      // PORT_NOT_OPEN means nothing left the host; anything else may have sent part of the frame.
      const code: LockBusErrorCode = e.code === 'PORT_NOT_OPEN' ? 'NOT_SENT' : 'WRITE_FAILED';
      job.reject(new LockBusError(code, e.message, { cause: e }));
      return;
    }
    const drainedAt = performance.now();
    this.lastLineActivity = drainedAt;
    // the reply timeout runs from the end of the write
    pending?.armTimeout();
    try {
      job.onWritten?.(drainedAt);
    } catch (err) {
      this.log.error({ err: (err as Error).message }, 'onWritten handler failed');
    }
    if (!pending) {
      // one transaction at a time: answers the driver does not wait for still occupy the bus
      if (job.req.kind === 'scan') await this.holdForScanAnswers(drainedAt);
      job.resolve({ drainedAt, reply: null, echoed: false });
      return;
    }
    try {
      const { reply, echoed } = await pending.result;
      job.resolve({ drainedAt, reply, echoed });
    } catch (err) {
      const e = err as LockBusError;
      if (e.code === 'NO_REPLY' || e.code === 'GARBLED_REPLY' || e.code === 'BAD_CHECKSUM') {
        // its answer may still be on the way: the next request to this board waits it out
        if (board !== undefined) this.lateUntil.set(board, (pending.endedAt() || performance.now()) + this.t.lateReplyWindowMs);
        await this.drainLateBytes(pending.endedAt());
      }
      job.reject(e);
    } finally {
      this.collector = null;
      this.parser.reset();
    }
  }

  /**
   * A board whose last answer failed may still send it: hold a request that expects its answer
   * until lateReplyWindowMs after the failure (what arrives meanwhile is dropped by the flush
   * before the write, or ignored as another board's frame). Bounded; stop() cuts it short.
   */
  private async waitOutLateAnswer(board: number): Promise<void> {
    const until = this.lateUntil.get(board);
    if (until === undefined) return;
    this.lateUntil.delete(board);
    while (this.running) {
      const left = until - performance.now();
      if (left <= 0) return;
      await sleep(Math.min(left, 50));
    }
  }

  /** A write whose drain never returns (a wedged adapter) must not stall the bus forever. */
  private writeWithTimeout(frame: Buffer): Promise<void> {
    const ms = this.t.writeTimeoutMs;
    let timer: NodeJS.Timeout | null = null;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new LockBusError('WRITE_FAILED', `write not drained within ${ms} ms`)), ms);
    });
    return Promise.race([this.transport.write(frame), timeout]).finally(() => {
      if (timer) clearTimeout(timer);
    });
  }

  /** Sets up the reply collector before the write so no byte is missed. */
  private collect(job: Job): { result: Promise<{ reply: LockReply; echoed: boolean }>; armTimeout: () => void; endedAt: () => number } {
    const frame = job.frame;
    let echoMatched = 0;
    let echoDone = false;
    let echoed = false;
    let sawGarbage = false;
    let sawBadChecksum = false;
    let sawOther = false;
    let timer: NodeJS.Timeout | null = null;
    let endedAt = 0;
    let settle: ((v: { reply: LockReply; echoed: boolean } | LockBusError) => void) | null = null;
    const result = new Promise<{ reply: LockReply; echoed: boolean }>((resolve, reject) => {
      settle = (v) => {
        endedAt = performance.now();
        if (timer) clearTimeout(timer);
        settle = null;
        if (v instanceof LockBusError) reject(v);
        else resolve(v);
      };
    });
    result.catch(() => undefined); // a port lost mid-write settles this before anyone awaits it
    const tryFrames = (bytes: Buffer): boolean => {
      for (const pf of this.parser.push(bytes)) {
        if (!pf.ok) {
          if (pf.error === 'BAD_CHECKSUM') sawBadChecksum = true;
          else sawGarbage = true;
          if (pf.error === 'PARSER_ERROR') this.log.error({ err: String(pf.cause), bytes: pf.bytes.length }, 'frame parser failed (dialect bug): bytes dropped');
          this.log.debug({ hex: pf.bytes.toString('hex'), error: pf.error }, 'rx rejected');
          continue;
        }
        let rep: LockReply;
        try {
          rep = this.dialect.decodeReply(pf.frame);
        } catch {
          sawOther = true;
          continue;
        }
        if (this.dialect.matches(job.req, rep)) {
          settle?.({ reply: rep, echoed });
          return true;
        }
        sawOther = true; // a frame for someone else (late answer to an earlier request)
        this.log.debug({ hex: pf.frame.toString('hex') }, 'rx frame does not answer the request');
      }
      return false;
    };
    // Echo filter: an adapter that hears its own transmitter returns our request first.
    const stripEcho = (chunk: Buffer): Buffer => {
      if (echoDone) return chunk;
      for (let k = 0; k < chunk.length; k++) {
        if (echoMatched < frame.length && chunk[k] === frame[echoMatched]) {
          echoMatched++;
          if (echoMatched === frame.length) {
            echoDone = true;
            echoed = true;
            return chunk.subarray(k + 1);
          }
          continue;
        }
        echoDone = true;
        return Buffer.concat([frame.subarray(0, echoMatched), chunk.subarray(k)]);
      }
      return Buffer.alloc(0);
    };
    this.collector = {
      onChunk: (chunk) => {
        if (!settle) return;
        const rest = stripEcho(chunk);
        if (rest.length) tryFrames(rest);
      },
      abort: (err) => settle?.(err),
    };
    const armTimeout = () => {
      timer = setTimeout(() => {
        if (!settle) return;
        // An answer byte-identical to the request (8A/80 unlock feedback 11) was taken for an
        // echo: if nothing else came, it was the answer.
        if (echoed && !sawGarbage && !sawOther) {
          this.parser.reset();
          echoed = false;
          if (tryFrames(frame)) return;
        }
        const b = (job.req as { board?: number }).board;
        if (sawBadChecksum) settle(new LockBusError('BAD_CHECKSUM', `board ${b}: answer with a bad checksum`));
        else if (sawGarbage || sawOther || (echoMatched > 0 && !echoed)) settle(new LockBusError('GARBLED_REPLY', `board ${b}: garbled answer`));
        else settle(new LockBusError('NO_REPLY', `board ${b}: no answer within ${this.t.replyTimeoutMs} ms`));
      }, this.t.replyTimeoutMs);
    };
    return { result, armTimeout: () => settle && !timer && armTimeout(), endedAt: () => endedAt };
  }

  /**
   * After a failed answer: wait for silence, discarding late bytes (spec section 4 rule 3). The
   * silence counts from the failure (the timeout) or from the last byte received, whichever is
   * later: never from our own request, which would end the drain at once when nothing came back
   * and let a late answer be taken for the next request to the same board. Bounded by maxDrainMs.
   */
  private async drainLateBytes(failedAt: number): Promise<void> {
    const start = performance.now();
    const from = failedAt || start;
    while (performance.now() - start < this.t.maxDrainMs) {
      const quietFor = performance.now() - Math.max(from, this.lastRxAt);
      if (quietFor >= this.t.quietMs) break;
      await sleep(Math.max(1, Math.ceil(this.t.quietMs - quietFor)));
    }
    this.parser.reset();
  }

  /**
   * After a bus scan: every board answers, none of it decoded. Hold the bus for scanWindowMs
   * from the request, then until quietMs without a received byte; never longer than
   * scanWindowMs + maxDrainMs (a babbling line). Whatever came is dropped with the parser.
   */
  private async holdForScanAnswers(drainedAt: number): Promise<void> {
    const until = drainedAt + this.t.scanWindowMs;
    const limit = until + this.t.maxDrainMs;
    for (;;) {
      const now = performance.now();
      if (!this.running || now >= limit) break;
      const quietFor = now - Math.max(drainedAt, this.lastRxAt);
      if (now >= until && quietFor >= this.t.quietMs) break;
      await sleep(Math.max(1, Math.ceil(Math.max(until - now, this.t.quietMs - quietFor))));
    }
    this.parser.reset();
  }

  private onData(chunk: Buffer): void {
    this.lastLineActivity = performance.now();
    this.lastRxAt = this.lastLineActivity;
    this.emitFrame('rx', chunk);
    if (this.collector) this.collector.onChunk(chunk);
    else this.log.trace({ hex: chunk.toString('hex') }, 'rx outside a transaction: discarded');
  }

  private emitFrame(dir: 'tx' | 'rx', bytes: Buffer): void {
    if (this.listenerCount('frame') > 0) this.emit('frame', { bus: this.name, dir, hex: bytes.toString('hex') });
  }

  private onOpened(): void {
    this.backoffMs = this.t.reconnectInitialMs;
    this.lastLineActivity = performance.now();
    this.log.info({ port: this.transport.description }, 'port open');
    this.safeEmit('portOpened', { bus: this.name, at: this.now() });
  }

  private onTransportClose(err?: Error): void {
    if (!this.running) return;
    const msg = err?.message ?? 'closed';
    this.log.warn({ err: msg }, 'port lost; reopening with back-off');
    this.collector?.abort(new LockBusError('PORT_LOST', `port lost: ${msg}`));
    this.safeEmit('portClosed', { bus: this.name, at: this.now(), error: msg });
    this.scheduleReconnect();
  }

  private scheduleReconnect(): void {
    if (!this.running || this.reconnectTimer) return;
    const delay = this.backoffMs;
    this.backoffMs = Math.min(this.t.reconnectMaxMs, this.backoffMs * this.t.reconnectFactor);
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      if (!this.running) return;
      this.transport.open().then(
        () => {
          if (!this.running) {
            void this.transport.close().catch(() => undefined);
            return;
          }
          this.onOpened();
        },
        (e: Error) => {
          this.log.debug({ err: e.message, nextMs: this.backoffMs }, 'reopen failed');
          this.scheduleReconnect();
        },
      );
    }, delay);
  }

  private detach(): void {
    this.transport.off('data', this.handlers.data);
    this.transport.off('close', this.handlers.close);
    this.transport.off('error', this.handlers.error);
  }

  private toClosed(rep: Extract<LockReply, { kind: 'status' }>, n: number): { closed: boolean[]; items: boolean[] | null } {
    const high = this.polarity === 'closed-high';
    return {
      closed: rep.locks.slice(0, n).map((b) => (high ? b : !b)),
      items: rep.items ? rep.items.slice(0, n) : null,
    };
  }

  private applyBoard(board: number, input: Parameters<typeof boardStep>[1]): void {
    const s = this.states.get(board);
    if (!s) return;
    const { state, events } = boardStep(s, input, this.cfg);
    this.states.set(board, state);
    for (const e of events) this.emitBoardEvent(e, input.at);
  }

  private emitBoardEvent(e: BoardEvent, at: number): void {
    const { type, ...rest } = e;
    const payload = { bus: this.name, at, ...rest };
    const level = type === 'jam' || type === 'unlockUnobserved' || type === 'forcedOpen' || type === 'boardOffline' || type === 'doorLeftOpen' ? 'warn' : 'info';
    this.log[level](payload, type);
    this.safeEmit(type, payload);
    if (type === 'boardOnline' && this.opts.pulseMs != null && this.dialect.supports('setPulse')) {
      this.setPulse(e.board, this.opts.pulseMs).catch((err: LockBusError) => this.log.warn({ board: e.board, errorCode: err.code }, 'setting the pulse time failed'));
    }
  }

  /** A throwing listener must not look like a failed poll or stop the bus. */
  private safeEmit(type: string, payload: unknown): void {
    try {
      (this.emit as (t: string, p: unknown) => boolean)(type, payload);
    } catch (err) {
      this.log.error({ event: type, err: (err as Error).message }, 'event listener threw');
    }
  }

  private async pollBoard(spec: { address: number; locks: number }): Promise<void> {
    try {
      const r = await this.transact({ kind: 'status', board: spec.address }, 1);
      if (!r.reply || r.reply.kind !== 'status') throw new LockBusError('NO_REPLY', 'no status');
      this.applyBoard(spec.address, { kind: 'poll', at: this.now(), ...this.toClosed(r.reply, spec.locks) });
    } catch (err) {
      const code = (err as LockBusError).code ?? 'NO_REPLY';
      if (!this.running) return;
      this.log.debug({ board: spec.address, errorCode: code }, 'poll failed');
      this.applyBoard(spec.address, { kind: 'pollFailed', at: this.now(), error: code });
    }
  }

  private async pollLoop(): Promise<void> {
    while (this.running) {
      const t0 = performance.now();
      let waited = false;
      for (const spec of this.boardSpecs) {
        while (this.running && this.pausedFor !== null) {
          waited = true;
          await new Promise<void>((resolve) => (this.pauseWake = resolve));
        }
        if (!this.running) return;
        this.polling = this.pollBoard(spec);
        await this.polling;
        this.polling = null;
      }
      const durationMs = performance.now() - t0;
      if (!this.running) return;
      // a cycle that waited out a pause did not take that long to read the boards
      if (!waited) this.safeEmit('pollCycle', { bus: this.name, at: this.now(), durationMs });
      const wait = this.t.pollIntervalMs - durationMs;
      if (wait > 0) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, wait);
          this.pollWake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        this.pollWake = null;
      }
    }
  }
}
