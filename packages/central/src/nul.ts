// PostgreSQL text cannot hold U+0000 (the query fails). Inputs that end up in the store (JSON
// bodies, provisioning files) are checked up front on both engines, naming the field.

/** The path of the first string (value or key) holding U+0000, or null. */
export function findNul(v: unknown, path = '', depth = 0): string | null {
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
