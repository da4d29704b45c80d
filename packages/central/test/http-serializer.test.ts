// The compiled response writers (http/serializer.ts) write exactly what fastify-type-provider-zod's
// serializer wrote (zod parse, then JSON.stringify): same keys, same order, unknown keys left out,
// absent optional keys left out. Data the parse refuses goes the zod way and fails the same way.
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { serializerCompiler as zodSerializerCompiler } from 'fastify-type-provider-zod';
import { compileResponseWriter, JsonText, quoteJson, serializerCompiler } from '../src/http/serializer';
import { ErrorEnvelope, envelope, paged } from '../src/http/envelope';
import { PickUpPoint, Locker, PupAvailability } from '../src/api/pickup-points';

const args = (schema: unknown) => ({ schema, method: 'POST', url: '/v1/X', httpStatus: '200' }) as never;
const zodWay = (schema: z.ZodTypeAny, data: unknown) => zodSerializerCompiler(args(schema))(data);

const Sample = envelope({
  n: z.number().int(),
  d: z.number().min(1),
  s: z.string().nullable(),
  o: z.string().optional().describe('optional'),
  no: z.string().nullish(),
  b: z.boolean(),
  lit: z.literal('x'),
  e: z.enum(['A', 'B']),
  arr: z.array(z.object({ k: z.string(), v: z.number().nullable() })),
  nested: z.object({ deep: z.array(z.string().optional()) }).nullable(),
});

const valid: unknown[] = [
  { success: true, error: null, message: null, n: 1, d: 1.5, s: 'a"b\\c\u0001\u2028\ud800', b: false, lit: 'x', e: 'B', arr: [], nested: null },
  { extra: 1, nested: { deep: ['a', undefined], more: 2 }, arr: [{ v: null, k: 'é', z: 1 }], e: 'A', lit: 'x', b: true, no: null, o: 'set', s: null, d: 1e21, n: -0, message: 'm', error: 'E', success: false },
  { success: true, error: null, message: null, n: 2 ** 53 - 1, d: 3, s: '', o: undefined, no: undefined, b: true, lit: 'x', e: 'A', arr: [{ k: '', v: 0.1 }], nested: { deep: [] } },
];

const invalid: unknown[] = [
  { success: true, error: null, message: null, n: 1.5, d: 1, s: null, b: true, lit: 'x', e: 'A', arr: [], nested: null },
  { success: true, error: null, message: null, n: 1, d: 0.5, s: null, b: true, lit: 'x', e: 'A', arr: [], nested: null },
  { success: true, error: null, message: null, n: 1, d: 1, b: true, lit: 'x', e: 'A', arr: [], nested: null },
  { success: true, error: null, message: null, n: 1, d: 1, s: null, b: 'true', lit: 'x', e: 'A', arr: [], nested: null },
  { success: true, error: null, message: null, n: 1, d: 1, s: null, b: true, lit: 'y', e: 'C', arr: [], nested: null },
  { success: true, error: null, message: null, n: Infinity, d: 1, s: null, b: true, lit: 'x', e: 'A', arr: {}, nested: null },
  [],
  null,
];

describe('compiled response serializer', () => {
  it('quotes every string exactly as JSON.stringify: each UTF-16 code unit alone and inside text, surrogate pairs, random strings', () => {
    for (let c = 0; c <= 0xffff; c++) {
      const ch = String.fromCharCode(c);
      expect(quoteJson(ch)).toBe(JSON.stringify(ch));
      expect(quoteJson(`uid-${ch}-x`)).toBe(JSON.stringify(`uid-${ch}-x`));
    }
    for (const t of ['', 'a1b2c3', '2026-11-27T07:00:00.000', 'Zoë 😀 Łódź', '\ud83d\ude00', 'a\u2028b\u2029', 'x\ud83d', '\ude00y', '"quoted"', 'back\\slash', 'tab\tnl\n', '\u007f\u0080\uffff']) {
      expect(quoteJson(t)).toBe(JSON.stringify(t));
    }
    let seed = 7;
    const rnd = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    for (let i = 0; i < 20_000; i++) {
      let t = '';
      const n = Math.floor(rnd() * 12);
      for (let k = 0; k < n; k++) t += String.fromCharCode(rnd() < 0.8 ? 32 + Math.floor(rnd() * 95) : Math.floor(rnd() * 0x10000));
      expect(quoteJson(t)).toBe(JSON.stringify(t));
    }
  });

  it('writes what the zod parse + JSON.stringify wrote', () => {
    const w = serializerCompiler(args(Sample));
    for (const data of valid) expect(w(data)).toBe(zodWay(Sample, data));
  });

  it('writes every finite number as JSON.stringify does: negative zero, exponents, subnormals, random doubles', () => {
    const N = envelope({ v: z.number() });
    const w = serializerCompiler(args(N));
    const numbers = [0, -0, 1, -1, 0.1 + 0.2, 1e21, 1e-7, 123456789012345680000, 5e-324, -Number.MAX_VALUE, Number.MIN_SAFE_INTEGER, 2 ** 53 + 2];
    const view = new DataView(new ArrayBuffer(8));
    let seed = 11;
    const rnd = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31);
    for (let i = 0; i < 5_000; i++) {
      view.setUint32(0, rnd() * 2);
      view.setUint32(4, rnd() * 2);
      const v = view.getFloat64(0);
      if (Number.isFinite(v)) numbers.push(v);
    }
    for (const v of numbers) expect(w({ success: true, error: null, message: null, v })).toBe(zodWay(N, { success: true, error: null, message: null, v }));
  });

  it('refuses what the zod parse refuses, with the same error', () => {
    const w = serializerCompiler(args(Sample));
    for (const data of invalid) {
      let zodErr: unknown;
      try {
        zodWay(Sample, data);
      } catch (e) {
        zodErr = e;
      }
      expect(zodErr, JSON.stringify(data)).toBeDefined();
      expect(() => w(data)).toThrow((zodErr as Error).message);
    }
  });

  it("covers the read endpoints' response schemas and the error envelope", () => {
    for (const s of [paged(PickUpPoint), paged(Locker), paged(PupAvailability), ErrorEnvelope]) expect(compileResponseWriter(s)).not.toBeNull();
    const pups = paged(PickUpPoint);
    const data = {
      success: true, error: null, message: null, pageNo: 1, pageSize: 50, totalItems: 2, totalPages: 1,
      items: [
        { pupUid: 'p1', name: 'One', timeZone: 'Europe/Amsterdam', locationAddress: { streetName: 's', mailbox: '', city: 'c', countryIso2: 'NL' }, deliveryAddress: { streetName: 's', mailbox: 'm', city: 'c', countryIso2: 'NL' }, parkingAddress: null, externalReference: '' },
        { name: 'Two', pupUid: 'p2' },
      ],
    };
    expect(serializerCompiler(args(pups))(data)).toBe(zodWay(pups, data));
    expect(serializerCompiler(args(ErrorEnvelope))({ success: false, error: 'InvalidRequest', message: 'm' })).toBe('{"success":false,"error":"InvalidRequest","message":"m"}');
  });

  it('leaves schemas with other types or checks to zod', () => {
    for (const s of [z.object({ d: z.date() }), z.object({ s: z.string().min(2) }), z.object({ t: z.string().transform((x) => x.length) }), z.object({}).passthrough(), z.object({ u: z.union([z.string(), z.number()]) })]) {
      expect(compileResponseWriter(s)).toBeNull();
    }
    const s = z.object({ t: z.string().transform((x) => x.length) });
    expect(serializerCompiler(args(s))({ t: 'abc' })).toBe('{"t":3}');
  });

  it('writes a JsonText where an object goes as its producer wrote it, in an array or a field', () => {
    const s = z.object({ items: z.array(z.object({ a: z.string() })), one: z.object({ a: z.string() }).nullable() });
    const w = compileResponseWriter(s)!;
    expect(w({ items: [{ a: 'x' }, new JsonText('{"a":"from SQL"}'), { a: 'y' }], one: new JsonText('{"a":"z"}') })).toBe('{"items":[{"a":"x"},{"a":"from SQL"},{"a":"y"}],"one":{"a":"z"}}');
    // only in an object's place: a string field is not a JsonText's
    expect(w({ items: [], one: { a: new JsonText('"x"') } })).toBeUndefined();
  });
});
