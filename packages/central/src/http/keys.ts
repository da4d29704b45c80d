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

export function normalizeKeys(schema: AnyZod, value: unknown): unknown {
  const s: any = unwrap(schema);
  const type = s?._zod?.def?.type;
  if (type === 'object' && value && typeof value === 'object' && !Array.isArray(value)) {
    const shape: Record<string, AnyZod> = s._zod.def.shape;
    const byLower = byLowerCase(shape);
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
      const canon = shape[k] ? k : (byLower.get(k.toLowerCase()) ?? k);
      if (canon in out && canon !== k) continue; // exact spelling wins over a case variant
      out[canon] = shape[canon] ? normalizeKeys(shape[canon]!, v) : v;
    }
    return out;
  }
  if (type === 'array' && Array.isArray(value)) return value.map((v) => normalizeKeys(s._zod.def.element, v));
  return value;
}
