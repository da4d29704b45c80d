import type { EventEmitter } from 'node:events';

export interface TransportEvents {
  data: [chunk: Buffer];
  /** The link went away. `error` is set when it was not a close() we asked for (unplugged, reset). */
  close: [error?: Error];
  error: [error: Error];
}

/**
 * One byte pipe to a bus or scanner: a serial port, a TCP gateway, or memory. open() may be
 * called again after a close (reconnect). write() resolves once the bytes have left (drained).
 */
export interface Transport extends EventEmitter<TransportEvents> {
  readonly description: string;
  readonly isOpen: boolean;
  open(): Promise<void>;
  close(): Promise<void>;
  write(data: Buffer): Promise<void>;
}
