// A QR / barcode scanner in USB-CDC serial mode, on its own pseudo-terminal. scan() sends the
// code followed by the configured suffix, optionally split into chunks with a short pause between
// them (a real read can reach the host in several pieces). typePin() models a keypad wired to the
// same device: one write per keystroke, then '#' (enter), then the suffix.
import type { Logger } from 'pino';
import { SimError } from './errors';
import type { Link } from './link';
import type { ScannerOptions, ScannerSuffix } from './types';

export const SUFFIXES: Record<string, ScannerSuffix> = { cr: '\r', lf: '\n', crlf: '\r\n', none: '' };

export function suffixName(s: ScannerSuffix): string {
  return s === '\r' ? 'CR' : s === '\n' ? 'LF' : s === '\r\n' ? 'CRLF' : 'none';
}

function splitChunks(data: Buffer, chunks: number): Buffer[] {
  const n = Math.max(1, Math.min(Math.floor(chunks), data.length));
  const out: Buffer[] = [];
  const size = Math.ceil(data.length / n);
  for (let i = 0; i < data.length; i += size) out.push(data.subarray(i, i + size));
  return out;
}

export class SimScanner {
  readonly name: string;
  suffix: ScannerSuffix;
  private readonly gapMs: number;
  /** Bytes the host sent to the scanner (software trigger commands), newest last. */
  readonly received: Buffer[] = [];

  constructor(
    opts: ScannerOptions,
    private readonly link: Link,
    private readonly log: Logger,
  ) {
    this.name = opts.name;
    this.suffix = opts.suffix ?? '\r';
    this.gapMs = opts.chunkGapMs ?? 15;
    link.onData = (chunk) => {
      this.received.push(Buffer.from(chunk));
      if (this.received.length > 100) this.received.shift();
      this.log.info({ hex: chunk.toString('hex') }, 'host sent bytes to scanner (trigger command?)');
    };
  }

  /** Agent-side tty path. */
  get path(): string {
    return this.link.agentPath ?? '';
  }

  async start(): Promise<void> {
    await this.link.start();
  }

  async stop(): Promise<void> {
    await this.link.stop();
  }

  unplug(): Promise<void> {
    return this.link.unplug();
  }

  replug(): Promise<void> {
    return this.link.replug();
  }

  /** Someone presents a code: the data, then the suffix, in `chunks` pieces (default 1). */
  async scan(code: string, opts: { chunks?: number; suffix?: ScannerSuffix } = {}): Promise<void> {
    if (!this.link.plugged) throw new SimError('SIM_UNPLUGGED', `scanner ${this.name} is unplugged`);
    const suffix = opts.suffix ?? this.suffix;
    const data = Buffer.from(code + suffix, 'utf8');
    const parts = splitChunks(data, opts.chunks ?? 1);
    // Codes may be personal data (pickup codes): log the length only.
    this.log.info({ length: code.length, suffix: suffixName(suffix), chunks: parts.length }, 'scan');
    for (let i = 0; i < parts.length; i++) {
      if (i > 0) await new Promise((r) => setTimeout(r, this.gapMs));
      this.link.write(parts[i]!);
    }
  }

  /** Keypad PIN entry: each digit as its own write, then '#', then the suffix. */
  async typePin(pin: string): Promise<void> {
    if (!/^[0-9]+$/.test(pin)) throw new SimError('SIM_BAD_COMMAND', 'a PIN is digits only');
    if (!this.link.plugged) throw new SimError('SIM_UNPLUGGED', `scanner ${this.name} is unplugged`);
    this.log.info({ length: pin.length }, 'keypad PIN entry');
    const keys = [...pin, '#' + this.suffix];
    for (let i = 0; i < keys.length; i++) {
      if (i > 0) await new Promise((r) => setTimeout(r, this.gapMs));
      this.link.write(Buffer.from(keys[i]!, 'utf8'));
    }
  }
}
