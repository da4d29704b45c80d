// Client secret verification for /connect/token with bounded cost (docs/api.md, "Throttling and
// limits"):
//
// - scrypt runs on the libuv thread pool (crypto.scrypt, async), never on the event loop;
// - at most `concurrency` verifications run at once, at most `queueLimit` more wait; beyond that a
//   request is refused at once ('busy'), without any scrypt work, so a flood of wrong secrets
//   cannot queue up work that delays everyone else;
// - a successful verification is remembered for `cacheTtlMs`, keyed by a keyed HMAC-SHA256 of the
//   client id and the presented secret (the secret itself is never kept), together with the stored
//   hash it matched: when the secret changes (provisioning writes a new hash), the entry no longer
//   matches and the next request runs scrypt again.
import crypto from 'node:crypto';
import { verifySecretAsync } from './secrets';

export type VerifyOutcome = 'ok' | 'bad' | 'busy';

export interface SecretVerifierOptions {
  concurrency: number;
  queueLimit: number;
  /** 0: no cache */
  cacheTtlMs: number;
  cacheMax?: number;
  now?: () => number;
  /** the scrypt check itself (tests count or hold the calls) */
  verify?: (secret: string, storedHash: string) => Promise<boolean>;
}

interface CacheEntry {
  hash: string;
  until: number;
}

export class SecretVerifier {
  /** the scrypt check; replaceable (tests) */
  verifyFn: (secret: string, storedHash: string) => Promise<boolean>;
  private active = 0;
  private readonly waiting: (() => void)[] = [];
  private readonly cache = new Map<string, CacheEntry>();
  private readonly cacheKey = crypto.randomBytes(32);
  private readonly cacheMax: number;
  private readonly now: () => number;
  readonly stats = { scrypt: 0, cacheHits: 0, busy: 0 };

  constructor(private readonly o: SecretVerifierOptions) {
    this.verifyFn = o.verify ?? verifySecretAsync;
    this.cacheMax = o.cacheMax ?? 10_000;
    this.now = o.now ?? Date.now;
  }

  /** Verifications running and waiting now. */
  load(): { active: number; waiting: number } {
    return { active: this.active, waiting: this.waiting.length };
  }

  /**
   * A remembered success of this client id with this secret and this stored hash: true without any
   * scrypt. Cheap (one HMAC); callers check it before any throttling.
   */
  cached(clientId: string, secret: string, storedHash: string): boolean {
    if (this.o.cacheTtlMs <= 0) return false;
    const k = this.key(clientId, secret);
    const e = this.cache.get(k);
    if (!e) return false;
    if (e.until <= this.now() || e.hash !== storedHash) {
      this.cache.delete(k);
      return false;
    }
    this.stats.cacheHits++;
    return true;
  }

  /** Whether a verification would be admitted now (a slot is free or the queue has room). */
  hasRoom(): boolean {
    return this.active < this.o.concurrency || this.waiting.length < this.o.queueLimit;
  }

  /**
   * Verifies the secret against the stored hash: 'ok', 'bad', or 'busy' when every slot is taken
   * and the queue is full (nothing was done). Admission is decided synchronously, at the call.
   */
  async verify(clientId: string, secret: string, storedHash: string, cacheable = true): Promise<VerifyOutcome> {
    if (this.cached(clientId, secret, storedHash)) return 'ok';
    if (!this.hasRoom()) {
      this.stats.busy++;
      return 'busy';
    }
    await this.acquire();
    try {
      this.stats.scrypt++;
      const ok = await this.verifyFn(secret, storedHash);
      if (ok && cacheable) this.remember(clientId, secret, storedHash);
      return ok ? 'ok' : 'bad';
    } finally {
      this.release();
    }
  }

  /** Forgets every remembered success (e.g. after provisioning changed secrets on this instance). */
  clear(): void {
    this.cache.clear();
  }

  private remember(clientId: string, secret: string, storedHash: string): void {
    if (this.o.cacheTtlMs <= 0) return;
    const k = this.key(clientId, secret);
    this.cache.delete(k);
    this.cache.set(k, { hash: storedHash, until: this.now() + this.o.cacheTtlMs });
    if (this.cache.size > this.cacheMax) {
      const now = this.now();
      for (const [key, e] of this.cache) {
        if (this.cache.size <= this.cacheMax * 0.9) break;
        if (e.until <= now || this.cache.size > this.cacheMax) this.cache.delete(key);
      }
    }
  }

  private key(clientId: string, secret: string): string {
    return crypto.createHmac('sha256', this.cacheKey).update(`${clientId.length}:${clientId}`).update(secret).digest('base64url');
  }

  private acquire(): Promise<void> {
    if (this.active < this.o.concurrency) {
      this.active++;
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => this.waiting.push(resolve));
  }

  private release(): void {
    const next = this.waiting.shift();
    if (next) next(); // the slot passes straight to the next waiter
    else this.active--;
  }
}
