// An RS485-to-Ethernet gateway in transparent TCP server mode: the bytes of the bus travel as-is.
import { EventEmitter } from 'node:events';
import net from 'node:net';
import { LockBusError } from '../errors';
import type { Transport, TransportEvents } from './types';

export interface TcpTransportOptions {
  host: string;
  port: number;
  connectTimeoutMs?: number;
}

export class TcpTransport extends EventEmitter<TransportEvents> implements Transport {
  private socket: net.Socket | null = null;
  private closing = false;

  constructor(private readonly opts: TcpTransportOptions) {
    super();
  }

  get description(): string {
    return `tcp://${this.opts.host}:${this.opts.port}`;
  }

  get isOpen(): boolean {
    return this.socket !== null && !this.socket.destroyed;
  }

  async open(): Promise<void> {
    if (this.isOpen) return;
    this.closing = false;
    const socket = await new Promise<net.Socket>((resolve, reject) => {
      const s = net.connect({ host: this.opts.host, port: this.opts.port });
      const timer = setTimeout(() => {
        s.destroy();
        reject(new LockBusError('PORT_OPEN_FAILED', `connect to ${this.description} timed out`));
      }, this.opts.connectTimeoutMs ?? 3000);
      s.once('connect', () => {
        clearTimeout(timer);
        resolve(s);
      });
      s.once('error', (err) => {
        clearTimeout(timer);
        s.destroy();
        reject(new LockBusError('PORT_OPEN_FAILED', `cannot connect to ${this.description}: ${err.message}`, { cause: err }));
      });
    });
    socket.setNoDelay(true);
    socket.setKeepAlive(true, 5000);
    this.socket = socket;
    let lastError: Error | undefined;
    socket.on('data', (chunk: Buffer) => this.emit('data', chunk));
    socket.on('error', (err) => {
      lastError = err;
      this.emit('error', err);
    });
    socket.on('close', () => {
      if (this.socket === socket) this.socket = null;
      if (this.closing) return this.emit('close', undefined);
      const msg = lastError ? `${this.description} lost: ${lastError.message}` : `${this.description} closed by peer`;
      this.emit('close', new LockBusError('PORT_LOST', msg, lastError ? { cause: lastError } : undefined));
    });
  }

  async close(): Promise<void> {
    const s = this.socket;
    if (!s) return;
    this.closing = true;
    await new Promise<void>((resolve) => {
      s.once('close', () => resolve());
      s.destroy();
    });
    this.socket = null;
  }

  write(data: Buffer): Promise<void> {
    const s = this.socket;
    if (!s || s.destroyed) return Promise.reject(new LockBusError('PORT_NOT_OPEN', `${this.description} is not connected`));
    return new Promise<void>((resolve, reject) => {
      // The callback fires once the data is handed to the kernel: the closest a TCP client gets
      // to "drained"; the gateway then clocks the bytes out at the bus baud rate.
      s.write(data, (err) => (err ? reject(new LockBusError('WRITE_FAILED', `write to ${this.description} failed: ${err.message}`, { cause: err })) : resolve()));
    });
  }
}
