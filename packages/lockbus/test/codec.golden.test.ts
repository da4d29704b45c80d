// Golden vectors: every byte sequence in shared/spec/lockbus.md, encoded and decoded exactly.
import { describe, expect, it } from 'vitest';
import {
  CodecError,
  dialects,
  encodeScannerTrigger,
  generic8a80,
  kerong48,
  kerongCu16,
  wireTimeMs,
  type Dialect,
  type LockReply,
  type LockRequest,
  type ScannerFamily,
  type TriggerAction,
} from '../src/index';

const hex = (s: string) => Buffer.from(s.replace(/\s+/g, ''), 'hex');
const bits = (n: number, set: number[]) => Array.from({ length: n }, (_, i) => set.includes(i + 1));

type ReqVector = { name: string; dialect: Dialect; req: LockRequest; bytes: string };
type RepVector = { name: string; dialect: Dialect; rep: LockReply; bytes: string };

const requestVectors: ReqVector[] = [
  { name: 'CU16 unlock board 0 lock 1', dialect: kerongCu16, req: { kind: 'unlock', board: 0, lock: 1 }, bytes: '02 00 31 03 36' },
  { name: 'CU16 unlock board 1 lock 5', dialect: kerongCu16, req: { kind: 'unlock', board: 1, lock: 5 }, bytes: '02 14 31 03 4A' },
  { name: 'CU16 unlock board 0 lock 16', dialect: kerongCu16, req: { kind: 'unlock', board: 0, lock: 16 }, bytes: '02 0F 31 03 45' },
  { name: 'CU16 status board 0', dialect: kerongCu16, req: { kind: 'status', board: 0 }, bytes: '02 00 30 03 35' },
  { name: 'CU16 status board 2', dialect: kerongCu16, req: { kind: 'status', board: 2 }, bytes: '02 20 30 03 55' },
  { name: 'CU16 unlock all board 0', dialect: kerongCu16, req: { kind: 'unlockAll', board: 0 }, bytes: '02 00 33 03 38' },
  { name: 'CU16 bus scan', dialect: kerongCu16, req: { kind: 'scan' }, bytes: '02 F0 32 03 27' },
  { name: 'CU16 set pulse 550 ms board 0', dialect: kerongCu16, req: { kind: 'setPulse', board: 0, ms: 550 }, bytes: '02 00 37 00 37 03 73' },
  { name: 'K48 read status board 0', dialect: kerong48, req: { kind: 'status', board: 0 }, bytes: '02 00 00 60 03 65' },
  { name: 'K48 unlock lock index 1 (lock 2)', dialect: kerong48, req: { kind: 'unlock', board: 0, lock: 2 }, bytes: '02 00 01 61 03 67' },
  { name: '8A/80 unlock board 1 ch 1', dialect: generic8a80, req: { kind: 'unlock', board: 1, lock: 1 }, bytes: '8A 01 01 11 9B' },
  { name: '8A/80 unlock board 2 ch 12', dialect: generic8a80, req: { kind: 'unlock', board: 2, lock: 12 }, bytes: '8A 02 0C 11 95' },
  { name: '8A/80 read all board 1', dialect: generic8a80, req: { kind: 'status', board: 1 }, bytes: '80 01 00 33 B2' },
];

const replyVectors: RepVector[] = [
  {
    name: 'CU16 reply: lock 3 open, items in locks 1 and 10',
    dialect: kerongCu16,
    rep: { kind: 'status', board: 0, locks: bits(16, [1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]), items: bits(16, [1, 10]) },
    bytes: '02 00 35 FB FF 01 02 03 37',
  },
  {
    name: 'K48 capture reply: lock 1 closed, second bitmap bit 1',
    dialect: kerong48,
    rep: { kind: 'status', board: 0, locks: bits(48, [1]), items: bits(48, [1]) },
    bytes: '02 00 00 75 01 00 00 00 00 00 01 00 00 00 00 00 03 7C',
  },
  { name: '8A/80 unlock ack board 1 ch 1 (00)', dialect: generic8a80, rep: { kind: 'unlockAck', board: 1, lock: 1, bit: false }, bytes: '8A 01 01 00 8A' },
  { name: '8A/80 unlock ack board 2 ch 12 (00)', dialect: generic8a80, rep: { kind: 'unlockAck', board: 2, lock: 12, bit: false }, bytes: '8A 02 0C 00 84' },
  { name: '8A/80 read all reply, 8-channel board, 3 status bytes', dialect: generic8a80, rep: { kind: 'status', board: 1, locks: bits(24, []), items: null }, bytes: '80 01 00 00 00 33 B2' },
];

describe('golden request vectors', () => {
  for (const v of requestVectors) {
    it(`${v.name}: encodes to ${v.bytes}`, () => {
      expect(v.dialect.encodeRequest(v.req).toString('hex')).toBe(hex(v.bytes).toString('hex'));
    });
    it(`${v.name}: decodes back`, () => {
      expect(v.dialect.decodeRequest(hex(v.bytes))).toEqual(v.req);
    });
    it(`${v.name}: the request parser finds exactly this frame`, () => {
      const out = v.dialect.createParser('requests').push(hex(v.bytes));
      expect(out).toEqual([{ ok: true, frame: hex(v.bytes) }]);
    });
  }
});

describe('golden reply vectors', () => {
  for (const v of replyVectors) {
    it(`${v.name}: encodes to ${v.bytes}`, () => {
      expect(v.dialect.encodeReply(v.rep).toString('hex')).toBe(hex(v.bytes).toString('hex'));
    });
    it(`${v.name}: decodes back`, () => {
      expect(v.dialect.decodeReply(hex(v.bytes))).toEqual(v.rep);
    });
    it(`${v.name}: the reply parser finds exactly this frame`, () => {
      const out = v.dialect.createParser('replies').push(hex(v.bytes));
      expect(out).toEqual([{ ok: true, frame: hex(v.bytes) }]);
    });
  }
});

describe('golden scanner trigger vectors (spec section 5)', () => {
  const triggers: { name: string; family: ScannerFamily; action: TriggerAction; bytes: string }[] = [
    { name: 'Honeywell start', family: 'honeywell', action: 'start', bytes: '16 54 0D' },
    { name: 'Honeywell stop', family: 'honeywell', action: 'stop', bytes: '16 55 0D' },
    { name: 'Datalogic start (T)', family: 'datalogic', action: 'start', bytes: '54' },
    { name: 'Datalogic stop (X)', family: 'datalogic', action: 'stop', bytes: '58' },
  ];
  for (const v of triggers) {
    it(v.name, () => {
      expect(encodeScannerTrigger(v.family, v.action)).toEqual(hex(v.bytes));
    });
  }
  it('an unknown family is UNSUPPORTED', () => {
    expect(() => encodeScannerTrigger('zebra' as ScannerFamily, 'start')).toThrow(expect.objectContaining({ name: 'CodecError', code: 'UNSUPPORTED' }));
  });
});

describe('round trips', () => {
  it('every CU16 unlock address (15 boards x 16 locks) round trips and sums correctly', () => {
    for (let board = 0; board < 15; board++) {
      for (let lock = 1; lock <= 16; lock++) {
        const f = kerongCu16.encodeRequest({ kind: 'unlock', board, lock });
        expect(f[1]).toBe((board << 4) | (lock - 1));
        expect(kerongCu16.decodeRequest(f)).toEqual({ kind: 'unlock', board, lock });
      }
    }
  });
  it('status replies with arbitrary bits round trip in every dialect', () => {
    for (const d of Object.values(dialects)) {
      const n = d.name === 'generic-8a80' ? 24 : d.locksPerBoard;
      const locks = Array.from({ length: n }, (_, i) => (i * 7) % 3 === 0);
      const items = d.name === 'generic-8a80' ? null : Array.from({ length: n }, (_, i) => i % 5 === 1);
      const board = d.boardRange[0] + 1;
      const rep: LockReply = { kind: 'status', board, locks, items };
      expect(d.decodeReply(d.encodeReply(rep))).toEqual(rep);
    }
  });
  it('8A/80 read all with 50 channels uses 7 groups, highest first', () => {
    const locks = bits(50, [1, 50]);
    const f = generic8a80.encodeReply({ kind: 'status', board: 3, locks, items: null });
    expect(f.length).toBe(4 + 7);
    expect(f[2]).toBe(0x02); // channels 49..56: channel 50 = bit 1
    expect(f[8]).toBe(0x01); // channels 1..8 last
    const back = generic8a80.decodeReply(f);
    expect(back.kind === 'status' && back.locks.slice(0, 50)).toEqual(locks);
  });
  it('8A/80 read all of a 32-channel board whose status bytes look like a 3-group answer is framed by the channel count', () => {
    // locks 1,2,5,6 closed: S1 = 33 (the mark); locks 25,32: S4 = 81; the first 7 bytes also XOR right
    const bytes = hex('80 01 81 00 00 33 33 00');
    const p = generic8a80.createParser('replies');
    p.expect({ kind: 'status', board: 1 }, { locks: 32 });
    expect(p.push(bytes.subarray(0, 7))).toEqual([]); // a 7-byte prefix is not the answer
    expect(p.push(bytes.subarray(7))).toEqual([{ ok: true, frame: bytes }]);
    const rep = generic8a80.decodeReply(bytes);
    expect(rep).toEqual({ kind: 'status', board: 1, locks: bits(32, [1, 2, 5, 6, 25, 32]), items: null });
    expect(generic8a80.encodeReply(rep)).toEqual(bytes);
  });
  it('8A/80 read all of 25..50 channels round trips through the parser in one chunk and split at every byte', () => {
    for (let n = 25; n <= 50; n++) {
      const locks = bits(n, [1, 2, 5, 6, 25, n]);
      const f = generic8a80.encodeReply({ kind: 'status', board: 1, locks, items: null });
      expect(f.length).toBe(4 + Math.ceil(n / 8));
      for (let cut = 0; cut <= f.length; cut++) {
        const p = generic8a80.createParser('replies');
        p.expect({ kind: 'status', board: 1 }, { locks: n });
        const out = [...p.push(f.subarray(0, cut)), ...p.push(f.subarray(cut))];
        expect(out, `n=${n} cut=${cut}`).toEqual([{ ok: true, frame: f }]);
      }
    }
  });
  it('8A/80 read one channel and its answer', () => {
    const req: LockRequest = { kind: 'readLock', board: 4, lock: 7 };
    const f = generic8a80.encodeRequest(req);
    expect(f.toString('hex')).toBe('80040733' + (0x80 ^ 4 ^ 7 ^ 0x33).toString(16));
    expect(generic8a80.decodeRequest(f)).toEqual(req);
    const rep: LockReply = { kind: 'lockStatus', board: 4, lock: 7, bit: true };
    expect(generic8a80.decodeReply(generic8a80.encodeReply(rep))).toEqual(rep);
    expect(generic8a80.matches(req, rep)).toBe(true);
  });
  it('CU16 pulse ack round trips and matches setPulse', () => {
    const rep: LockReply = { kind: 'pulseAck', board: 5 };
    expect(kerongCu16.decodeReply(kerongCu16.encodeReply(rep))).toEqual(rep);
    expect(kerongCu16.matches({ kind: 'setPulse', board: 5, ms: 500 }, rep)).toBe(true);
    expect(kerongCu16.matches({ kind: 'setPulse', board: 4, ms: 500 }, rep)).toBe(false);
  });
});

describe('errors carry codes', () => {
  const code = (fn: () => unknown) => {
    try {
      fn();
    } catch (e) {
      expect(e).toBeInstanceOf(CodecError);
      return (e as CodecError).code;
    }
    return 'no error';
  };
  it('out-of-range addresses', () => {
    expect(code(() => kerongCu16.encodeRequest({ kind: 'unlock', board: 16, lock: 1 }))).toBe('OUT_OF_RANGE');
    expect(code(() => kerongCu16.encodeRequest({ kind: 'unlock', board: 0, lock: 17 }))).toBe('OUT_OF_RANGE');
    expect(code(() => generic8a80.encodeRequest({ kind: 'unlock', board: 0, lock: 1 }))).toBe('OUT_OF_RANGE');
    expect(code(() => kerong48.encodeRequest({ kind: 'unlock', board: 0, lock: 49 }))).toBe('OUT_OF_RANGE');
  });
  it('CU16 set pulse: NaN, infinite, negative and sub-10 ms pulses are refused, never encoded as 0 ms', () => {
    for (const ms of [NaN, Infinity, -Infinity, -4, -10, 0, 4, 655360]) {
      expect(code(() => kerongCu16.encodeRequest({ kind: 'setPulse', board: 0, ms })), `ms=${ms}`).toBe('OUT_OF_RANGE');
    }
  });
  it('CU16 set pulse edges: 10 ms, 5 ms rounds to one unit, 655350 ms', () => {
    expect(kerongCu16.encodeRequest({ kind: 'setPulse', board: 0, ms: 10 })).toEqual(hex('02 00 37 00 01 03 3D'));
    expect(kerongCu16.encodeRequest({ kind: 'setPulse', board: 0, ms: 5 })).toEqual(hex('02 00 37 00 01 03 3D'));
    expect(kerongCu16.encodeRequest({ kind: 'setPulse', board: 1, ms: 655350 })).toEqual(hex('02 10 37 FF FF 03 4A'));
  });
  it('CU16 board 15 is refused: its lock-1 / board-wide address would be F0, the whole bus', () => {
    expect(kerongCu16.boardRange).toEqual([0, 14]);
    for (const req of [
      { kind: 'unlock', board: 15, lock: 1 }, // would be 02 F0 31 03 26
      { kind: 'unlock', board: 15, lock: 2 },
      { kind: 'status', board: 15 },
      { kind: 'unlockAll', board: 15 },
      { kind: 'setPulse', board: 15, ms: 500 },
    ] as LockRequest[]) {
      expect(code(() => kerongCu16.encodeRequest(req)), JSON.stringify(req)).toBe('OUT_OF_RANGE');
    }
  });
  it('request decoders are strict: a well-framed request the encoder could not produce is OUT_OF_RANGE', () => {
    const cu = (h: string) => {
      const b = hex(h + ' 00');
      b[b.length - 1] = [...b.subarray(0, b.length - 1)].reduce((s, x) => (s + x) & 0xff, 0);
      return b;
    };
    expect(cu('02 05 30 03')).toEqual(hex('02 05 30 03 3A'));
    for (const bad of ['02 05 30 03', '02 01 33 03', '02 03 37 00 37 03', '02 F0 30 03', '02 F0 31 03', '02 F1 31 03', '02 00 32 03', '02 00 37 00 00 03']) {
      expect(code(() => kerongCu16.decodeRequest(cu(bad))), bad).toBe('OUT_OF_RANGE');
    }
    expect(kerongCu16.decodeRequest(cu('02 E5 31 03'))).toEqual({ kind: 'unlock', board: 14, lock: 6 });
    expect(kerongCu16.decodeRequest(hex('02 F0 32 03 27'))).toEqual({ kind: 'scan' });
    const k48 = (board: number, lock: number, cmd: number) => {
      const b = Buffer.from([0x02, board, lock, cmd, 0x03, 0]);
      b[5] = (0x02 + board + lock + cmd + 0x03) & 0xff;
      return b;
    };
    expect(code(() => kerong48.decodeRequest(k48(0, 1, 0x60)))).toBe('OUT_OF_RANGE'); // status read with LOCK 01
    expect(code(() => kerong48.decodeRequest(k48(0, 200, 0x61)))).toBe('OUT_OF_RANGE'); // unlock lock 201
    expect(code(() => kerong48.decodeRequest(k48(0, 48, 0x61)))).toBe('OUT_OF_RANGE'); // lock 49
    expect(kerong48.decodeRequest(k48(0, 47, 0x61))).toEqual({ kind: 'unlock', board: 0, lock: 48 });
    const g = (bytes: number[]) => Buffer.from([...bytes, bytes.reduce((s, x) => s ^ x, 0)]);
    expect(code(() => generic8a80.decodeRequest(g([0x8a, 0x00, 0x01, 0x11])))).toBe('OUT_OF_RANGE'); // board 0
    expect(code(() => generic8a80.decodeRequest(g([0x8a, 0x01, 0x41, 0x11])))).toBe('OUT_OF_RANGE'); // channel 65
  });
  it('unsupported requests', () => {
    expect(code(() => kerong48.encodeRequest({ kind: 'unlockAll', board: 0 }))).toBe('UNSUPPORTED');
    expect(code(() => kerongCu16.encodeRequest({ kind: 'readLock', board: 0, lock: 1 }))).toBe('UNSUPPORTED');
  });
  it('bad checksum and bad frames on decode', () => {
    expect(code(() => kerongCu16.decodeReply(hex('02 00 35 FB FF 01 02 03 38')))).toBe('BAD_CHECKSUM');
    expect(code(() => kerongCu16.decodeReply(hex('02 00 30 03 35')))).toBe('BAD_FRAME');
    expect(code(() => generic8a80.decodeReply(hex('8A 01 01 00 8B')))).toBe('BAD_CHECKSUM');
    expect(code(() => kerong48.decodeReply(hex('02 00 00 60 03 65')))).toBe('BAD_FRAME');
  });
});

describe('wire time', () => {
  it('matches the spec figures (section 6)', () => {
    expect(wireTimeMs(1, 9600)).toBeCloseTo(1.0417, 3);
    expect(wireTimeMs(5, 19200)).toBeCloseTo(2.604, 2);
    expect(wireTimeMs(9, 19200)).toBeCloseTo(4.6875, 3);
  });
});
