// A small resynchronising stream parser shared by every dialect. A dialect says which bytes can
// start a frame and, at a given offset, whether a frame is complete, incomplete, structurally
// valid but with a wrong checksum, or not a frame at all. The engine handles garbage, splits,
// several frames in a chunk and a false start that hides a real frame behind it.
import type { FrameParser, LockRequest, ParsedFrame } from './types';

export type Attempt =
  | { kind: 'frame'; length: number }
  | { kind: 'bad'; length: number } // right shape, wrong checksum
  | { kind: 'need' } // could become a frame with more bytes
  | { kind: 'invalid' };

export interface FrameRules {
  isStart(byte: number): boolean;
  attempt(buf: Buffer, at: number, expect: LockRequest | null, locks: number | null): Attempt;
}

export class StreamParser implements FrameParser {
  /** How many times a framing rule threw (each time the held bytes were dropped). */
  errors = 0;
  private buf: Buffer = Buffer.alloc(0);
  private expecting: LockRequest | null = null;
  private expectLocks: number | null = null;

  constructor(private readonly rules: FrameRules) {}

  expect(req: LockRequest | null, hint?: { locks?: number }): void {
    this.expecting = req;
    this.expectLocks = req && hint?.locks !== undefined ? hint.locks : null;
  }

  reset(): void {
    this.buf = Buffer.alloc(0);
  }

  push(chunk: Buffer): ParsedFrame[] {
    const out: ParsedFrame[] = [];
    try {
      this.buf = this.buf.length ? Buffer.concat([this.buf, chunk]) : Buffer.from(chunk);
      const buf = this.buf;
      let i = 0;
      let garbageFrom = -1;
      const flushGarbage = (to: number) => {
        if (garbageFrom >= 0 && to > garbageFrom) {
          out.push({ ok: false, error: 'GARBAGE', bytes: Buffer.from(buf.subarray(garbageFrom, to)) });
        }
        garbageFrom = -1;
      };
      const markGarbage = () => {
        if (garbageFrom < 0) garbageFrom = i;
        i++;
      };
      let waiting = false;
      while (i < buf.length) {
        if (!this.rules.isStart(buf[i])) {
          markGarbage();
          continue;
        }
        const a = this.rules.attempt(buf, i, this.expecting, this.expectLocks);
        if (a.kind === 'frame') {
          flushGarbage(i);
          out.push({ ok: true, frame: Buffer.from(buf.subarray(i, i + a.length)) });
          i += a.length;
          continue;
        }
        if (a.kind === 'invalid') {
          markGarbage();
          continue;
        }
        // 'need' or 'bad': a real frame may start inside the false one; prefer it.
        const end = a.kind === 'bad' ? i + a.length : buf.length;
        const inner = this.findInner(buf, i + 1, end, a.kind === 'bad');
        if (inner >= 0) {
          if (garbageFrom < 0) garbageFrom = i;
          i = inner;
          continue;
        }
        if (a.kind === 'need') {
          waiting = true;
          break;
        }
        flushGarbage(i);
        out.push({ ok: false, error: 'BAD_CHECKSUM', bytes: Buffer.from(buf.subarray(i, i + a.length)) });
        i += a.length;
      }
      flushGarbage(i);
      this.buf = waiting || i < buf.length ? Buffer.from(buf.subarray(i)) : Buffer.alloc(0);
    } catch (cause) {
      // A rule bug must never escape into the caller's data handler: drop what we hold, but say
      // so (a PARSER_ERROR entry and the errors count), so a dialect bug is visible, not silent.
      this.errors++;
      out.push({ ok: false, error: 'PARSER_ERROR', bytes: this.buf, cause });
      this.buf = Buffer.alloc(0);
    }
    return out;
  }

  /** First offset in [from, to) where a complete valid frame starts (or, if acceptNeed, may start). */
  private findInner(buf: Buffer, from: number, to: number, acceptNeed: boolean): number {
    for (let j = from; j < to; j++) {
      if (!this.rules.isStart(buf[j])) continue;
      const a = this.rules.attempt(buf, j, this.expecting, this.expectLocks);
      if (a.kind === 'frame' || (acceptNeed && a.kind === 'need')) return j;
    }
    return -1;
  }
}

export function sum8(buf: Buffer, from: number, to: number): number {
  let s = 0;
  for (let k = from; k < to; k++) s = (s + buf[k]) & 0xff;
  return s;
}

export function xor8(buf: Buffer, from: number, to: number): number {
  let s = 0;
  for (let k = from; k < to; k++) s ^= buf[k];
  return s;
}

/** Bits LSB-first from consecutive bytes: byte 0 bit 0 = entry 0. */
export function bitsFromBytes(bytes: Buffer | number[]): boolean[] {
  const out: boolean[] = [];
  for (const b of bytes) for (let k = 0; k < 8; k++) out.push(((b >> k) & 1) === 1);
  return out;
}

export function bytesFromBits(bits: readonly boolean[], byteCount: number): number[] {
  const out: number[] = new Array(byteCount).fill(0);
  bits.forEach((bit, idx) => {
    if (bit && idx < byteCount * 8) out[idx >> 3] |= 1 << (idx & 7);
  });
  return out;
}
