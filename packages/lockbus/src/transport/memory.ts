// In-memory transport pairs for unit tests: what one end writes, the other end receives on a
// later tick. Either end can be made to vanish (like an unplugged adapter) and come back.
import { EventEmitter } from 'node:events';
import { LockBusError } from '../errors';
import type { Transport, TransportEvents } from './types';

export class MemoryTransport extends EventEmitter<TransportEvents> implements Transport {
  peer: MemoryTransport | null = null;
  private open_ = false;
  private unplugged = false;
  /** When false, open() fails (the device is absent). */
  available = true;
  /** Every chunk written through this end, for assertions. */
  readonly written: Buffer[] = [];

  constructor(readonly description = 'memory') {
    super();
  }

  static pair(a = 'memory:host', b = 'memory:device'): [MemoryTransport, MemoryTransport] {
    const x = new MemoryTransport(a);
    const y = new MemoryTransport(b);
    x.peer = y;
    y.peer = x;
    return [x, y];
  }

  get isOpen(): boolean {
    return this.open_;
  }

  async open(): Promise<void> {
    if (!this.available) throw new LockBusError('PORT_OPEN_FAILED', `${this.description} is absent`);
    if (this.peer?.unplugged) throw new LockBusError('PORT_OPEN_FAILED', `${this.description}: the device end is gone`);
    this.open_ = true;
  }

  async close(): Promise<void> {
    if (!this.open_) return;
    this.open_ = false;
    this.emit('close');
  }

  async write(data: Buffer): Promise<void> {
    if (!this.open_) throw new LockBusError('PORT_NOT_OPEN', `${this.description} is not open`);
    const copy = Buffer.from(data);
    this.written.push(copy);
    const peer = this.peer;
    await new Promise<void>((resolve) => setImmediate(resolve));
    if (peer?.open_) peer.emit('data', copy);
  }

  /** Test helper: deliver bytes to this end as if they came from the peer. */
  inject(data: Buffer): void {
    if (this.open_) this.emit('data', Buffer.from(data));
  }

  /** Test helper: the device vanishes. Open fails until `restore()`. */
  vanish(): void {
    this.available = false;
    if (this.open_) {
      this.open_ = false;
      this.emit('close', new LockBusError('PORT_LOST', `${this.description} vanished`));
    }
  }

  restore(): void {
    this.available = true;
  }

  /**
   * Test helper, on the device end: the device vanishes (adapter unplugged, gateway down). Both
   * ends close; the other end sees close(PORT_LOST) and cannot open until `replug()`.
   */
  unplug(): void {
    this.unplugged = true;
    this.available = false;
    for (const end of [this, this.peer]) {
      if (end?.open_) {
        end.open_ = false;
        end.emit('close', new LockBusError('PORT_LOST', `${end.description}: the device end vanished`));
      }
    }
  }

  /** The device end is back (and open); the other end can open again. */
  replug(): void {
    this.unplugged = false;
    this.available = true;
    this.open_ = true;
  }
}
