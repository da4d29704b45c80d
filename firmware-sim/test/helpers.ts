// Test-side host: opens the agent end of a simulated device with the real `serialport` package
// (or a TCP socket) and collects whatever comes back.
import net from 'node:net';
import { SerialPort } from 'serialport';

export function bytes(hexStr: string): Buffer {
  return Buffer.from(hexStr.replace(/\s+/g, ''), 'hex');
}

export function spaced(b: Buffer): string {
  return b.toString('hex').replace(/(..)(?!$)/g, '$1 ').toUpperCase();
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface HostLike {
  received: Buffer;
  arrivals: { at: number; chunk: Buffer }[];
  write(data: Buffer | string): void;
  close(): Promise<void>;
}

abstract class BaseHost implements HostLike {
  received = Buffer.alloc(0);
  arrivals: { at: number; chunk: Buffer }[] = [];
  private waiters: (() => void)[] = [];

  protected push(chunk: Buffer): void {
    this.received = Buffer.concat([this.received, chunk]);
    this.arrivals.push({ at: performance.now(), chunk: Buffer.from(chunk) });
    for (const w of this.waiters.splice(0)) w();
  }

  abstract write(data: Buffer | string): void;
  abstract close(): Promise<void>;

  clear(): void {
    this.received = Buffer.alloc(0);
    this.arrivals = [];
  }

  /** Resolves with the first `n` received bytes; rejects after `timeoutMs`. */
  async waitBytes(n: number, timeoutMs = 3000): Promise<Buffer> {
    const deadline = performance.now() + timeoutMs;
    while (this.received.length < n) {
      const left = deadline - performance.now();
      if (left <= 0) throw new Error(`timeout: got ${this.received.length}/${n} bytes: ${spaced(this.received)}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
    return this.received.subarray(0, n);
  }

  /** Waits until `text` (a string) has been received. */
  async waitText(text: string, timeoutMs = 3000): Promise<string> {
    const deadline = performance.now() + timeoutMs;
    while (!this.received.toString('latin1').includes(text)) {
      if (performance.now() > deadline) throw new Error(`timeout waiting for ${JSON.stringify(text)}: got ${JSON.stringify(this.received.toString('latin1'))}`);
      await sleep(5);
    }
    return this.received.toString('latin1');
  }

  /** Clears, writes a request, returns exactly `replyLen` bytes of answer. */
  async transact(req: Buffer | string, replyLen: number, timeoutMs = 3000): Promise<Buffer> {
    this.clear();
    this.write(typeof req === 'string' ? bytes(req) : req);
    return Buffer.from(await this.waitBytes(replyLen, timeoutMs));
  }
}

export class SerialHost extends BaseHost {
  private constructor(private readonly port: SerialPort) {
    super();
    port.on('data', (c: Buffer) => this.push(c));
    port.on('error', () => undefined);
  }

  static open(path: string, baudRate = 19200): Promise<SerialHost> {
    return new Promise((resolve, reject) => {
      const port = new SerialPort({ path, baudRate, autoOpen: false });
      port.open((err) => (err ? reject(err) : resolve(new SerialHost(port))));
    });
  }

  write(data: Buffer | string): void {
    this.port.write(typeof data === 'string' ? bytes(data) : data);
  }

  get isOpen(): boolean {
    return this.port.isOpen;
  }

  onClose(fn: () => void): void {
    this.port.on('close', fn);
  }

  close(): Promise<void> {
    if (!this.port.isOpen) return Promise.resolve();
    return new Promise((resolve) => this.port.close(() => resolve()));
  }
}

export class TcpHost extends BaseHost {
  private constructor(private readonly sock: net.Socket) {
    super();
    sock.on('data', (c: Buffer) => this.push(c));
    sock.on('error', () => undefined);
  }

  static connect(port: number, host = '127.0.0.1'): Promise<TcpHost> {
    return new Promise((resolve, reject) => {
      const sock = net.connect({ port, host }, () => resolve(new TcpHost(sock)));
      sock.once('error', reject);
    });
  }

  write(data: Buffer | string): void {
    this.sock.write(typeof data === 'string' ? bytes(data) : data);
  }

  get closed(): boolean {
    return this.sock.destroyed;
  }

  onClose(fn: () => void): void {
    this.sock.on('close', fn);
  }

  close(): Promise<void> {
    return new Promise((resolve) => {
      if (this.sock.destroyed) return resolve();
      this.sock.once('close', () => resolve());
      this.sock.end();
      setTimeout(() => this.sock.destroy(), 200);
    });
  }
}
