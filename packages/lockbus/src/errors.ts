// Errors of the lock-bus package carry a string code that callers and tests assert on.
export type LockBusErrorCode =
  | 'BAD_URL'
  | 'PORT_OPEN_FAILED'
  | 'PORT_NOT_OPEN'
  | 'PORT_LOST'
  | 'WRITE_FAILED'
  | 'NOT_SENT'
  | 'NO_REPLY'
  | 'GARBLED_REPLY'
  | 'BAD_CHECKSUM'
  | 'STOPPED'
  | 'UNKNOWN_BOARD'
  | 'UNKNOWN_BUS'
  | 'UNSUPPORTED'
  | 'BAD_CONFIG'
  /** the bus is paused (a scan holds it) or an unlock is still being watched: try again later */
  | 'BUSY';

export class LockBusError extends Error {
  readonly code: LockBusErrorCode;
  constructor(code: LockBusErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'LockBusError';
    this.code = code;
  }
}
