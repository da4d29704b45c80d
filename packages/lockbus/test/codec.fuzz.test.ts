// Property tests: random bytes never throw out of any parser or decoder path, and valid frames
// embedded in random noise are still found. Seeds are fixed so a failure reproduces.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { dialects, type Dialect, type LockReply, type LockRequest } from '../src/index';

const all = Object.values(dialects);

function requestArb(d: Dialect): fc.Arbitrary<LockRequest> {
  const [lo, hi] = d.boardRange;
  const board = fc.integer({ min: lo, max: Math.min(hi, 31) });
  const lock = fc.integer({ min: 1, max: d.locksPerBoard });
  const arbs: fc.Arbitrary<LockRequest>[] = [
    board.map((b) => ({ kind: 'status' as const, board: b })),
    fc.tuple(board, lock).map(([b, l]) => ({ kind: 'unlock' as const, board: b, lock: l })),
  ];
  if (d.supports('unlockAll')) arbs.push(board.map((b) => ({ kind: 'unlockAll' as const, board: b })));
  if (d.supports('setPulse')) arbs.push(fc.tuple(board, fc.integer({ min: 1, max: 5000 })).map(([b, s]) => ({ kind: 'setPulse' as const, board: b, ms: s * 10 })));
  if (d.supports('readLock')) arbs.push(fc.tuple(board, lock).map(([b, l]) => ({ kind: 'readLock' as const, board: b, lock: l })));
  return fc.oneof(...arbs);
}

function replyArb(d: Dialect): fc.Arbitrary<LockReply> {
  const [lo, hi] = d.boardRange;
  const board = fc.integer({ min: lo, max: Math.min(hi, 31) });
  const n = d.name === 'generic-8a80' ? 24 : d.locksPerBoard;
  const bitsArb = fc.array(fc.boolean(), { minLength: n, maxLength: n });
  return fc.tuple(board, bitsArb, bitsArb).map(([b, locks, items]) => ({
    kind: 'status' as const,
    board: b,
    locks,
    items: d.name === 'generic-8a80' ? null : items,
  }));
}

describe.each(all.map((d) => [d.name, d] as const))('%s fuzz', (_name, d) => {
  it('random bytes in random chunks never throw, and every reported frame decodes', () => {
    fc.assert(
      fc.property(fc.array(fc.uint8Array({ maxLength: 40 }), { maxLength: 20 }), (chunks) => {
        for (const dir of ['requests', 'replies'] as const) {
          const p = d.createParser(dir);
          for (const c of chunks) {
            for (const f of p.push(Buffer.from(c))) {
              // a framing rule that throws is a dialect bug: the parser reports it, the fuzz fails
              if (!f.ok && f.error === 'PARSER_ERROR') throw f.cause;
              if (f.ok) {
                // a frame the parser accepts must decode without a framing error (a strict
                // request decoder may still refuse a field out of range)
                try {
                  if (dir === 'replies') d.decodeReply(f.frame);
                  else d.decodeRequest(f.frame);
                } catch (e) {
                  expect(dir).toBe('requests');
                  expect(e).toMatchObject({ name: 'CodecError', code: 'OUT_OF_RANGE' });
                }
              }
            }
          }
        }
      }),
      { seed: 4242, numRuns: 400 },
    );
  });

  it('a valid request embedded in noise is still found', () => {
    fc.assert(
      fc.property(requestArb(d), fc.uint8Array({ maxLength: 30 }), fc.uint8Array({ maxLength: 30 }), fc.nat(60), (req, pre, post, cut) => {
        const frame = d.encodeRequest(req);
        const stream = Buffer.concat([Buffer.from(pre), frame, Buffer.from(post)]);
        const at = Math.min(cut, stream.length);
        const p = d.createParser('requests');
        const out = [...p.push(stream.subarray(0, at)), ...p.push(stream.subarray(at))];
        expect(out.filter((f) => !f.ok && f.error === 'PARSER_ERROR')).toEqual([]);
        const found = out.filter((f) => f.ok).map((f) => (f as { frame: Buffer }).frame.toString('hex'));
        expect(found).toContain(frame.toString('hex'));
      }),
      { seed: 1717, numRuns: 400 },
    );
  });

  it('a valid reply embedded in noise is still found and decodes to what was encoded', () => {
    fc.assert(
      fc.property(replyArb(d), fc.uint8Array({ maxLength: 30 }), fc.uint8Array({ maxLength: 30 }), fc.nat(60), (rep, pre, post, cut) => {
        const frame = d.encodeReply(rep);
        const stream = Buffer.concat([Buffer.from(pre), frame, Buffer.from(post)]);
        const at = Math.min(cut, stream.length);
        const p = d.createParser('replies');
        p.expect({ kind: 'status', board: rep.board });
        const out = [...p.push(stream.subarray(0, at)), ...p.push(stream.subarray(at))];
        expect(out.filter((f) => !f.ok && f.error === 'PARSER_ERROR')).toEqual([]);
        const found = out.filter((f) => f.ok).map((f) => (f as { frame: Buffer }).frame);
        const match = found.find((f) => f.equals(frame));
        expect(match, `frame ${frame.toString('hex')} in ${stream.toString('hex')}`).toBeDefined();
        expect(d.decodeReply(match!)).toEqual(rep);
      }),
      { seed: 2323, numRuns: 400 },
    );
  });

  if (d.name === 'generic-8a80') {
    it('read-all answers of 2..50 channels in noise are framed by the configured channel count', () => {
      fc.assert(
        fc.property(
          fc.integer({ min: 2, max: 50 }).chain((n) => fc.tuple(fc.constant(n), fc.array(fc.boolean(), { minLength: n, maxLength: n }))),
          fc.integer({ min: 1, max: 31 }),
          fc.uint8Array({ maxLength: 30 }),
          fc.uint8Array({ maxLength: 30 }),
          fc.nat(80),
          ([n, locks], board, pre, post, cut) => {
            const frame = d.encodeReply({ kind: 'status', board, locks, items: null });
            const stream = Buffer.concat([Buffer.from(pre), frame, Buffer.from(post)]);
            const at = Math.min(cut, stream.length);
            const p = d.createParser('replies');
            p.expect({ kind: 'status', board }, { locks: n });
            const out = [...p.push(stream.subarray(0, at)), ...p.push(stream.subarray(at))];
            const found = out.filter((f) => f.ok).map((f) => (f as { frame: Buffer }).frame);
            expect(found.some((f) => f.equals(frame)), `frame ${frame.toString('hex')} in ${stream.toString('hex')}`).toBe(true);
            const rep = d.decodeReply(frame);
            expect(rep.kind === 'status' && rep.locks.slice(0, n)).toEqual(locks);
          },
        ),
        { seed: 3131, numRuns: 600 },
      );
    });
  }

  it('decoders on random bytes throw only CodecError', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 24 }), (bytes) => {
        for (const fn of [d.decodeReply, d.decodeRequest]) {
          try {
            fn(Buffer.from(bytes));
          } catch (e) {
            expect((e as { name: string }).name).toBe('CodecError');
          }
        }
      }),
      { seed: 99, numRuns: 500 },
    );
  });
});
