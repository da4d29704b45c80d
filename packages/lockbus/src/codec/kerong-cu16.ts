// Kerong CU16 / CU12 family. Frame: 02 | ADDR | CMD | [DATA...] | 03 | SUM, SUM = additive
// checksum of every earlier byte (STX and ETX included). ADDR = (board << 4) | lockIndex.
// See docs/lockbus.md and shared spec lockbus.md section 1.
import { StreamParser, bitsFromBytes, bytesFromBits, sum8, type Attempt } from './framing';
import { CodecError, type Dialect, type LockReply, type LockRequest } from './types';

const STX = 0x02;
const ETX = 0x03;
export const CU16 = {
  READ_STATUS: 0x30,
  UNLOCK: 0x31,
  SCAN: 0x32,
  UNLOCK_ALL: 0x33,
  STATUS_REPLY: 0x35,
  SCAN_REPLY: 0x36, // layout unverified: not decoded
  SET_PULSE: 0x37,
  PULSE_REPLY: 0x38, // unverified: assumed 02 ADDR 38 03 SUM
  BUS_ADDR: 0xf0,
} as const;

const REQUEST_LENGTHS: Record<number, number> = {
  [CU16.READ_STATUS]: 5,
  [CU16.UNLOCK]: 5,
  [CU16.SCAN]: 5,
  [CU16.UNLOCK_ALL]: 5,
  [CU16.SET_PULSE]: 7,
};
const REPLY_LENGTHS: Record<number, number> = {
  [CU16.STATUS_REPLY]: 9,
  [CU16.PULSE_REPLY]: 5,
};

function frame(addr: number, cmd: number, data: number[] = []): Buffer {
  const b = Buffer.from([STX, addr, cmd, ...data, ETX, 0]);
  b[b.length - 1] = sum8(b, 0, b.length - 1);
  return b;
}

// Board 15 is refused: its lock-index-0 address (board 15, lock 1 or any board-wide command) is
// 0xF0, the whole-bus address (spec section 1), so "unlock board 15 lock 1" (02 F0 31 03 26)
// could reach every board. The vendor documents 10 boards a bus: 0..14 is plenty.
const MAX_BOARD = 14;
function checkBoard(board: number): void {
  if (!Number.isInteger(board) || board < 0 || board > MAX_BOARD) {
    throw new CodecError('OUT_OF_RANGE', `CU16 board ${board} not in 0..${MAX_BOARD} (board 15 would use F0, the whole-bus address)`);
  }
}
function checkLock(lock: number): void {
  if (!Number.isInteger(lock) || lock < 1 || lock > 16) throw new CodecError('OUT_OF_RANGE', `CU16 lock ${lock} not in 1..16`);
}

function rules(lengths: Record<number, number>) {
  return {
    isStart: (b: number) => b === STX,
    attempt(buf: Buffer, at: number): Attempt {
      if (buf.length - at < 3) return { kind: 'need' };
      const len = lengths[buf[at + 2]];
      if (len === undefined) return { kind: 'invalid' };
      if (buf.length - at < len) return { kind: 'need' };
      if (buf[at + len - 2] !== ETX) return { kind: 'invalid' };
      return sum8(buf, at, at + len - 1) === buf[at + len - 1] ? { kind: 'frame', length: len } : { kind: 'bad', length: len };
    },
  };
}

/** Validates framing and checksum of a complete frame; returns it unchanged. */
function checked(f: Buffer, lengths: Record<number, number>): Buffer {
  const len = lengths[f[2]];
  if (f.length < 5 || f[0] !== STX || len === undefined || f.length !== len || f[len - 2] !== ETX) {
    throw new CodecError('BAD_FRAME', `not a CU16 frame: ${f.toString('hex')}`);
  }
  if (sum8(f, 0, len - 1) !== f[len - 1]) throw new CodecError('BAD_CHECKSUM', `CU16 checksum mismatch: ${f.toString('hex')}`);
  return f;
}

export const kerongCu16: Dialect = {
  name: 'kerong-cu16',
  defaultBaudRate: 19200,
  locksPerBoard: 16,
  boardRange: [0, MAX_BOARD],
  maxLocks: 16,
  supports: (kind) => kind !== 'readLock',
  // 0x31 / 0x33 are answered by nothing (confirm by polling); the 0x32 scan answer is unverified
  // and not decoded, so the driver never waits for it.
  repliesTo: (req) => req.kind === 'status' || req.kind === 'setPulse',
  matches(req, rep) {
    if (req.kind === 'status') return rep.kind === 'status' && rep.board === req.board;
    if (req.kind === 'setPulse') return rep.kind === 'pulseAck' && rep.board === req.board;
    return false;
  },

  encodeRequest(req: LockRequest): Buffer {
    switch (req.kind) {
      case 'status':
        checkBoard(req.board);
        return frame(req.board << 4, CU16.READ_STATUS);
      case 'unlock':
        checkBoard(req.board);
        checkLock(req.lock);
        return frame((req.board << 4) | (req.lock - 1), CU16.UNLOCK);
      case 'unlockAll':
        checkBoard(req.board);
        return frame(req.board << 4, CU16.UNLOCK_ALL);
      case 'scan':
        return frame(CU16.BUS_ADDR, CU16.SCAN);
      case 'setPulse': {
        checkBoard(req.board);
        // unit 10 ms, 2 bytes: 10..655350 ms. NaN, negatives and anything that rounds to 0 would
        // otherwise encode a 0 ms pulse (a lock that never opens).
        const units = Math.round(req.ms / 10);
        if (!Number.isFinite(req.ms) || units < 1 || units > 0xffff) throw new CodecError('OUT_OF_RANGE', `pulse ${req.ms} ms not in 10..655350`);
        return frame(req.board << 4, CU16.SET_PULSE, [units >> 8, units & 0xff]);
      }
      default:
        throw new CodecError('UNSUPPORTED', `kerong-cu16 cannot encode ${req.kind}`);
    }
  },

  // Strict, mirroring the encoder: F0 only with a scan (and a scan only to F0), board-wide
  // commands with lock index 0 (02 05 30 is not "status of board 0"), no board 15, no 0 ms pulse.
  // A well-framed request with a field out of range is OUT_OF_RANGE.
  decodeRequest(f: Buffer): LockRequest {
    checked(f, REQUEST_LENGTHS);
    const addr = f[1];
    const board = addr >> 4;
    const lockIndex = addr & 0x0f;
    const refuse = (why: string) => new CodecError('OUT_OF_RANGE', `CU16 request ${f.toString('hex')}: ${why}`);
    if (f[2] === CU16.SCAN) {
      if (addr !== CU16.BUS_ADDR) throw refuse('a bus scan goes to F0');
      return { kind: 'scan' };
    }
    if (board > MAX_BOARD) throw refuse(`board ${board} (F0..FF is the whole-bus address)`);
    if (f[2] !== CU16.UNLOCK && lockIndex !== 0) throw refuse(`board-wide command with lock index ${lockIndex}`);
    switch (f[2]) {
      case CU16.READ_STATUS:
        return { kind: 'status', board };
      case CU16.UNLOCK:
        return { kind: 'unlock', board, lock: lockIndex + 1 };
      case CU16.UNLOCK_ALL:
        return { kind: 'unlockAll', board };
      default: {
        // SET_PULSE
        const units = (f[3] << 8) | f[4];
        if (units === 0) throw refuse('a 0 ms pulse');
        return { kind: 'setPulse', board, ms: units * 10 };
      }
    }
  },

  encodeReply(rep: LockReply): Buffer {
    checkBoard(rep.board);
    if (rep.kind === 'status') {
      const locks = bytesFromBits(rep.locks, 2);
      const items = bytesFromBits(rep.items ?? [], 2);
      return frame(rep.board << 4, CU16.STATUS_REPLY, [...locks, ...items]);
    }
    if (rep.kind === 'pulseAck') return frame(rep.board << 4, CU16.PULSE_REPLY);
    throw new CodecError('UNSUPPORTED', `kerong-cu16 has no ${rep.kind} reply`);
  },

  decodeReply(f: Buffer): LockReply {
    checked(f, REPLY_LENGTHS);
    const board = f[1] >> 4;
    if (f[2] === CU16.STATUS_REPLY) {
      return { kind: 'status', board, locks: bitsFromBytes(f.subarray(3, 5)), items: bitsFromBytes(f.subarray(5, 7)) };
    }
    return { kind: 'pulseAck', board };
  },

  createParser(direction) {
    return new StreamParser(rules(direction === 'requests' ? REQUEST_LENGTHS : REPLY_LENGTHS));
  },
};
