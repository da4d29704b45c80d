import crypto from 'node:crypto';

/** Opaque identifiers: 128 random bits as 32 lower-case hex characters. */
export function newUid(): string {
  return crypto.randomBytes(16).toString('hex');
}

/** Stored timestamps: ISO 8601 UTC with milliseconds and Z (sorts as text on both engines). */
export function toDbTime(d: Date): string {
  return d.toISOString();
}

/** API timestamps: "ISO 8601 without zone" (the API document); the values are UTC. */
export function toApiTime(stored: string | Date | null | undefined): string | null {
  if (stored == null) return null;
  const iso = typeof stored === 'string' ? stored : stored.toISOString();
  return iso.endsWith('Z') ? iso.slice(0, -1) : iso;
}

/** Parses an API timestamp; a value without zone is taken as UTC. Returns null when invalid. */
export function parseApiTime(v: string): Date | null {
  const s = /([zZ]|[+-]\d\d:?\d\d)$/.test(v) ? v : v + 'Z';
  const d = new Date(s);
  return Number.isNaN(d.getTime()) ? null : d;
}
