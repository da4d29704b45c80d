// Shared codec types. Codecs are pure: bytes in, values out, no I/O, no clocks.

export type DialectName = 'kerong-cu16' | 'kerong-48' | 'generic-8a80';

export type LockRequest =
  | { kind: 'status'; board: number } // read one board (all its locks + item sensors)
  | { kind: 'unlock'; board: number; lock: number } // lock is 1-based
  | { kind: 'unlockAll'; board: number }
  | { kind: 'scan' } // whole-bus read (CU16 0x32) where supported
  | { kind: 'setPulse'; board: number; ms: number }
  | { kind: 'readLock'; board: number; lock: number }; // read one channel (8A/80 only)

export type LockReply =
  | { kind: 'status'; board: number; locks: boolean[]; items: boolean[] | null } // raw wire bits: true = bit set
  | { kind: 'unlockAck'; board: number; lock: number; bit: boolean } // 8A/80 answers unlocks (lock 0 = all)
  | { kind: 'pulseAck'; board: number }
  | { kind: 'lockStatus'; board: number; lock: number; bit: boolean }; // 8A/80 read-one answer

export type ParsedFrame =
  | { ok: true; frame: Buffer }
  | { ok: false; error: 'BAD_CHECKSUM' | 'GARBAGE'; bytes: Buffer }
  /** A dialect's framing rule threw (a bug, not line noise): `bytes` held were dropped. */
  | { ok: false; error: 'PARSER_ERROR'; bytes: Buffer; cause: unknown };

export interface FrameParser {
  /** Feed bytes as they arrive; returns every complete frame (or rejected bytes) found. Never throws. */
  push(chunk: Buffer): ParsedFrame[];
  /** Drop any partial frame held. */
  reset(): void;
  /**
   * Optional hint: the request whose reply is awaited. Only needed where reply shapes are
   * ambiguous (8A/80 read-one vs read-all); other dialects ignore it. null = no expectation.
   * `locks`: the channels the addressed board has (configured), where the reply length depends
   * on it (8A/80 read-all): the reply is then framed at exactly that length.
   */
  expect(req: LockRequest | null, hint?: { locks?: number }): void;
}

export interface Dialect {
  name: DialectName;
  defaultBaudRate: number;
  locksPerBoard: number;
  /** Valid board addresses, inclusive. */
  boardRange: readonly [number, number];
  /** Highest lock number a board can have (1-based). */
  maxLocks: number;
  repliesTo(req: LockRequest): boolean; // whether a reply is expected on the wire
  /** Whether the dialect can express this request at all. */
  supports(kind: LockRequest['kind']): boolean;
  encodeRequest(req: LockRequest): Buffer; // host -> board
  decodeRequest(frame: Buffer): LockRequest; // board side (simulator)
  encodeReply(rep: LockReply): Buffer; // board -> host (simulator)
  decodeReply(frame: Buffer): LockReply; // host side (driver)
  createParser(direction: 'requests' | 'replies'): FrameParser;
  /** Whether `rep` is the reply that answers `req` (same board, right kind). */
  matches(req: LockRequest, rep: LockReply): boolean;
}

export type CodecErrorCode = 'UNSUPPORTED' | 'OUT_OF_RANGE' | 'BAD_FRAME' | 'BAD_CHECKSUM';

export class CodecError extends Error {
  readonly code: CodecErrorCode;
  constructor(code: CodecErrorCode, message: string) {
    super(message);
    this.name = 'CodecError';
    this.code = code;
  }
}

/** Time one frame of `bytes` occupies on an 8N1 line (10 bits a byte), in milliseconds. */
export function wireTimeMs(bytes: number, baudRate: number): number {
  return (bytes * 10 * 1000) / baudRate;
}
