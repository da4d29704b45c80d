// A QR / barcode scanner in serial (USB-CDC) mode, and keypad PINs, turned into one
// "credential presented" event.
//
// A read ends with CR, LF or CR LF (CRLF counts once), or, for scanners set to send no suffix,
// when no byte has come for `interByteTimeoutMs`. Reads may arrive in several chunks. The same
// value from the same source within `dedupeWindowMs` is reported once (a code held under the
// scanner is read again and again). A read of digits ending in '#' is a keypad PIN
// (a keypad wired to the same serial device). Codes are never logged, only their length.
import { EventEmitter } from 'node:events';
import pino, { type Logger } from 'pino';
import { encodeScannerTrigger, type ScannerFamily, type TriggerAction } from '../codec/scanner-trigger';
import { LockBusError } from '../errors';
import { createTransport } from '../transport/factory';
import type { Transport } from '../transport/types';

export interface Credential {
  source: 'qr' | 'keypad';
  value: string;
  /** Which reader it came from. */
  reader: string;
  at: number;
}

export interface ScannerReaderEvents {
  credential: [Credential];
  portOpened: [{ reader: string }];
  portClosed: [{ reader: string; error: string | null }];
}

export interface ScannerReaderOptions {
  name?: string;
  /** /dev/ttyACM0, /dev/ttyACM0?baud=115200, serial:///dev/..., tcp://host:port. Or a transport. */
  port?: string;
  transport?: Transport;
  baudRate?: number;
  /** Silence that ends a read without a suffix. Default 60 ms. */
  interByteTimeoutMs?: number;
  /**
   * Once this reader has seen a CR / LF suffix it trusts it: the silence fallback then waits
   * this long instead (a slow chunk no longer cuts a code in two). Default 1000 ms.
   */
  suffixedIdleTimeoutMs?: number;
  /**
   * The suffix the scanner is set to send. CR, LF and CR LF always end a read; a configured one is
   * trusted from the first read on (a slow chunk then waits suffixedIdleTimeoutMs, not the
   * inter-byte timeout). '' = the scanner sends none: silence always ends a read. Unset: learnt
   * from the first suffix seen.
   */
  suffix?: '\r' | '\n' | '\r\n' | '';
  /** Same source + value again within this window (measured from the last repeat): reported once. 0 = off. Default 1500 ms. */
  dedupeWindowMs?: number;
  /**
   * How a read's bytes become text. 'auto' (default): UTF-8 (what USB-CDC scanners and the
   * simulator send), falling back to latin1 when the bytes are not valid UTF-8 (a scanner set to
   * a single-byte code page). 'utf8' (invalid sequences become U+FFFD) / 'latin1': forced.
   */
  encoding?: 'auto' | 'utf8' | 'latin1';
  /** Scanner family for software trigger commands (trigger()). Unset: trigger() is UNSUPPORTED. */
  triggerFamily?: ScannerFamily;
  /** Longest accepted read; longer input is dropped as noise. Default 1024 bytes. */
  maxLength?: number;
  /** Reopen a lost port with back-off. Defaults 250 ms doubling to 10 s. */
  reconnect?: { initialMs?: number; maxMs?: number };
  logger?: Logger;
  now?: () => number;
}

const CR = 0x0d;
const LF = 0x0a;
const PIN = /^([0-9]{1,16})#$/;
const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/** A read's bytes as text (see ScannerReaderOptions.encoding). */
export function decodeScan(bytes: Buffer, encoding: 'auto' | 'utf8' | 'latin1' = 'auto'): string {
  if (encoding === 'latin1') return bytes.toString('latin1');
  if (encoding === 'utf8') return bytes.toString('utf8');
  try {
    return strictUtf8.decode(bytes);
  } catch {
    return bytes.toString('latin1');
  }
}

export class ScannerReader extends EventEmitter<ScannerReaderEvents> {
  readonly name: string;
  private readonly transport: Transport | null;
  private readonly log: Logger;
  private readonly now: () => number;
  private readonly interByteMs: number;
  private readonly suffixedIdleMs: number;
  private readonly dedupeMs: number;
  private readonly maxLength: number;
  private buf: number[] = [];
  private overflow = false;
  private lastWasCR = false;
  private sawSuffix = false;
  private idleTimer: NodeJS.Timeout | null = null;
  private reconnectTimer: NodeJS.Timeout | null = null;
  private backoff: number;
  private running = false;
  private readonly recent = new Map<string, number>();
  private readonly h = {
    data: (c: Buffer) => this.feed(c),
    close: (e?: Error) => this.onClose(e),
    error: (e: Error) => this.log.warn({ err: e.message }, 'scanner port error'),
  };

  constructor(private readonly opts: ScannerReaderOptions = {}) {
    super();
    this.name = opts.name ?? 'scanner';
    this.transport = opts.transport ?? (opts.port ? createTransport(opts.port, { baudRate: opts.baudRate ?? 9600 }) : null);
    this.log = (opts.logger ?? pino({ level: 'info' })).child({ ns: 'lockbus.scanner', reader: this.name });
    this.now = opts.now ?? Date.now;
    this.interByteMs = opts.interByteTimeoutMs ?? 60;
    this.suffixedIdleMs = opts.suffixedIdleTimeoutMs ?? 1000;
    this.dedupeMs = opts.dedupeWindowMs ?? 1500;
    this.maxLength = opts.maxLength ?? 1024;
    this.backoff = opts.reconnect?.initialMs ?? 250;
    this.sawSuffix = !!opts.suffix;
  }

  /** Opens the port (if any). A reader without a port only takes presentPin() / feed(). */
  async start(): Promise<void> {
    if (this.running) return;
    this.running = true;
    if (!this.transport) return;
    this.transport.on('data', this.h.data);
    this.transport.on('close', this.h.close);
    this.transport.on('error', this.h.error);
    try {
      await this.transport.open();
      this.emit('portOpened', { reader: this.name });
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, 'scanner port not available; retrying');
      this.scheduleReconnect();
    }
  }

  async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    if (this.idleTimer) clearTimeout(this.idleTimer);
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    this.idleTimer = this.reconnectTimer = null;
    this.buf = [];
    if (this.transport) {
      this.transport.off('data', this.h.data);
      this.transport.off('close', this.h.close);
      this.transport.off('error', this.h.error);
      await this.transport.close().catch(() => undefined);
    }
  }

  /**
   * Sends the software trigger (start / stop reading) of the configured scanner family (spec
   * section 5). UNSUPPORTED without triggerFamily, PORT_NOT_OPEN without an open port.
   */
  async trigger(action: TriggerAction): Promise<void> {
    const family = this.opts.triggerFamily;
    if (!family) throw new LockBusError('UNSUPPORTED', `scanner ${this.name}: no triggerFamily configured`);
    const bytes = encodeScannerTrigger(family, action);
    if (!this.transport || !this.transport.isOpen) throw new LockBusError('PORT_NOT_OPEN', `scanner ${this.name}: port not open`);
    await this.transport.write(bytes);
  }

  /** A PIN typed on a keypad that is not on the scanner line (or a touch screen). */
  presentPin(pin: string): boolean {
    if (!/^[0-9]{1,16}$/.test(pin)) {
      this.log.warn({ length: pin.length }, 'rejected a PIN that is not 1..16 digits');
      return false;
    }
    return this.present('keypad', pin);
  }

  /** Bytes from the scanner line (called by the transport; public for tests and bridges). */
  feed(chunk: Buffer): void {
    for (const b of chunk) {
      if (b === CR || b === LF) {
        const isLfAfterCr = b === LF && this.lastWasCR;
        this.lastWasCR = b === CR;
        if (this.opts.suffix !== '') this.sawSuffix = true;
        if (isLfAfterCr && this.buf.length === 0) continue; // the LF of a CR LF pair
        this.endRead();
        continue;
      }
      this.lastWasCR = false;
      if (this.buf.length >= this.maxLength) {
        this.overflow = true;
        continue;
      }
      this.buf.push(b);
    }
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = null;
    if (this.buf.length || this.overflow) {
      this.idleTimer = setTimeout(() => {
        this.idleTimer = null;
        this.endRead();
      }, this.sawSuffix ? this.suffixedIdleMs : this.interByteMs);
    }
  }

  private endRead(): void {
    const bytes = Buffer.from(this.buf);
    const overflow = this.overflow;
    this.buf = [];
    this.overflow = false;
    if (overflow) {
      this.log.warn({ maxLength: this.maxLength }, 'read longer than maxLength dropped');
      return;
    }
    // printable only: control bytes (AIM prefixes, stray NULs) are not part of a credential
    const value = decodeScan(bytes, this.opts.encoding).replace(/[\x00-\x1f\x7f]/g, '').trim();
    if (!value) return;
    const pin = PIN.exec(value);
    if (pin) this.present('keypad', pin[1]!);
    else this.present('qr', value);
  }

  private present(source: Credential['source'], value: string): boolean {
    const at = this.now();
    for (const [k, t] of this.recent) if (at - t > this.dedupeMs) this.recent.delete(k);
    const key = `${source}\u0000${value}`;
    const last = this.recent.get(key);
    this.recent.set(key, at);
    if (last !== undefined && at - last < this.dedupeMs) {
      this.log.debug({ source, length: value.length }, 'repeat within the dedupe window: ignored');
      return false;
    }
    this.log.info({ source, length: value.length }, 'credential presented');
    this.emit('credential', { source, value, reader: this.name, at });
    return true;
  }

  private onClose(err?: Error): void {
    if (!this.running) return;
    this.buf = [];
    this.log.warn({ err: err?.message ?? null }, 'scanner port lost; reopening');
    this.emit('portClosed', { reader: this.name, error: err?.message ?? null });
    this.scheduleReconnect();
  }

  private scheduleReconnect(): void {
    if (!this.running || this.reconnectTimer || !this.transport) return;
    const delay = this.backoff;
    this.backoff = Math.min(this.opts.reconnect?.maxMs ?? 10_000, this.backoff * 2);
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      if (!this.running || !this.transport) return;
      this.transport.open().then(
        () => {
          this.backoff = this.opts.reconnect?.initialMs ?? 250;
          this.emit('portOpened', { reader: this.name });
        },
        () => this.scheduleReconnect(),
      );
    }, delay);
  }
}

/**
 * A keypad that delivers single keys (GPIO matrix, HID events): digits build a PIN, Enter ('#'
 * or 'Enter') presents it through the reader, '*' / 'Clear' clears, 'Backspace' deletes one.
 * Keys typed more than `idleResetMs` apart start over (someone walked away mid-PIN).
 */
export class KeypadInput {
  private digits = '';
  private lastKeyAt = 0;

  constructor(
    private readonly reader: ScannerReader,
    private readonly opts: { maxDigits?: number; idleResetMs?: number; now?: () => number } = {},
  ) {}

  key(k: string): void {
    const now = (this.opts.now ?? Date.now)();
    if (this.digits && now - this.lastKeyAt > (this.opts.idleResetMs ?? 30_000)) this.digits = '';
    this.lastKeyAt = now;
    if (/^[0-9]$/.test(k)) {
      if (this.digits.length < (this.opts.maxDigits ?? 16)) this.digits += k;
    } else if (k === '#' || k === 'Enter') {
      const pin = this.digits;
      this.digits = '';
      if (pin) this.reader.presentPin(pin);
    } else if (k === '*' || k === 'Clear' || k === 'Escape') {
      this.digits = '';
    } else if (k === 'Backspace') {
      this.digits = this.digits.slice(0, -1);
    }
  }

  get pending(): number {
    return this.digits.length;
  }
}
