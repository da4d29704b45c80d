// Wire timing of a half-duplex RS485 line. A pty or a TCP socket delivers bytes instantly; the
// pacer holds every byte back until the moment its last bit would have left a real UART at the
// configured baud rate (10 bits a byte for 8N1), so the host never sees a reply earlier than the
// real bus could deliver it. Bytes go out in small chunks, as a USB adapter would hand them over.
import { performance } from 'node:perf_hooks';

export const BITS_PER_BYTE_8N1 = 10;

/** Milliseconds one byte occupies on the wire. */
export function charTimeMs(baudRate: number, bitsPerByte = BITS_PER_BYTE_8N1): number {
  return (bitsPerByte * 1000) / baudRate;
}

/** Milliseconds a frame of `bytes` occupies on the wire. */
export function wireTimeMs(bytes: number, baudRate: number): number {
  return bytes * charTimeMs(baudRate);
}

interface Pending {
  buf: Buffer;
  notBefore: number;
  sent: number;
  start: number | null;
}

export interface WirePacerOptions {
  baudRate: number;
  realTiming: boolean;
  write: (chunk: Buffer) => void;
  now?: () => number;
}

export class WirePacer {
  private queue: Pending[] = [];
  private timer: NodeJS.Timeout | null = null;
  private rxFreeAt = 0;
  private txFreeAt = 0;
  private readonly now: () => number;

  constructor(private readonly opts: WirePacerOptions) {
    this.now = opts.now ?? (() => performance.now());
  }

  get charMs(): number {
    return charTimeMs(this.opts.baudRate);
  }

  /**
   * Account for `n` request bytes that just arrived; returns the time (on this pacer's clock)
   * at which the last of them has been fully received on the wire.
   */
  received(n: number): number {
    const t = this.now();
    if (!this.opts.realTiming) return t;
    this.rxFreeAt = Math.max(t, this.rxFreeAt) + n * this.charMs;
    return this.rxFreeAt;
  }

  /** Queue bytes for transmission, starting no earlier than `notBefore` (pacer clock, ms). */
  send(buf: Buffer, notBefore = this.now()): void {
    if (buf.length === 0) return;
    this.queue.push({ buf, notBefore, sent: 0, start: null });
    this.pump();
  }

  /** Delay helper on the pacer clock: the time `ms` from now. */
  at(ms: number): number {
    return this.now() + ms;
  }

  /** Drop everything not yet sent (unplug, stop). */
  clear(): void {
    this.queue = [];
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.rxFreeAt = 0;
    this.txFreeAt = 0;
  }

  get idle(): boolean {
    return this.queue.length === 0;
  }

  private pump(): void {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    while (this.queue.length > 0) {
      const head = this.queue[0]!;
      const t = this.now();
      if (!this.opts.realTiming) {
        if (t < head.notBefore) return this.wait(head.notBefore - t);
        this.queue.shift();
        this.opts.write(head.buf);
        continue;
      }
      if (head.start === null) head.start = Math.max(head.notBefore, this.txFreeAt);
      // Byte i (0-based) has fully left the UART at start + (i + 1) * charMs.
      const due = Math.min(head.buf.length, Math.floor((t - head.start) / this.charMs + 1e-9));
      if (due > head.sent) {
        this.opts.write(head.buf.subarray(head.sent, due));
        head.sent = due;
      }
      if (head.sent >= head.buf.length) {
        this.txFreeAt = head.start + head.buf.length * this.charMs;
        this.queue.shift();
        continue;
      }
      const nextDue = head.start + (head.sent + 1) * this.charMs;
      return this.wait(nextDue - t);
    }
  }

  private wait(ms: number): void {
    // Timers fire late, never early: that keeps every byte at or after its wire time. Waiting
    // at least ~2 ms lets several bytes collect into one chunk at fast baud rates.
    this.timer = setTimeout(() => {
      this.timer = null;
      this.pump();
    }, Math.max(1, Math.ceil(ms)));
  }
}
