// PostgreSQL text cannot hold U+0000 (the query fails). Inputs that end up in the store (JSON
// bodies, provisioning files) are checked up front on both engines, naming the field.

/** Whether any string (value or key) holds U+0000: no path is built for the usual answer, no. */
function hasNul(v: unknown, depth: number): boolean {
  if (typeof v === 'string') return v.indexOf('\u0000') !== -1;
  if (depth > 64 || !v || typeof v !== 'object') return false;
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) if (hasNul(v[i], depth + 1)) return true;
    return false;
  }
  const keys = Object.keys(v);
  for (let i = 0; i < keys.length; i++) {
    const k = keys[i]!;
    if (k.indexOf('\u0000') !== -1 || hasNul((v as Record<string, unknown>)[k], depth + 1)) return true;
  }
  return false;
}

/** The path of the first string (value or key) holding U+0000, or null. */
export function findNul(v: unknown, path = '', depth = 0): string | null {
  if (depth === 0 && !hasNul(v, 0)) return null;
  if (typeof v === 'string') return v.includes('\u0000') ? path || '(body)' : null;
  if (depth > 64 || !v || typeof v !== 'object') return null;
  for (const [k, c] of Object.entries(v as Record<string, unknown>)) {
    const p = path ? `${path}.${k}` : k;
    if (k.includes('\u0000')) return p;
    const hit = findNul(c, p, depth + 1);
    if (hit) return hit;
  }
  return null;
}
