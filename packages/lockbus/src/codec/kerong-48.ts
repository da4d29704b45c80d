// Kerong 48-lock variant (captured on real hardware). Request: 02 BOARD LOCK CMD 03 SUM
// (CMD 0x60 read status with LOCK 00, 0x61 unlock with LOCK 0-based). Reply: 02 BOARD 00 75
// [6 bytes lock bits] [6 bytes second bitmap, read as item sensors] 03 SUM. Additive checksum.
import { StreamParser, bitsFromBytes, bytesFromBits, sum8, type Attempt } from './framing';
import { CodecError, type Dialect, type LockReply, type LockRequest } from './types';

const STX = 0x02;
const ETX = 0x03;
export const K48 = { READ_STATUS: 0x60, UNLOCK: 0x61, STATUS_REPLY: 0x75 } as const;
const REQUEST_LEN = 6;
const REPLY_LEN = 18;

function frame(bytes: number[]): Buffer {
  const b = Buffer.from([STX, ...bytes, ETX, 0]);
  b[b.length - 1] = sum8(b, 0, b.length - 1);
  return b;
}

function checkBoard(board: number): void {
  if (!Number.isInteger(board) || board < 0 || board > 0xff) throw new CodecError('OUT_OF_RANGE', `board ${board} not in 0..255`);
}

function rules(direction: 'requests' | 'replies') {
  return {
    isStart: (b: number) => b === STX,
    attempt(buf: Buffer, at: number): Attempt {
      if (buf.length - at < 4) return { kind: 'need' };
      const cmd = buf[at + 3];
      let len: number;
      if (direction === 'requests') {
        if (cmd !== K48.READ_STATUS && cmd !== K48.UNLOCK) return { kind: 'invalid' };
        len = REQUEST_LEN;
      } else {
        if (cmd !== K48.STATUS_REPLY || buf[at + 2] !== 0) return { kind: 'invalid' };
        len = REPLY_LEN;
      }
      if (buf.length - at < len) return { kind: 'need' };
      if (buf[at + len - 2] !== ETX) return { kind: 'invalid' };
      return sum8(buf, at, at + len - 1) === buf[at + len - 1] ? { kind: 'frame', length: len } : { kind: 'bad', length: len };
    },
  };
}

function checked(f: Buffer, len: number): void {
  if (f.length !== len || f[0] !== STX || f[len - 2] !== ETX) throw new CodecError('BAD_FRAME', `not a Kerong-48 frame: ${f.toString('hex')}`);
  if (sum8(f, 0, len - 1) !== f[len - 1]) throw new CodecError('BAD_CHECKSUM', `Kerong-48 checksum mismatch: ${f.toString('hex')}`);
}

export const kerong48: Dialect = {
  name: 'kerong-48',
  defaultBaudRate: 19200, // unverified for this variant: configurable per bus
  locksPerBoard: 48,
  boardRange: [0, 255],
  maxLocks: 48,
  supports: (kind) => kind === 'status' || kind === 'unlock',
  repliesTo: (req) => req.kind === 'status',
  matches: (req, rep) => req.kind === 'status' && rep.kind === 'status' && rep.board === req.board,

  encodeRequest(req: LockRequest): Buffer {
    if (req.kind === 'status') {
      checkBoard(req.board);
      return frame([req.board, 0x00, K48.READ_STATUS]);
    }
    if (req.kind === 'unlock') {
      checkBoard(req.board);
      if (!Number.isInteger(req.lock) || req.lock < 1 || req.lock > 48) throw new CodecError('OUT_OF_RANGE', `lock ${req.lock} not in 1..48`);
      return frame([req.board, req.lock - 1, K48.UNLOCK]);
    }
    throw new CodecError('UNSUPPORTED', `kerong-48 cannot encode ${req.kind}`);
  },

  // Strict: a well-framed request with a field out of range is refused (OUT_OF_RANGE), as the
  // encoder would refuse it: a status read carries LOCK 00, an unlock a lock index 0..47.
  decodeRequest(f: Buffer): LockRequest {
    checked(f, REQUEST_LEN);
    if (f[3] === K48.READ_STATUS) {
      if (f[2] !== 0) throw new CodecError('OUT_OF_RANGE', `Kerong-48 status read with LOCK ${f[2]} (must be 00): ${f.toString('hex')}`);
      return { kind: 'status', board: f[1] };
    }
    if (f[3] === K48.UNLOCK) {
      if (f[2] > 47) throw new CodecError('OUT_OF_RANGE', `Kerong-48 unlock of lock index ${f[2]} (0..47): ${f.toString('hex')}`);
      return { kind: 'unlock', board: f[1], lock: f[2] + 1 };
    }
    throw new CodecError('BAD_FRAME', `unknown Kerong-48 command ${f[3]}`);
  },

  encodeReply(rep: LockReply): Buffer {
    if (rep.kind !== 'status') throw new CodecError('UNSUPPORTED', `kerong-48 has no ${rep.kind} reply`);
    checkBoard(rep.board);
    return frame([rep.board, 0x00, K48.STATUS_REPLY, ...bytesFromBits(rep.locks, 6), ...bytesFromBits(rep.items ?? [], 6)]);
  },

  decodeReply(f: Buffer): LockReply {
    checked(f, REPLY_LEN);
    if (f[3] !== K48.STATUS_REPLY) throw new CodecError('BAD_FRAME', `unknown Kerong-48 reply ${f[3]}`);
    return { kind: 'status', board: f[1], locks: bitsFromBytes(f.subarray(4, 10)), items: bitsFromBytes(f.subarray(10, 16)) };
  },

  createParser: (direction) => new StreamParser(rules(direction)),
};
