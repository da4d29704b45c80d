// PostgreSQL text cannot hold U+0000 (the query fails). Inputs that end up in the store (JSON
// bodies, provisioning files) are checked up front on both engines, naming the field.

/** The path (innermost key first) to the first string, value or key, holding U+0000; null when none. */
function nulAt(v: unknown, depth: number): string[] | null {
  if (typeof v === 'string') return v.indexOf('\u0000') !== -1 ? [] : null;
  if (depth > 64 || !v || typeof v !== 'object') return null;
  const keys = Object.keys(v);
  for (let i = 0; i < keys.length; i++) {
    const k = keys[i]!;
    if (k.indexOf('\u0000') !== -1) return [k];
    const hit = nulAt((v as Record<string, unknown>)[k], depth + 1);
    if (hit) {
      hit.push(k);
      return hit;
    }
  }
  return null;
}

/**
 * The path of the first string (value or key) holding U+0000 ('a.b.0'; '(body)' for the value
 * itself), or null. One walk; the path is put together only for a hit (the usual answer is none).
 */
export function findNul(v: unknown): string | null {
  const at = nulAt(v, 0);
  return at === null ? null : at.length ? at.reverse().join('.') : '(body)';
}
