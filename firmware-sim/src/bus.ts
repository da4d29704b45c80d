// One simulated RS485 bus: its boards, the link the host reaches it by, wire timing and faults.
// Requests are parsed and answered with helper A's codecs (@locker/lockbus); this file never
// builds frames by hand except to corrupt them on purpose (fault injection).
import type { Dialect, LockReply, LockRequest } from '@locker/lockbus';
import type { Logger } from 'pino';
import { SimBoard, type SimLock } from './board';
import type { DoorContext } from './door';
import { SimError } from './errors';
import { GARBAGE_BYTES, hasLock, noFaults, type Faults, type LockRef } from './faults';
import type { Link } from './link';
import type { BusOptions, DoorChangeEvent, FrameEvent, Polarity } from './types';
import { WirePacer } from './wire';

export interface BusDeps {
  dialect: Dialect;
  link: Link;
  log: Logger;
  realTiming: boolean;
  onFrame: (e: FrameEvent) => void;
  onDoor: (e: DoorChangeEvent) => void;
}

export function hex(b: Buffer): string {
  return b.toString('hex').replace(/(..)(?!$)/g, '$1 ').toUpperCase();
}

function listBits(bits: boolean[], want: boolean): string {
  const n = bits.map((b, i) => (b === want ? i + 1 : 0)).filter((x) => x > 0);
  return n.length ? n.join(',') : '-';
}

export function describeRequest(req: LockRequest): string {
  switch (req.kind) {
    case 'status':
      return `read status of board ${req.board}`;
    case 'unlock':
      return `unlock board ${req.board} lock ${req.lock}`;
    case 'unlockAll':
      return `unlock every lock of board ${req.board}`;
    case 'scan':
      return 'read all boards (bus scan)';
    case 'setPulse':
      return `set pulse of board ${req.board} to ${req.ms} ms`;
    case 'readLock':
      return `read board ${req.board} lock ${req.lock}`;
  }
}

export function describeReply(rep: LockReply, polarity: Polarity, lockCount: number): string {
  const closedBit = polarity === 'closed-high';
  switch (rep.kind) {
    case 'status': {
      const open = listBits(rep.locks.slice(0, lockCount), !closedBit);
      const doors = open === '-' ? 'all closed' : `open ${open}`;
      const inside = rep.items ? listBits(rep.items.slice(0, lockCount), true) : null;
      const items = inside === null ? '' : inside === '-' ? ', no items' : `, items in ${inside}`;
      return `status of board ${rep.board}: ${doors}${items}`;
    }
    case 'unlockAck':
      return `board ${rep.board} unlocked ${rep.lock === 0 ? 'all locks' : `lock ${rep.lock}`}, feedback ${rep.bit === closedBit ? 'closed' : 'open'}`;
    case 'lockStatus':
      return `board ${rep.board} lock ${rep.lock} ${rep.bit === closedBit ? 'closed' : 'open'}`;
    case 'pulseAck':
      return `board ${rep.board} pulse time set`;
  }
}

export class SimBus {
  readonly name: string;
  readonly dialect: Dialect;
  readonly polarity: Polarity;
  readonly baudRate: number;
  private readonly boards = new Map<number, SimBoard>();
  private f: Faults = noFaults();
  private autoCloseMs: number | null;
  private readonly turnaroundMs: number;
  private readonly parser;
  private readonly pacer: WirePacer;
  private readonly link: Link;
  private readonly log: Logger;

  /** Fault injection: set() merges, clear() turns every fault off. */
  readonly faults = {
    set: (f: Partial<Faults>): void => {
      this.f = { ...this.f, ...f };
      this.log.info({ faults: this.f }, 'faults changed');
    },
    clear: (): void => {
      this.f = noFaults();
      this.log.info('faults cleared');
    },
    get: (): Faults => structuredClone(this.f),
  };

  constructor(
    private readonly opts: BusOptions,
    private readonly deps: BusDeps,
  ) {
    this.name = opts.name;
    this.dialect = deps.dialect;
    this.polarity = opts.polarity ?? 'closed-high';
    this.baudRate = opts.baudRate ?? deps.dialect.defaultBaudRate;
    this.autoCloseMs = opts.autoCloseMs ?? null;
    this.turnaroundMs = opts.turnaroundMs ?? 1;
    this.link = deps.link;
    this.log = deps.log;
    this.parser = deps.dialect.createParser('requests');
    this.pacer = new WirePacer({
      baudRate: this.baudRate,
      realTiming: deps.realTiming,
      write: (chunk) => this.link.write(chunk),
    });
    const env = {
      context: (board: number, lock: number): DoorContext => ({
        stuckLatch: hasLock(this.f.stuckLatch, board, lock),
        jammed: hasLock(this.f.jammedDoor, board, lock),
        autoCloseMs: this.autoCloseMs,
      }),
      onEvent: (board: number, lock: number, event: string, state: DoorChangeEvent['state']) => {
        this.log.info({ board, lock, event, state }, `board ${board} lock ${lock}: ${event}`);
        this.deps.onDoor({ bus: this.name, board, lock, event, state });
      },
    };
    for (const b of opts.boards) {
      this.boards.set(b.address, new SimBoard(b.address, b.locks ?? deps.dialect.locksPerBoard, env));
    }
    this.link.onData = (chunk) => this.onData(chunk);
  }

  /** Agent-side tty path (pty mode), or null in TCP mode. */
  get path(): string | null {
    return this.link.agentPath;
  }

  /** Listening port (TCP mode), or null in pty mode. */
  get tcpPort(): number | null {
    return this.link.tcpPort;
  }

  get plugged(): boolean {
    return this.link.plugged;
  }

  get boardAddresses(): number[] {
    return [...this.boards.keys()].sort((a, b) => a - b);
  }

  setAutoClose(ms: number | null): void {
    this.autoCloseMs = ms;
  }

  /** Board at `addr`; throws SimError('SIM_UNKNOWN_BOARD') if there is none on this bus. */
  board(addr: number): SimBoard {
    const b = this.boards.get(addr);
    if (!b) throw new SimError('SIM_UNKNOWN_BOARD', `bus ${this.name} has no board ${addr}`);
    return b;
  }

  /** Shorthand for board(b).lock(l). */
  lock(board: number, lock: number): SimLock {
    return this.board(board).lock(lock);
  }

  async start(): Promise<void> {
    await this.link.start();
  }

  /** Back to power-on: every door shut and latched, no items, pulse 500 ms, no faults. */
  reset(): void {
    this.f = noFaults();
    this.parser.reset();
    for (const b of this.boards.values()) {
      b.pulseMs = 500;
      for (const l of b.locks) l.reset();
    }
  }

  async stop(): Promise<void> {
    this.pacer.clear();
    for (const b of this.boards.values()) for (const l of b.locks) l.cancelTimers();
    await this.link.stop();
  }

  /** The agent-side device vanishes (pty: socat killed, path gone; TCP: listener closed). */
  async unplug(): Promise<void> {
    this.pacer.clear();
    this.parser.reset();
    await this.link.unplug();
    this.log.info('unplugged');
  }

  /** The device comes back at the same path / port. */
  async replug(): Promise<void> {
    await this.link.replug();
    this.log.info({ path: this.path, tcpPort: this.tcpPort }, 'replugged');
  }

  private wireBit(latched: boolean): boolean {
    return this.polarity === 'closed-high' ? latched : !latched;
  }

  private online(board: number): SimBoard | null {
    const b = this.boards.get(board);
    if (!b || this.f.offlineBoards.includes(board)) return null;
    return b;
  }

  private statusOf(b: SimBoard): LockReply {
    return {
      kind: 'status',
      board: b.address,
      locks: b.locks.map((l) => this.wireBit(l.state.latched)),
      items: b.locks.map((l) => l.state.item),
    };
  }

  private onData(chunk: Buffer): void {
    const doneAt = this.pacer.received(chunk.length);
    if (this.f.echo) {
      // The adapter's receiver hears the host's own transmitter: the bytes come straight back.
      this.emit('tx', chunk, 'echo of host bytes (adapter echo fault)');
      this.pacer.send(Buffer.from(chunk), doneAt - chunk.length * this.pacer.charMs);
    }
    for (const p of this.parser.push(chunk)) {
      if (!p.ok) {
        this.emit('rx', p.bytes, p.error === 'BAD_CHECKSUM' ? 'request with bad checksum (ignored)' : 'garbage (ignored)');
        continue;
      }
      let req: LockRequest;
      try {
        req = this.dialect.decodeRequest(p.frame);
      } catch (err) {
        this.emit('rx', p.frame, `undecodable request (${(err as Error).message})`);
        continue;
      }
      this.emit('rx', p.frame, describeRequest(req));
      this.handle(req, doneAt);
    }
  }

  private handle(req: LockRequest, doneAt: number): void {
    const replies: { rep: LockReply; lockCount: number }[] = [];
    if (req.kind === 'scan') {
      // Assumed layout (0x36 unverified): every board present answers with its normal status
      // frame, in ascending address order.
      for (const addr of this.boardAddresses) {
        const b = this.online(addr);
        if (b) replies.push({ rep: this.statusOf(b), lockCount: b.locks.length });
      }
    } else {
      const b = this.online(req.board);
      if (!b) {
        this.log.debug({ board: req.board }, 'no such board online: silence');
        return;
      }
      switch (req.kind) {
        case 'status':
          replies.push({ rep: this.statusOf(b), lockCount: b.locks.length });
          break;
        case 'unlock': {
          const l = b.findLock(req.lock);
          if (!l) {
            this.log.debug({ board: b.address, lock: req.lock }, 'lock not fitted: ignored');
            return;
          }
          l.pulse(b.pulseMs);
          replies.push({
            rep: { kind: 'unlockAck', board: b.address, lock: req.lock, bit: this.wireBit(l.state.latched) },
            lockCount: b.locks.length,
          });
          break;
        }
        case 'unlockAll':
          for (const l of b.locks) l.pulse(b.pulseMs);
          replies.push({
            rep: { kind: 'unlockAck', board: b.address, lock: 0, bit: b.locks.every((l) => this.wireBit(l.state.latched)) },
            lockCount: b.locks.length,
          });
          break;
        case 'readLock': {
          const l = b.findLock(req.lock);
          if (!l) return;
          replies.push({
            rep: { kind: 'lockStatus', board: b.address, lock: req.lock, bit: this.wireBit(l.state.latched) },
            lockCount: b.locks.length,
          });
          break;
        }
        case 'setPulse':
          b.pulseMs = req.ms;
          replies.push({ rep: { kind: 'pulseAck', board: b.address }, lockCount: b.locks.length });
          break;
      }
    }
    if (!this.dialect.repliesTo(req) && req.kind !== 'scan') return;
    let at = doneAt + this.turnaroundMs + this.f.lateReplyMs;
    for (const { rep, lockCount } of replies) {
      let bytes: Buffer;
      try {
        bytes = this.dialect.encodeReply(rep);
      } catch (err) {
        this.log.warn({ err: (err as Error).message }, 'cannot encode reply');
        continue;
      }
      let meaning = describeReply(rep, this.polarity, lockCount);
      if (this.f.noReply) {
        this.log.debug({ hex: hex(bytes), meaning }, 'reply suppressed (noReply fault)');
        continue;
      }
      if (this.f.badChecksum) {
        bytes = Buffer.from(bytes);
        bytes[bytes.length - 1] = (bytes[bytes.length - 1]! + 1) & 0xff;
        meaning += ' [bad checksum fault]';
      }
      if (this.f.garbageBeforeReply) {
        bytes = Buffer.concat([Buffer.from(GARBAGE_BYTES), bytes]);
        meaning = `${GARBAGE_BYTES.length} garbage bytes, then ${meaning}`;
      }
      if (this.f.lateReplyMs > 0) meaning += ` [late by ${this.f.lateReplyMs} ms]`;
      this.emit('tx', bytes, meaning);
      this.pacer.send(bytes, at);
      at += this.turnaroundMs;
    }
  }

  private emit(dir: 'rx' | 'tx', bytes: Buffer, meaning: string): void {
    const e: FrameEvent = { bus: this.name, dir, hex: hex(bytes), meaning };
    this.log.debug(e, `${dir} ${e.hex}  ${meaning}`);
    this.deps.onFrame(e);
  }

  /** Locks with a given fault, for display. */
  faultList(kind: 'stuckLatch' | 'jammedDoor'): LockRef[] {
    return this.f[kind];
  }
}
