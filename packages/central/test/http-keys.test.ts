// Case-insensitive request keys (http/keys.ts) and the NUL check (nul.ts), as pure functions.
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { normalizeKeys } from '../src/http/keys';
import { findNul } from '../src/nul';

const Item = z.object({ referenceNo: z.string(), dimension: z.object({ width: z.number() }).optional() });
const Body = z.object({ pupUid: z.string(), items: z.array(Item).optional(), note: z.string().nullable().optional() });

describe('normalizeKeys', () => {
  it('answers a body spelled as the schema spells it with the body itself (no copy)', () => {
    const body = { pupUid: 'p', items: [{ referenceNo: 'a', dimension: { width: 1 } }], extra: 1 };
    const out = normalizeKeys(Body, body);
    expect(out).toBe(body);
    expect(out).toEqual({ pupUid: 'p', items: [{ referenceNo: 'a', dimension: { width: 1 } }], extra: 1 });
  });

  it('renames case variants at any depth, keeping unknown keys and the order of the others', () => {
    const body = { PupUid: 'p', Items: [{ referenceNo: 'a' }, { ReferenceNO: 'b', Dimension: { WIDTH: 2 } }], Extra: 1 };
    const out = normalizeKeys(Body, body) as Record<string, unknown>;
    expect(out).toEqual({ pupUid: 'p', items: [{ referenceNo: 'a' }, { referenceNo: 'b', dimension: { width: 2 } }], Extra: 1 });
    expect(Object.keys(out)).toEqual(['pupUid', 'items', 'Extra']);
    // the input is left as it was
    expect(body).toEqual({ PupUid: 'p', Items: [{ referenceNo: 'a' }, { ReferenceNO: 'b', Dimension: { WIDTH: 2 } }], Extra: 1 });
  });

  it('a nested variant alone changes the parents: only those are copied', () => {
    const first = { referenceNo: 'a' };
    const body = { pupUid: 'p', items: [first, { referenceno: 'b' }] };
    const out = normalizeKeys(Body, body) as { items: unknown[] };
    expect(out).not.toBe(body);
    expect(out.items[0]).toBe(first);
    expect(out.items[1]).toEqual({ referenceNo: 'b' });
  });

  it('the exact spelling wins over a case variant, whichever comes first', () => {
    expect(normalizeKeys(Body, { PUPUID: 'variant', pupUid: 'exact' })).toEqual({ pupUid: 'exact' });
    expect(normalizeKeys(Body, { pupUid: 'exact', PUPUID: 'variant' })).toEqual({ pupUid: 'exact' });
  });

  it('leaves values that are not objects where the schema has one', () => {
    expect(normalizeKeys(Body, null)).toBe(null);
    expect(normalizeKeys(Body, [1, 2])).toEqual([1, 2]);
    expect(normalizeKeys(Body, { pupUid: 'p', items: 'x' })).toEqual({ pupUid: 'p', items: 'x' });
  });
});

describe('findNul', () => {
  it('names the first field holding U+0000, in a value, a key or an array element', () => {
    expect(findNul({ a: 'x', b: { c: ['ok', 'n\u0000'] } })).toBe('b.c.1');
    expect(findNul({ a: { ['k\u0000']: 1 } })).toBe('a.k\u0000');
    expect(findNul('\u0000')).toBe('(body)');
  });
  it('answers null for bodies without it', () => {
    expect(findNul({ a: 'x', b: [{ c: 'y' }, 1, null, true] })).toBe(null);
    expect(findNul(null)).toBe(null);
  });
});
