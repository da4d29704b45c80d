// A real serial port (USB-RS485 adapter, USB-CDC scanner) through the `serialport` package.
import { EventEmitter } from 'node:events';
import { SerialPort } from 'serialport';
import { LockBusError } from '../errors';
import type { Transport, TransportEvents } from './types';

export interface SerialTransportOptions {
  path: string;
  baudRate: number;
  /** Exclusive lock on the tty (TIOCEXCL). Default true. */
  lock?: boolean;
}

export class SerialTransport extends EventEmitter<TransportEvents> implements Transport {
  private port: SerialPort | null = null;
  private closing = false;

  constructor(private readonly opts: SerialTransportOptions) {
    super();
  }

  get description(): string {
    return `serial:${this.opts.path}@${this.opts.baudRate}`;
  }

  get isOpen(): boolean {
    return this.port?.isOpen ?? false;
  }

  async open(): Promise<void> {
    if (this.port?.isOpen) return;
    this.closing = false;
    const port = new SerialPort({ path: this.opts.path, baudRate: this.opts.baudRate, autoOpen: false, lock: this.opts.lock ?? true });
    await new Promise<void>((resolve, reject) => {
      port.open((err) => (err ? reject(new LockBusError('PORT_OPEN_FAILED', `cannot open ${this.opts.path}: ${err.message}`, { cause: err })) : resolve()));
    });
    this.port = port;
    port.on('data', (chunk: Buffer) => this.emit('data', chunk));
    port.on('error', (err: Error) => this.emit('error', err));
    port.on('close', (err?: Error) => {
      if (this.port === port) this.port = null;
      if (this.closing) return this.emit('close', undefined);
      // the contract: an unexpected close carries a LockBusError PORT_LOST (the OS error as cause)
      this.emit('close', new LockBusError('PORT_LOST', err ? `${this.opts.path} lost: ${err.message}` : `${this.opts.path} closed`, err ? { cause: err } : undefined));
    });
  }

  async close(): Promise<void> {
    const port = this.port;
    if (!port) return;
    this.closing = true;
    if (!port.isOpen) {
      this.port = null;
      return;
    }
    await new Promise<void>((resolve) => port.close(() => resolve()));
    this.port = null;
  }

  write(data: Buffer): Promise<void> {
    const port = this.port;
    if (!port || !port.isOpen) return Promise.reject(new LockBusError('PORT_NOT_OPEN', `${this.opts.path} is not open`));
    return new Promise<void>((resolve, reject) => {
      port.write(data, (err) => {
        if (err) return reject(new LockBusError('WRITE_FAILED', `write to ${this.opts.path} failed: ${err.message}`, { cause: err }));
        // tcdrain: resolves when the last byte has left the UART (for a pty: the peer has it)
        port.drain((err2) => (err2 ? reject(new LockBusError('WRITE_FAILED', `drain on ${this.opts.path} failed: ${err2.message}`, { cause: err2 })) : resolve()));
      });
    });
  }
}
