// The technician's login session on the diagnostics page: POST /api/login with the technician
// password gives a random session id in an HttpOnly, SameSite=Strict cookie (`locker_tech`) and a
// CSRF token the page sends back in the `x-csrf-token` header of every action. Sessions live in
// memory only (a restart logs the technician out) and expire diagnostics.sessionMinutes after the
// login (not sliding: a phone left on the wall does not stay logged in).
import crypto from 'node:crypto';

export const SESSION_COOKIE = 'locker_tech';
/** at most this many sessions at once; the oldest goes first */
const MAX_SESSIONS = 64;

export interface TechnicianSession {
  id: string;
  csrfToken: string;
  /** ms epoch */
  expiresAt: number;
}

const digest = (s: string) => crypto.createHash('sha256').update(s, 'utf8').digest();
/** Constant-time string comparison (through fixed-length digests). */
export const sameSecret = (a: string, b: string): boolean => crypto.timingSafeEqual(digest(a), digest(b));

export class TechnicianSessions {
  private readonly sessions = new Map<string, TechnicianSession>();

  constructor(
    private readonly minutes: number,
    private readonly now: () => number = Date.now,
  ) {}

  create(): TechnicianSession {
    this.prune();
    const s: TechnicianSession = {
      id: crypto.randomBytes(32).toString('base64url'),
      csrfToken: crypto.randomBytes(32).toString('base64url'),
      expiresAt: this.now() + this.minutes * 60_000,
    };
    this.sessions.set(s.id, s);
    while (this.sessions.size > MAX_SESSIONS) this.sessions.delete(this.sessions.keys().next().value!);
    return s;
  }

  /** The live session of a Cookie header, or null (none, unknown or expired). */
  fromCookie(cookieHeader: string | undefined): TechnicianSession | null {
    const id = cookieValue(cookieHeader, SESSION_COOKIE);
    if (!id) return null;
    const s = this.sessions.get(id);
    if (!s) return null;
    if (s.expiresAt <= this.now()) {
      this.sessions.delete(id);
      return null;
    }
    return s;
  }

  delete(id: string): void {
    this.sessions.delete(id);
  }

  /** The Set-Cookie value for a session. No `Secure`: the page is served over plain HTTP on the terminal's service port. */
  cookie(s: TechnicianSession): string {
    const maxAge = Math.max(1, Math.ceil((s.expiresAt - this.now()) / 1000));
    return `${SESSION_COOKIE}=${s.id}; HttpOnly; SameSite=Strict; Path=/; Max-Age=${maxAge}; Expires=${new Date(s.expiresAt).toUTCString()}`;
  }

  clearCookie(): string {
    return `${SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0; Expires=Thu, 01 Jan 1970 00:00:00 GMT`;
  }

  private prune(): void {
    const now = this.now();
    for (const [id, s] of this.sessions) if (s.expiresAt <= now) this.sessions.delete(id);
  }
}

/** One cookie's value from a Cookie header. */
export function cookieValue(header: string | undefined, name: string): string | null {
  for (const part of (header ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    if (part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim() || null;
  }
  return null;
}
