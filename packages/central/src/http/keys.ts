// Request bodies are matched to schema field names case-insensitively (the API's samples mix
// `PupUid` and `pupUid`, as ASP.NET-style services accept both). Before validation, every object
// key that matches a schema key ignoring case is renamed to the schema's spelling.
import { z } from 'zod';

type AnyZod = z.ZodTypeAny;

function unwrap(s: AnyZod): AnyZod {
  let cur: any = s;
  for (let i = 0; i < 10; i++) {
    const def = cur?._zod?.def;
    if (!def) return cur;
    if (def.type === 'optional' || def.type === 'nullable' || def.type === 'default' || def.type === 'prefault' || def.type === 'readonly' || def.type === 'catch') cur = def.innerType;
    else if (def.type === 'pipe') cur = def.in;
    else if (def.type === 'lazy') cur = def.getter();
    else return cur;
  }
  return cur;
}

/** a shape's keys by their lower-case spelling, made once per shape (schemas live for the process) */
const lowerKeys = new WeakMap<object, Map<string, string>>();

function byLowerCase(shape: Record<string, AnyZod>): Map<string, string> {
  let m = lowerKeys.get(shape);
  if (!m) {
    m = new Map();
    for (const k of Object.keys(shape)) m.set(k.toLowerCase(), k);
    lowerKeys.set(shape, m);
  }
  return m;
}

type Normalizer = (value: unknown) => unknown;
const keep: Normalizer = (v) => v;
/** one normalizer per schema, built on first use (children lazily: schemas may be recursive) */
const normalizers = new WeakMap<object, Normalizer>();

function normalizerOf(schema: AnyZod): Normalizer {
  let n = normalizers.get(schema);
  if (!n) {
    const s: any = unwrap(schema);
    const type = s?._zod?.def?.type;
    n = type === 'object' ? objectNormalizer(s._zod.def.shape) : type === 'array' ? arrayNormalizer(s._zod.def.element) : keep;
    normalizers.set(schema, n);
  }
  return n;
}

function objectNormalizer(shape: Record<string, AnyZod>): Normalizer {
  const byLower = byLowerCase(shape);
  const children = new Map<string, Normalizer>();
  const child = (k: string): Normalizer => {
    let c = children.get(k);
    if (!c) children.set(k, (c = normalizerOf(shape[k]!)));
    return c;
  };
  return (value) => {
    if (!value || typeof value !== 'object' || Array.isArray(value)) return value;
    const obj = value as Record<string, unknown>;
    const keys = Object.keys(obj);
    // Most bodies use the schema's spelling throughout: then the object itself is the answer (no
    // copy per request). Any case variant, or a nested value that changes, takes the copy below.
    let i = 0;
    for (; i < keys.length; i++) {
      const k = keys[i]!;
      if (Object.hasOwn(shape, k)) {
        const v = obj[k];
        if (child(k)(v) !== v) break;
      } else if (byLower.has(k.toLowerCase())) break;
    }
    if (i === keys.length) return value;
    const out: Record<string, unknown> = {};
    for (const k of keys) {
      const canon = Object.hasOwn(shape, k) ? k : (byLower.get(k.toLowerCase()) ?? k);
      if (canon in out && canon !== k) continue; // exact spelling wins over a case variant
      out[canon] = Object.hasOwn(shape, canon) ? child(canon)(obj[k]) : obj[k];
    }
    return out;
  };
}

function arrayNormalizer(element: AnyZod): Normalizer {
  let el: Normalizer | undefined;
  return (value) => {
    if (!Array.isArray(value)) return value;
    el ??= normalizerOf(element);
    for (let i = 0; i < value.length; i++) {
      if (el(value[i]) !== value[i]) return value.map(el);
    }
    return value;
  };
}

/** The value with every object key that matches a schema key ignoring case spelled as the schema spells it. */
export function normalizeKeys(schema: AnyZod, value: unknown): unknown {
  return normalizerOf(schema)(value);
}
