// Terminal logins on the embedded broker (docs/edge-protocol.md, "Connection"): the secret check,
// what makes it cheap (a cache of verified logins, one check shared by concurrent attempts), what
// bounds it (admission control), and the throttling of failed logins.
//
// - The stored secret is an scrypt hash (auth/secrets.ts): about 50 ms of a core per check, on
//   the libuv thread pool. A login whose (terminal id, secret) was verified against the terminal's
//   current stored hash is remembered for cacheTtlMs, keyed by HMAC-SHA256(per-process random
//   key, id + NUL + secret): the cache never holds a secret, and an entry counts only while the
//   stored hash is the one it was verified against (a re-provisioned secret or a removed terminal
//   takes effect at the next login; the terminal row is read on every login).
// - Concurrent attempts with the same id and secret share one check (a terminal that retries
//   while its first check runs joins it instead of starting another).
// - At most maxPendingChecks checks run at once; an attempt that would start one more is refused
//   at once (CONNACK 3, server unavailable) without any scrypt, and retries later.
// - An attempt whose connection has already closed (the terminal gave up waiting) is not checked.
// - Only a check that failed counts as a failed login: a pending one does not. More logins of
//   one terminal id from one address open at the same time than maxFailuresPerClient is not a
//   terminal (it holds one connection; its abandoned attempts are closed): each such extra
//   attempt is refused as throttled and counts as a failure.
// - The failure map expires on a timer and is capped (oldest entry evicted), never swept whole
//   on a login.
// - A high-entropy secret (auth/terminal-secret-digest.ts) whose row holds a usable fast digest
//   (HMAC-SHA256 under the configured pepper) is checked by that digest alone: no scrypt, no
//   admission slot, right after a restart too. A row without one (or with one made under another
//   pepper or for another hash) is checked by scrypt, and the digest is stored after a successful
//   check (backfill), so the next login is fast.
import crypto from 'node:crypto';
import type { Logger } from '../logger';
import { verifySecretAsync } from '../auth/secrets';
import { terminalSecretDigest, verifyTerminalSecretDigest, type DigestKey } from '../auth/terminal-secret-digest';

export interface AuthThrottle {
  /** failed logins of one terminal id from one address within windowMs before it is blocked */
  maxFailuresPerClient: number;
  /** failed logins from one address (any terminal id) within windowMs before it is blocked */
  maxFailuresPerAddress: number;
  windowMs: number;
  /** how long a blocked client id / address is refused without checking the secret */
  blockMs: number;
}

export const AUTH_THROTTLE: AuthThrottle = { maxFailuresPerClient: 5, maxFailuresPerAddress: 20, windowMs: 60_000, blockMs: 60_000 };

/** Secret checks (scrypt) running at once; beyond, logins are refused with CONNACK 3 at once. */
export const MAX_PENDING_CHECKS = 4;
/** How long a verified login is remembered (keyed by an HMAC, bound to the stored hash). */
export const LOGIN_CACHE_TTL_MS = 12 * 3600_000;
/** Verified logins remembered at most (the oldest is forgotten first): about 250 bytes each. */
export const LOGIN_CACHE_MAX = 200_000;
/** Entries of the failed-login map at most (the oldest is forgotten first). */
const FAILURES_MAX = 100_000;

export type LoginResult =
  | 'ok'
  /** unknown terminal, wrong secret, or id/username/password missing or not matching */
  | 'bad'
  /** blocked after failed logins (CONNACK 5) */
  | 'throttled'
  /** too many checks in progress: refused at once, try again later (CONNACK 3) */
  | 'busy'
  /** the connection closed before the check: nobody waits for the answer */
  | 'abandoned';

export interface LoginAttempt {
  clientId: string | undefined;
  username: string | undefined;
  password: Buffer | undefined;
  /** remote address of the connection ('unknown' when there is none) */
  address: string;
  /** has the connection closed (the terminal gave up on this attempt)? */
  isClosed: () => boolean;
}

/** What is stored of a terminal's secret: the scrypt hash and the fast digest (null: none). */
export interface StoredTerminalSecret {
  hash: string;
  fast?: string | null;
}

export interface TerminalLoginOptions {
  /** the stored secret of a provisioned terminal (its scrypt hash alone, or with the fast digest), null when there is no such terminal */
  lookup: (terminalId: string) => Promise<string | StoredTerminalSecret | null>;
  /**
   * the key of the fast digests (auth/terminal-secret-digest.ts, from mqtt.terminalSecretPepper);
   * null or absent: no fast check, every login uses scrypt
   */
  digestKey?: DigestKey | null;
  /** stores a fast digest after a successful scrypt check of a row that has none usable (only while the row still has that hash) */
  backfill?: (terminalId: string, secretHash: string, digest: string) => Promise<void>;
  /** the slow check (default: scrypt on the thread pool) */
  verify?: (secret: string, storedHash: string) => Promise<boolean>;
  throttle?: Partial<AuthThrottle>;
  maxPendingChecks?: number;
  cacheTtlMs?: number;
  cacheMax?: number;
  log: Logger;
}

type Failures = { count: number; since: number; blockedUntil: number };
type Check = { hash: string; result: Promise<boolean> };

export class TerminalLogins {
  private readonly throttle: AuthThrottle;
  private readonly verify: (secret: string, storedHash: string) => Promise<boolean>;
  private readonly maxPending: number;
  private readonly ttlMs: number;
  private readonly cacheMax: number;
  private readonly key = crypto.randomBytes(32);
  /** HMAC(id, secret) -> the stored hash it was verified against, and until when it counts */
  private readonly cache = new Map<string, { hash: string; until: number }>();
  /** HMAC(id, secret) -> the check running for it */
  private readonly checks = new Map<string, Check>();
  private readonly failures = new Map<string, Failures>();
  /** logins in progress per id@address */
  private readonly open = new Map<string, Set<LoginAttempt>>();
  private readonly sweeper: NodeJS.Timeout;
  private pending = 0;
  private busyRefused = 0;
  private busyLoggedAt = 0;
  /** scrypt checks started (for tests and benchmarks) */
  verifierCalls = 0;
  /** logins decided by the fast digest alone, right or wrong (for tests and benchmarks) */
  fastChecks = 0;
  /** fast digests stored after a scrypt check (for tests and benchmarks) */
  backfills = 0;

  constructor(private readonly opts: TerminalLoginOptions) {
    this.throttle = { ...AUTH_THROTTLE, ...opts.throttle };
    this.verify = opts.verify ?? verifySecretAsync;
    this.maxPending = Math.max(1, opts.maxPendingChecks ?? MAX_PENDING_CHECKS);
    this.ttlMs = opts.cacheTtlMs ?? LOGIN_CACHE_TTL_MS;
    this.cacheMax = Math.max(0, opts.cacheMax ?? LOGIN_CACHE_MAX);
    this.sweeper = setInterval(() => this.sweep(), Math.max(1000, Math.min(this.throttle.windowMs, this.throttle.blockMs)));
    this.sweeper.unref();
  }

  stats(): { pendingChecks: number; cached: number; failures: number; verifierCalls: number; fastChecks: number; backfills: number } {
    return { pendingChecks: this.pending, cached: this.cache.size, failures: this.failures.size, verifierCalls: this.verifierCalls, fastChecks: this.fastChecks, backfills: this.backfills };
  }

  close(): void {
    clearInterval(this.sweeper);
  }

  async login(a: LoginAttempt): Promise<LoginResult> {
    const id = a.clientId ?? '';
    const clientKey = `id:${id}@${a.address}`;
    const addressKey = `addr:${a.address}`;
    const now = Date.now();
    for (const k of [clientKey, addressKey]) {
      const f = this.failures.get(k);
      if (f && f.blockedUntil > now) return 'throttled';
    }
    if (!a.username || !a.password || !a.clientId || a.clientId !== a.username) {
      this.failed(clientKey, addressKey, id, a.address);
      return 'bad';
    }
    let open = this.open.get(clientKey);
    if (!open) this.open.set(clientKey, (open = new Set()));
    let live = 0;
    for (const o of open) if (!o.isClosed()) live++;
    if (live >= this.throttle.maxFailuresPerClient) {
      // several open logins of one terminal at once: not a terminal (see the head of this file)
      this.failed(clientKey, addressKey, id, a.address);
      return 'throttled';
    }
    open.add(a);
    try {
      return await this.check(a, id, clientKey, addressKey);
    } finally {
      open.delete(a);
      if (!open.size) this.open.delete(clientKey);
    }
  }

  private async check(a: LoginAttempt, id: string, clientKey: string, addressKey: string): Promise<LoginResult> {
    const row = await this.opts.lookup(id);
    if (!row) {
      this.failed(clientKey, addressKey, id, a.address);
      return 'bad';
    }
    const stored = typeof row === 'string' ? row : row.hash;
    const secret = a.password!.toString('utf8');
    const digestKey = this.opts.digestKey;
    if (digestKey) {
      const fast = verifyTerminalSecretDigest(digestKey, id, stored, secret, typeof row === 'string' ? null : row.fast);
      if (fast !== 'unusable') {
        // one HMAC decided it: no scrypt, no admission slot
        this.fastChecks++;
        // a connection whose terminal already gave up (its end arrived with its CONNECT, e.g. it
        // waited in the accept queue past its connect timeout) is not let in: its CONNACK would go
        // nowhere and its last will would record a status for a connection that never served. The
        // end is read in the same turn of the loop as the CONNECT, after it: one turn first
        await new Promise((r) => setImmediate(r));
        if (a.isClosed()) return 'abandoned';
        if (fast === 'ok') {
          this.succeeded(clientKey, addressKey);
          return 'ok';
        }
        this.failed(clientKey, addressKey, id, a.address);
        return 'bad';
      }
    }
    const key = crypto.createHmac('sha256', this.key).update(id).update('\u0000').update(secret).digest('base64');
    const hit = this.cache.get(key);
    if (hit && hit.hash === stored && hit.until > Date.now()) {
      this.cache.delete(key); // most recently used last: the oldest is evicted first
      this.cache.set(key, hit);
      this.succeeded(clientKey, addressKey);
      return 'ok';
    }
    let check = this.checks.get(key);
    if (!check) {
      // one turn of the event loop first: a connection's end that arrived with its CONNECT (the
      // terminal gave up while the service was busy) is read in the next I/O phase
      await new Promise((r) => setImmediate(r));
      check = this.checks.get(key);
    }
    if (a.isClosed()) return 'abandoned';
    if (!check || check.hash !== stored) {
      if (this.pending >= this.maxPending) {
        this.busy();
        return 'busy';
      }
      check = this.startCheck(key, secret, stored, id);
    }
    const ok = await check.result;
    if (ok) {
      this.succeeded(clientKey, addressKey);
      return 'ok';
    }
    this.failed(clientKey, addressKey, id, a.address);
    return 'bad';
  }

  private startCheck(key: string, secret: string, stored: string, id: string): Check {
    this.pending++;
    this.verifierCalls++;
    const result = Promise.resolve()
      .then(() => this.verify(secret, stored))
      .then(async (ok) => {
        if (ok) await this.backfill(id, stored, secret);
        if (ok && this.cacheMax > 0) {
          this.cache.delete(key);
          this.cache.set(key, { hash: stored, until: Date.now() + this.ttlMs });
          if (this.cache.size > this.cacheMax) this.cache.delete(this.cache.keys().next().value!);
        }
        return ok;
      })
      .finally(() => {
        this.pending--;
        if (this.checks.get(key) === check) this.checks.delete(key);
      });
    const check: Check = { hash: stored, result };
    this.checks.set(key, check);
    return check;
  }

  /** After a successful scrypt check: stores the fast digest of a high-entropy secret whose row has none usable. */
  private async backfill(id: string, stored: string, secret: string): Promise<void> {
    const digestKey = this.opts.digestKey;
    if (!digestKey || !this.opts.backfill) return;
    const digest = terminalSecretDigest(digestKey, id, stored, secret);
    if (!digest) return;
    try {
      await this.opts.backfill(id, stored, digest);
      this.backfills++;
    } catch (e) {
      this.opts.log.warn({ terminal: id, err: e }, 'could not store the fast digest of a terminal secret; its next login uses scrypt again');
    }
  }

  private busy(): void {
    this.busyRefused++;
    const now = Date.now();
    if (now - this.busyLoggedAt < 10_000) return;
    this.busyLoggedAt = now;
    this.opts.log.warn({ refused: this.busyRefused, maxPendingChecks: this.maxPending, errorCode: 'LOGINS_BUSY' }, 'terminal logins refused for now (CONNACK 3): too many secret checks in progress; the terminals retry');
    this.busyRefused = 0;
  }

  private succeeded(clientKey: string, addressKey: string): void {
    this.failures.delete(clientKey);
    const f = this.failures.get(addressKey);
    if (f && f.count > 0) f.count--;
  }

  private failed(clientKey: string, addressKey: string, terminal: string, remote: string): void {
    this.count(clientKey, this.throttle.maxFailuresPerClient, { terminal, remote });
    this.count(addressKey, this.throttle.maxFailuresPerAddress, { remote });
  }

  private count(key: string, max: number, who: { terminal?: string; remote: string }): void {
    const now = Date.now();
    let f = this.failures.get(key);
    if (f) this.failures.delete(key); // re-inserted last: the map stays in order of last failure
    if (!f || now - f.since > this.throttle.windowMs) f = { count: 0, since: now, blockedUntil: f?.blockedUntil ?? 0 };
    f.count++;
    if (f.count >= max) {
      f.blockedUntil = now + this.throttle.blockMs;
      f.count = 0;
      f.since = now;
      this.opts.log.warn({ ...who, failures: max, blockSeconds: Math.round(this.throttle.blockMs / 1000), errorCode: 'AUTH_THROTTLED' }, 'too many failed terminal logins: further logins refused for a while without checking');
    }
    this.failures.set(key, f);
    if (this.failures.size > FAILURES_MAX) this.failures.delete(this.failures.keys().next().value!);
  }

  /** Drops expired failure entries and cached logins (on a timer, not per login). */
  sweep(now = Date.now()): void {
    for (const [k, v] of this.failures) if (v.blockedUntil <= now && now - v.since > this.throttle.windowMs) this.failures.delete(k);
    for (const [k, v] of this.cache) if (v.until <= now) this.cache.delete(k);
  }
}
