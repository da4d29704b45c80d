// A tiny in-test board set for unit tests over MemoryTransport: decodes requests with the real
// codec, keeps latch / door / item per lock, answers with the real codec, and can misbehave.
// (Integration tests use the real simulator from @locker/firmware-sim over a pseudo-terminal.)
import type { Dialect, LockReply, LockRequest } from '../../src/index';
import type { MemoryTransport } from '../../src/transport/memory';

export interface FakeLock {
  latched: boolean;
  doorOpen: boolean;
  item: boolean;
}

export interface FakeFaults {
  noReply: boolean;
  lateMs: number;
  garbage: boolean;
  badChecksum: boolean;
  echo: boolean;
  offline: Set<number>;
  stuck: Set<string>;
  jammed: Set<string>;
  /** Send a reply identical to the request bytes (8A/80 feedback 11 on a stuck lock). */
}

export class FakeBoards {
  readonly locks = new Map<number, FakeLock[]>();
  readonly requests: LockRequest[] = [];
  readonly faults: FakeFaults = { noReply: false, lateMs: 0, garbage: false, badChecksum: false, echo: false, offline: new Set(), stuck: new Set(), jammed: new Set() };
  pulseMs = 50;
  closedHigh = true;
  /** Set when a request arrived while an earlier answer was still pending (two transactions at once). */
  overlap = false;
  private pendingReplies = 0;
  private readonly parser;

  constructor(
    private readonly dialect: Dialect,
    private readonly dev: MemoryTransport,
    boards: { address: number; locks: number }[],
  ) {
    for (const b of boards) this.locks.set(b.address, Array.from({ length: b.locks }, () => ({ latched: true, doorOpen: false, item: false })));
    this.parser = dialect.createParser('requests');
    dev.on('data', (c) => this.onData(c));
  }

  lock(board: number, lock: number): FakeLock {
    return this.locks.get(board)![lock - 1]!;
  }

  count(kind: LockRequest['kind']): number {
    return this.requests.filter((r) => r.kind === kind).length;
  }

  private onData(chunk: Buffer): void {
    if (this.faults.echo) this.dev.write(chunk).catch(() => undefined);
    for (const p of this.parser.push(chunk)) {
      if (!p.ok) continue;
      let req: LockRequest;
      try {
        req = this.dialect.decodeRequest(p.frame);
      } catch {
        continue; // a real board ignores a request it cannot take
      }
      if (this.pendingReplies > 0) this.overlap = true;
      this.requests.push(req);
      this.handle(req);
    }
  }

  private bit(latched: boolean): boolean {
    return this.closedHigh ? latched : !latched;
  }

  private handle(req: LockRequest): void {
    if (req.kind === 'scan') return;
    const locks = this.locks.get(req.board);
    if (!locks || this.faults.offline.has(req.board)) return;
    let rep: LockReply | null = null;
    switch (req.kind) {
      case 'status':
        rep = { kind: 'status', board: req.board, locks: locks.map((l) => this.bit(l.latched)), items: this.dialect.name === 'generic-8a80' ? null : locks.map((l) => l.item) };
        break;
      case 'unlock': {
        const l = locks[req.lock - 1];
        if (!l) return;
        const key = `${req.board}/${req.lock}`;
        if (!this.faults.stuck.has(key)) {
          l.latched = false;
          if (this.faults.jammed.has(key)) setTimeout(() => (l.latched = true), this.pulseMs);
          else l.doorOpen = true;
        }
        rep = { kind: 'unlockAck', board: req.board, lock: req.lock, bit: this.bit(l.latched) };
        break;
      }
      case 'setPulse':
        this.pulseMs = req.ms;
        rep = { kind: 'pulseAck', board: req.board };
        break;
      default:
        return;
    }
    if (!this.dialect.repliesTo(req) || this.faults.noReply || !rep) return;
    let bytes = this.dialect.encodeReply(rep);
    if (this.faults.badChecksum) {
      bytes = Buffer.from(bytes);
      bytes[bytes.length - 1] ^= 0x5a;
    }
    if (this.faults.garbage) bytes = Buffer.concat([Buffer.from([0x00, 0xff, 0x13]), bytes]);
    this.pendingReplies++;
    const send = () => {
      this.pendingReplies--;
      this.dev.write(bytes).catch(() => undefined);
    };
    if (this.faults.lateMs > 0) setTimeout(send, this.faults.lateMs);
    else send();
  }

  openDoor(board: number, lock: number): void {
    const l = this.lock(board, lock);
    l.doorOpen = true;
    l.latched = false;
  }

  closeDoor(board: number, lock: number): void {
    const l = this.lock(board, lock);
    l.doorOpen = false;
    l.latched = true;
  }
}

/**
 * Resolves with the first `event` payload matching `pred`; rejects after `ms` with a clear message.
 * Tests start the wait before the action and await it after: should the attempt fail in between,
 * its timeout must not surface later as an unhandled rejection (it did once, in the middle of CI's
 * retry, turning a passing run red). The returned promise is marked handled; awaiting it still rejects.
 */
export function waitFor<T = any>(em: { on: (...a: any[]) => unknown; off: (...a: any[]) => unknown }, event: string, pred: (e: T) => boolean = () => true, ms = 3000): Promise<T> {
  const wait = new Promise<T>((resolve, reject) => {
    const fn = (e: T) => {
      if (!pred(e)) return;
      clearTimeout(timer);
      em.off(event, fn);
      resolve(e);
    };
    const timer = setTimeout(() => {
      em.off(event, fn);
      reject(new Error(`timed out after ${ms} ms waiting for ${event}`));
    }, ms);
    em.on(event, fn);
  });
  wait.catch(() => undefined);
  return wait;
}

/** Collects every payload of the given events, in order, as [event, payload]. */
export function record(em: { on: (...a: any[]) => unknown }, events: string[]): [string, any][] {
  const out: [string, any][] = [];
  for (const ev of events) em.on(ev, (e: unknown) => out.push([ev, e]));
  return out;
}

export const silentLogger = async () => (await import('pino')).default({ level: 'silent' });
