// Generic "8A/80" boards (cheap 2..50 channel boards), 9600 baud, BCC = XOR of earlier bytes.
//   8A BB CC 11 BCC  unlock channel CC (00 = all)   -> 8A BB CC SS BCC (SS feedback 00 / 11)
//   80 BB CC 33 BCC  read one channel               -> 80 BB CC SS BCC
//   80 BB 00 33 BCC  read all                       -> 80 BB Sn..S1 33 BCC (highest group first)
// A read-all answer carries at least 3 status bytes (an 8-channel board still answers 3).
// Bit order inside a status byte (LSB = lowest channel) is an assumption: no datasheet.
import { StreamParser, bitsFromBytes, bytesFromBits, xor8, type Attempt } from './framing';
import { CodecError, type Dialect, type LockReply, type LockRequest } from './types';

export const G8A80 = { UNLOCK: 0x8a, READ: 0x80, UNLOCK_MARK: 0x11, READ_MARK: 0x33, FEEDBACK_SET: 0x11 } as const;
const MIN_GROUPS = 3;
const MAX_GROUPS = 8; // 64 channels, above the 50 of the largest boards

function frame(bytes: number[]): Buffer {
  const b = Buffer.from([...bytes, 0]);
  b[b.length - 1] = xor8(b, 0, b.length - 1);
  return b;
}

function checkBoard(board: number): void {
  if (!Number.isInteger(board) || board < 1 || board > 31) throw new CodecError('OUT_OF_RANGE', `8A/80 board ${board} not in 1..31`);
}
function checkLock(lock: number): void {
  if (!Number.isInteger(lock) || lock < 1 || lock > 64) throw new CodecError('OUT_OF_RANGE', `8A/80 channel ${lock} not in 1..64`);
}

function five(buf: Buffer, at: number, mark: number | null): Attempt {
  if (buf.length - at < 5) return { kind: 'need' };
  if (mark !== null && buf[at + 3] !== mark) return { kind: 'invalid' };
  return xor8(buf, at, at + 4) === buf[at + 4] ? { kind: 'frame', length: 5 } : { kind: 'bad', length: 5 };
}

/** Status bytes in the read-all answer of a board with `channels` channels (at least 3). */
export function readAllGroups(channels: number): number {
  return Math.min(MAX_GROUPS, Math.max(MIN_GROUPS, Math.ceil(channels / 8)));
}

/**
 * Read-all answer: 80 BB [n status bytes] 33 BCC. With the board's channel count known, n is
 * exactly readAllGroups(channels): status bytes may themselves be 33 with a fitting XOR, so
 * trying lengths (MIN_GROUPS <= n <= MAX_GROUPS, first fit) mis-frames boards above 24 channels.
 */
function readAll(buf: Buffer, at: number, channels: number | null = null): Attempt {
  let sawBad: Attempt | null = null;
  const from = channels === null ? MIN_GROUPS : readAllGroups(channels);
  const to = channels === null ? MAX_GROUPS : from;
  for (let n = from; n <= to; n++) {
    const len = n + 4;
    if (buf.length - at < len) return { kind: 'need' };
    if (buf[at + 2 + n] !== G8A80.READ_MARK) continue;
    if (xor8(buf, at, at + len - 1) === buf[at + len - 1]) return { kind: 'frame', length: len };
    sawBad ??= { kind: 'bad', length: len };
  }
  return sawBad ?? { kind: 'invalid' };
}

function requestRules() {
  return {
    isStart: (b: number) => b === G8A80.UNLOCK || b === G8A80.READ,
    attempt: (buf: Buffer, at: number): Attempt => five(buf, at, buf[at] === G8A80.UNLOCK ? G8A80.UNLOCK_MARK : G8A80.READ_MARK),
  };
}

function replyRules() {
  return {
    isStart: (b: number) => b === G8A80.UNLOCK || b === G8A80.READ,
    attempt(buf: Buffer, at: number, expect: LockRequest | null, channels: number | null): Attempt {
      if (buf[at] === G8A80.UNLOCK) return five(buf, at, null);
      if (expect?.kind === 'status') return readAll(buf, at, channels);
      if (expect?.kind === 'readLock') return five(buf, at, null);
      // No hint: prefer a complete read-all answer, else a read-one answer.
      const all = readAll(buf, at);
      if (all.kind === 'frame') return all;
      const one = five(buf, at, null);
      if (one.kind === 'frame') return one;
      if (all.kind === 'need' || one.kind === 'need') return { kind: 'need' };
      return one.kind === 'bad' ? one : all;
    },
  };
}

function checkXor(f: Buffer): void {
  if (f.length < 5) throw new CodecError('BAD_FRAME', `not an 8A/80 frame: ${f.toString('hex')}`);
  if (xor8(f, 0, f.length - 1) !== f[f.length - 1]) throw new CodecError('BAD_CHECKSUM', `8A/80 BCC mismatch: ${f.toString('hex')}`);
}

export const generic8a80: Dialect = {
  name: 'generic-8a80',
  defaultBaudRate: 9600,
  locksPerBoard: 8,
  boardRange: [1, 31],
  maxLocks: 64,
  supports: (kind) => kind === 'status' || kind === 'unlock' || kind === 'unlockAll' || kind === 'readLock',
  repliesTo: (req) => req.kind === 'status' || req.kind === 'unlock' || req.kind === 'unlockAll' || req.kind === 'readLock',
  matches(req, rep) {
    if (!('board' in req) || rep.board !== req.board) return false;
    if (req.kind === 'status') return rep.kind === 'status';
    if (req.kind === 'unlock') return rep.kind === 'unlockAck' && rep.lock === req.lock;
    if (req.kind === 'unlockAll') return rep.kind === 'unlockAck' && rep.lock === 0;
    if (req.kind === 'readLock') return rep.kind === 'lockStatus' && rep.lock === req.lock;
    return false;
  },

  encodeRequest(req: LockRequest): Buffer {
    switch (req.kind) {
      case 'unlock':
        checkBoard(req.board);
        checkLock(req.lock);
        return frame([G8A80.UNLOCK, req.board, req.lock, G8A80.UNLOCK_MARK]);
      case 'unlockAll':
        checkBoard(req.board);
        return frame([G8A80.UNLOCK, req.board, 0x00, G8A80.UNLOCK_MARK]);
      case 'readLock':
        checkBoard(req.board);
        checkLock(req.lock);
        return frame([G8A80.READ, req.board, req.lock, G8A80.READ_MARK]);
      case 'status':
        checkBoard(req.board);
        return frame([G8A80.READ, req.board, 0x00, G8A80.READ_MARK]);
      default:
        throw new CodecError('UNSUPPORTED', `generic-8a80 cannot encode ${req.kind}`);
    }
  },

  decodeRequest(f: Buffer): LockRequest {
    checkXor(f);
    if (f.length !== 5) throw new CodecError('BAD_FRAME', `8A/80 request must be 5 bytes: ${f.toString('hex')}`);
    const [head, board, ch, mark] = f;
    // strict, mirroring the encoder: board 1..31, channel 0 (all) or 1..64
    if (board < 1 || board > 31) throw new CodecError('OUT_OF_RANGE', `8A/80 request to board ${board}: ${f.toString('hex')}`);
    if (ch > 64) throw new CodecError('OUT_OF_RANGE', `8A/80 request for channel ${ch}: ${f.toString('hex')}`);
    if (head === G8A80.UNLOCK && mark === G8A80.UNLOCK_MARK) return ch === 0 ? { kind: 'unlockAll', board } : { kind: 'unlock', board, lock: ch };
    if (head === G8A80.READ && mark === G8A80.READ_MARK) return ch === 0 ? { kind: 'status', board } : { kind: 'readLock', board, lock: ch };
    throw new CodecError('BAD_FRAME', `unknown 8A/80 request: ${f.toString('hex')}`);
  },

  encodeReply(rep: LockReply): Buffer {
    checkBoard(rep.board);
    const ss = (bit: boolean) => (bit ? G8A80.FEEDBACK_SET : 0x00);
    switch (rep.kind) {
      case 'unlockAck':
        return frame([G8A80.UNLOCK, rep.board, rep.lock, ss(rep.bit)]);
      case 'lockStatus':
        return frame([G8A80.READ, rep.board, rep.lock, ss(rep.bit)]);
      case 'status': {
        const groups = readAllGroups(rep.locks.length);
        const lowFirst = bytesFromBits(rep.locks, groups);
        return frame([G8A80.READ, rep.board, ...lowFirst.reverse(), G8A80.READ_MARK]);
      }
      default:
        throw new CodecError('UNSUPPORTED', `generic-8a80 has no ${rep.kind} reply`);
    }
  },

  decodeReply(f: Buffer): LockReply {
    checkXor(f);
    const board = f[1];
    if (f[0] === G8A80.UNLOCK && f.length === 5) return { kind: 'unlockAck', board, lock: f[2], bit: f[3] !== 0 };
    if (f[0] === G8A80.READ && f.length === 5) return { kind: 'lockStatus', board, lock: f[2], bit: f[3] !== 0 };
    const n = f.length - 4;
    if (f[0] === G8A80.READ && n >= MIN_GROUPS && n <= MAX_GROUPS && f[f.length - 2] === G8A80.READ_MARK) {
      const lowFirst = Buffer.from(f.subarray(2, 2 + n)).reverse();
      return { kind: 'status', board, locks: bitsFromBytes(lowFirst), items: null };
    }
    throw new CodecError('BAD_FRAME', `unknown 8A/80 reply: ${f.toString('hex')}`);
  },

  createParser: (direction) => new StreamParser(direction === 'requests' ? requestRules() : replyRules()),
};
