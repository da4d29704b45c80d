// Response serialization compiled once per route schema. fastify-type-provider-zod serializes a
// response with a zod parse of the whole object (strip unknown keys, check every field) and then
// JSON.stringify of the parse result: two walks and a copy of every response. For the schemas
// the API uses (objects, strings, numbers, booleans, literals, enums, nullable, optional, arrays)
// the compiled serializer below writes the JSON directly in one walk, with exactly the output of
// that parse + stringify: the schema's keys in the schema's order, unknown keys left out, absent
// optional keys left out. It checks every value as the parse would; a value the parse would refuse
// (or a schema with anything else in it) goes the original way, so the answer to a response that
// fails its schema stays what it was (ResponseSerializationError, answered 500).
import { serializerCompiler as zodSerializerCompiler } from 'fastify-type-provider-zod';
import type { z } from 'zod';

/**
 * A value already written as JSON by its producer, who answers for it matching the schema at its
 * place: an object writer takes its text as it is (GetShipments' items and the locker pages'
 * lockers, written by SQL: shipments/items.ts, kept in the row, and pickup-points/queries.ts).
 */
export class JsonText {
  constructor(readonly text: string) {}
}

/** returned by a compiled writer when the value is not what the schema says */
const MISMATCH = Symbol('mismatch');
type Writer = (v: unknown) => string | typeof MISMATCH;

/** thrown while compiling: the schema holds a type or check the compiled writer does not cover */
class Unsupported extends Error {}

interface Def {
  type: string;
  checks?: { _zod: { def: { check: string; format?: string; value?: unknown; inclusive?: boolean } } }[];
  shape?: Record<string, z.ZodTypeAny>;
  catchall?: unknown;
  innerType?: z.ZodTypeAny;
  element?: z.ZodTypeAny;
  values?: unknown[];
  entries?: Record<string, unknown>;
}

const defOf = (s: z.ZodTypeAny): Def => (s as unknown as { _zod: { def: Def } })._zod.def;

/** a character JSON.stringify writes otherwise than itself: quote, backslash, control, surrogate */
const NEEDS_ESCAPE = /["\\\u0000-\u001f\ud800-\udfff]/;

/**
 * JSON.stringify of a string: a string without any character JSON.stringify escapes (the common
 * case: uids, names, times) is written between quotes as it is, 2-3x faster than JSON.stringify
 * per string (a page of 100 shipments writes about 1,900); any other string (quotes, backslashes,
 * control characters, surrogates, paired or not) goes through JSON.stringify itself.
 */
export function quoteJson(s: string): string {
  return NEEDS_ESCAPE.test(s) ? JSON.stringify(s) : '"' + s + '"';
}

function numberCheck(c: NonNullable<Def['checks']>[number]): (n: number) => boolean {
  const d = c._zod.def;
  if (d.check === 'number_format' && d.format === 'safeint') return Number.isSafeInteger;
  if ((d.check === 'greater_than' || d.check === 'less_than') && typeof d.value === 'number') {
    const v = d.value;
    if (d.check === 'greater_than') return d.inclusive ? (n) => n >= v : (n) => n > v;
    return d.inclusive ? (n) => n <= v : (n) => n < v;
  }
  throw new Unsupported(`number check ${d.check}`);
}

function compile(schema: z.ZodTypeAny, inArray = false): Writer {
  const def = defOf(schema);
  switch (def.type) {
    case 'string': {
      if (def.checks?.length) throw new Unsupported('string checks');
      return (v) => (typeof v === 'string' ? quoteJson(v) : MISMATCH);
    }
    case 'number': {
      const checks = (def.checks ?? []).map(numberCheck);
      return (v) => {
        if (typeof v !== 'number' || !Number.isFinite(v)) return MISMATCH;
        for (let i = 0; i < checks.length; i++) if (!checks[i]!(v)) return MISMATCH;
        // a finite number: JSON.stringify writes what String does (-0 as 0 alike)
        return '' + v;
      };
    }
    case 'boolean':
      if (def.checks?.length) throw new Unsupported('boolean checks');
      return (v) => (v === true ? 'true' : v === false ? 'false' : MISMATCH);
    case 'null':
      return (v) => (v === null ? 'null' : MISMATCH);
    case 'literal': {
      const values = def.values ?? [];
      if (!values.every((x) => x === null || ['string', 'number', 'boolean'].includes(typeof x))) throw new Unsupported('literal');
      return (v) => (values.includes(v) ? JSON.stringify(v) : MISMATCH);
    }
    case 'enum': {
      const values = Object.values(def.entries ?? {});
      return (v) => (values.includes(v) && (typeof v === 'string' || typeof v === 'number') ? JSON.stringify(v) : MISMATCH);
    }
    case 'nullable': {
      const inner = compile(def.innerType!, inArray);
      return (v) => (v === null ? 'null' : inner(v));
    }
    case 'optional': {
      // in an object an absent (undefined) value leaves the key out (writeObject); in an array
      // JSON.stringify writes undefined as null
      const inner = compile(def.innerType!, inArray);
      return (v) => (v === undefined ? (inArray ? 'null' : undefined as unknown as string) : inner(v));
    }
    case 'array': {
      if (def.checks?.length) throw new Unsupported('array checks');
      const el = compile(def.element!, true);
      return (v) => {
        if (!Array.isArray(v)) return MISMATCH;
        let out = '[';
        for (let i = 0; i < v.length; i++) {
          const s = el(v[i]);
          if (s === MISMATCH) return MISMATCH;
          out += i === 0 ? s : ',' + s;
        }
        return out + ']';
      };
    }
    case 'object': {
      if (def.catchall !== undefined || def.checks?.length) throw new Unsupported('object catchall or checks');
      const fields = Object.entries(def.shape!).map(([k, s]) => ({
        key: k,
        prefix: JSON.stringify(k) + ':',
        commaPrefix: ',' + JSON.stringify(k) + ':',
        optional: (s as unknown as { _zod: { optin?: string } })._zod.optin === 'optional',
        write: compile(s),
      }));
      // zod's object parse reads every schema key (absent required key: refused) and strips the rest
      return (v) => {
        if (typeof v !== 'object' || v === null || Array.isArray(v)) return MISMATCH;
        if (v instanceof JsonText) return v.text;
        const o = v as Record<string, unknown>;
        let out = '';
        for (let i = 0; i < fields.length; i++) {
          const f = fields[i]!;
          const x = o[f.key];
          if (x === undefined) {
            if (f.optional) continue;
            return MISMATCH;
          }
          const s = f.write(x);
          if (s === MISMATCH) return MISMATCH;
          if (s === undefined) continue;
          out += (out === '' ? f.prefix : f.commaPrefix) + s;
        }
        return '{' + out + '}';
      };
    }
    default:
      throw new Unsupported(def.type);
  }
}

/**
 * The compiled writer of a zod response schema, or null when the schema holds something it does
 * not cover (then the zod parse + stringify serializes it).
 */
export function compileResponseWriter(schema: z.ZodTypeAny): ((data: unknown) => string | undefined) | null {
  let w: Writer;
  try {
    w = compile(schema);
  } catch (e) {
    if (e instanceof Unsupported) return null;
    throw e;
  }
  return (data) => {
    const s = w(data);
    return s === MISMATCH || s === undefined ? undefined : s;
  };
}

type CompilerArgs = Parameters<typeof zodSerializerCompiler>[0];

/**
 * fastify's serializer compiler: the compiled writer where it covers the schema and the data,
 * else fastify-type-provider-zod's (zod parse, JSON.stringify; ResponseSerializationError).
 */
export function serializerCompiler(args: CompilerArgs): (data: unknown) => string {
  const slow = zodSerializerCompiler(args);
  const schema = args.schema as unknown;
  const fast = schema && typeof schema === 'object' && '_zod' in schema ? compileResponseWriter(schema as z.ZodTypeAny) : null;
  if (!fast) return slow;
  return (data) => fast(data) ?? slow(data);
}
