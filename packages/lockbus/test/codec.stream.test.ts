// Stream reassembly: frames split at every offset, several frames in one chunk, leading garbage,
// a bad checksum followed by a good frame, false starts, echoes.
import { describe, expect, it } from 'vitest';
import { StreamParser, dialects, generic8a80, kerongCu16, type Dialect, type ParsedFrame } from '../src/index';

const hex = (s: string) => Buffer.from(s.replace(/\s+/g, ''), 'hex');
const frames = (out: ParsedFrame[]) => out.filter((p) => p.ok).map((p) => (p as { frame: Buffer }).frame.toString('hex'));
const errors = (out: ParsedFrame[]) => out.filter((p) => !p.ok).map((p) => (p as { error: string }).error);

const replyStreams: { dialect: Dialect; a: string; b: string }[] = [
  { dialect: kerongCu16, a: '02 00 35 FB FF 01 02 03 37', b: '02 10 35 FF FF 00 00 03 48' },
  { dialect: dialects['kerong-48'], a: '02 00 00 75 01 00 00 00 00 00 01 00 00 00 00 00 03 7C', b: '02 00 00 75 01 00 00 00 00 00 01 00 00 00 00 00 03 7C' },
  { dialect: generic8a80, a: '8A 01 01 00 8A', b: '80 01 00 00 00 33 B2' },
];
const requestStreams: { dialect: Dialect; a: string; b: string }[] = [
  { dialect: kerongCu16, a: '02 00 37 00 37 03 73', b: '02 14 31 03 4A' },
  { dialect: dialects['kerong-48'], a: '02 00 00 60 03 65', b: '02 00 01 61 03 67' },
  { dialect: generic8a80, a: '8A 02 0C 11 95', b: '80 01 00 33 B2' },
];

function splitEverywhere(dir: 'requests' | 'replies', d: Dialect, bytes: Buffer, expected: string[]) {
  for (let cut = 0; cut <= bytes.length; cut++) {
    const p = d.createParser(dir);
    const out = [...p.push(bytes.subarray(0, cut)), ...p.push(bytes.subarray(cut))];
    expect(frames(out), `${d.name} cut at ${cut}`).toEqual(expected);
    expect(errors(out), `${d.name} cut at ${cut}`).toEqual([]);
  }
  // and byte by byte
  const p = d.createParser(dir);
  const out = [...bytes].flatMap((b) => p.push(Buffer.from([b])));
  expect(frames(out)).toEqual(expected);
}

describe.each([
  ['replies', replyStreams],
  ['requests', requestStreams],
] as const)('%s parser', (dir, cases) => {
  for (const { dialect, a, b } of cases) {
    const A = hex(a);
    const B = hex(b);
    it(`${dialect.name}: one frame split at every offset`, () => {
      splitEverywhere(dir, dialect, A, [A.toString('hex')]);
    });
    it(`${dialect.name}: two frames in one chunk, and split at every offset`, () => {
      const both = Buffer.concat([A, B]);
      expect(frames(dialect.createParser(dir).push(both))).toEqual([A.toString('hex'), B.toString('hex')]);
      splitEverywhere(dir, dialect, both, [A.toString('hex'), B.toString('hex')]);
    });
    it(`${dialect.name}: leading garbage is reported and the frame still found`, () => {
      const p = dialect.createParser(dir);
      const out = p.push(Buffer.concat([hex('FF 00 55 13 37'), A]));
      expect(frames(out)).toEqual([A.toString('hex')]);
      expect(out[0]).toEqual({ ok: false, error: 'GARBAGE', bytes: hex('FF 00 55 13 37') });
    });
    it(`${dialect.name}: a bad checksum followed by a good frame`, () => {
      const bad = Buffer.from(A);
      bad[bad.length - 1] ^= 0x01;
      const p = dialect.createParser(dir);
      const out = p.push(Buffer.concat([bad, B]));
      expect(out[0]).toEqual({ ok: false, error: 'BAD_CHECKSUM', bytes: bad });
      expect(frames(out)).toEqual([B.toString('hex')]);
    });
    it(`${dialect.name}: reset drops a partial frame`, () => {
      const p = dialect.createParser(dir);
      expect(p.push(A.subarray(0, 3))).toEqual([]);
      p.reset();
      expect(frames(p.push(B))).toEqual([B.toString('hex')]);
    });
  }
});

describe('false starts', () => {
  it('CU16: a stray STX right before a reply does not swallow it', () => {
    const A = hex('02 00 35 FB FF 01 02 03 37');
    const out = kerongCu16.createParser('replies').push(Buffer.concat([hex('02'), A]));
    expect(frames(out)).toEqual([A.toString('hex')]);
    expect(errors(out)).toEqual(['GARBAGE']);
  });
  it('CU16: a false start announcing a long frame does not hide a short real one', () => {
    // 02 xx 35 looks like the start of a 9-byte status reply; the real pulse ack follows.
    const ack = kerongCu16.encodeReply({ kind: 'pulseAck', board: 3 });
    const out = kerongCu16.createParser('replies').push(Buffer.concat([hex('02 35'), ack]));
    expect(frames(out)).toEqual([ack.toString('hex')]);
  });
  it('CU16: an echoed request in the reply stream is garbage, the reply after it is found', () => {
    const req = kerongCu16.encodeRequest({ kind: 'status', board: 0 });
    const rep = hex('02 00 35 FB FF 01 02 03 37');
    const out = kerongCu16.createParser('replies').push(Buffer.concat([req, rep]));
    expect(frames(out)).toEqual([rep.toString('hex')]);
  });
  it('8A/80: an echoed read-all request glued to the answer is itself XOR-valid, so echoes are stripped by the driver, not here', () => {
    // With an XOR BCC a complete frame XORs to zero, so echo + reply is one valid 12-byte
    // read-all answer. This documents why LockBus drops its own request bytes before parsing.
    const req = generic8a80.encodeRequest({ kind: 'status', board: 1 });
    const rep = hex('80 01 00 00 00 33 B2');
    const p = generic8a80.createParser('replies');
    p.expect({ kind: 'status', board: 1 });
    expect(frames(p.push(Buffer.concat([req, rep])))).toEqual([Buffer.concat([req, rep]).toString('hex')]);
    p.reset();
    expect(frames(p.push(rep))).toEqual([rep.toString('hex')]);
  });
  it('8A/80: a read-one answer is found with the read-one expectation', () => {
    const rep = generic8a80.encodeReply({ kind: 'lockStatus', board: 2, lock: 3, bit: true });
    const p = generic8a80.createParser('replies');
    p.expect({ kind: 'readLock', board: 2, lock: 3 });
    expect(frames(p.push(rep))).toEqual([rep.toString('hex')]);
  });
});

describe('a framing rule that throws (a dialect bug) is visible, not silent', () => {
  it('push reports PARSER_ERROR with the dropped bytes, counts it, never throws, and carries on', () => {
    let boom = true;
    const p = new StreamParser({
      isStart: (b) => b === 0x02,
      attempt: (buf, at) => {
        if (boom) throw new TypeError('rule bug');
        return buf.length - at >= 2 ? { kind: 'frame', length: 2 } : { kind: 'need' };
      },
    });
    const out = p.push(hex('02 AA'));
    expect(out).toEqual([{ ok: false, error: 'PARSER_ERROR', bytes: hex('02 AA'), cause: new TypeError('rule bug') }]);
    expect(p.errors).toBe(1);
    boom = false;
    expect(frames(p.push(hex('02 BB')))).toEqual(['02bb']);
    expect(p.errors).toBe(1);
  });
  it('the real dialects never report PARSER_ERROR on the streams above', () => {
    for (const { dialect, a, b } of [...replyStreams, ...requestStreams]) {
      for (const dir of ['replies', 'requests'] as const) {
        const p = dialect.createParser(dir);
        expect(errors(p.push(Buffer.concat([hex(a), hex('00 02 03'), hex(b)])))).not.toContain('PARSER_ERROR');
      }
    }
  });
});
