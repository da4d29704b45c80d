// The guard of /connect/token (docs/api.md, "Throttling and limits"): failed-login throttling per
// client id from one address and per address, and the bounded secret verifier. One per app.
import type { Config } from '../config';
import type { Clock } from '../clock';
import { FailureThrottle } from './throttle';
import { SecretVerifier } from './verifier';

export type GuardOutcome =
  | { kind: 'ok' }
  | { kind: 'bad'; blockedMs: number }
  /** too many failures: refused without scrypt */
  | { kind: 'throttled'; retryAfterSeconds: number; scope: 'client' | 'address' }
  /** the verifier's slots and queue are full: refused without scrypt */
  | { kind: 'busy'; retryAfterSeconds: number };

export class TokenGuard {
  readonly verifier: SecretVerifier;
  readonly perClient: FailureThrottle;
  readonly perAddress: FailureThrottle;

  constructor(config: Config, clock: Clock) {
    const now = () => clock.now().getTime();
    const t = config.throttle;
    const common = { windowMs: t.tokenFailureWindowSeconds * 1000, blockMs: t.tokenBlockSeconds * 1000, maxBlockMs: t.tokenMaxBlockSeconds * 1000, now };
    this.perClient = new FailureThrottle({ ...common, max: t.tokenMaxFailuresPerClient });
    this.perAddress = new FailureThrottle({ ...common, max: t.tokenMaxFailuresPerAddress });
    this.verifier = new SecretVerifier({
      concurrency: config.auth.verifyConcurrency,
      queueLimit: config.auth.verifyQueueLimit,
      cacheTtlMs: config.auth.verifiedSecretCacheSeconds * 1000,
      // the cache's expiry follows the wall clock: a test's manual clock need not move for it
    });
  }

  /**
   * Checks a presented secret of a client id from an address against the stored hash (the dummy
   * hash for an unknown client: `known` false, never ok).
   */
  async check(clientId: string, secret: string, storedHash: string, known: boolean, address: string): Promise<GuardOutcome> {
    // a success remembered from the last minute passes without scrypt, even from a throttled
    // address: it proves the secret (an attacker cannot produce a hit without it)
    if (known && this.verifier.cached(clientId, secret, storedHash)) return { kind: 'ok' };
    const clientKey = `${clientId.length}:${clientId}@${address}`;
    const addressKey = address;
    const waitClient = this.perClient.retryAfterMs(clientKey);
    const waitAddress = this.perAddress.retryAfterMs(addressKey);
    if (waitClient > 0 || waitAddress > 0) {
      return { kind: 'throttled', retryAfterSeconds: Math.max(1, Math.ceil(Math.max(waitClient, waitAddress) / 1000)), scope: waitClient >= waitAddress ? 'client' : 'address' };
    }
    if (!this.verifier.hasRoom()) {
      this.verifier.stats.busy++;
      return { kind: 'busy', retryAfterSeconds: 1 };
    }
    this.perClient.attempt(clientKey);
    this.perAddress.attempt(addressKey);
    const r = await this.verifier.verify(clientId, secret, storedHash, known);
    if (r === 'ok' && known) {
      this.perClient.succeeded(clientKey, true);
      this.perAddress.succeeded(addressKey, false);
      return { kind: 'ok' };
    }
    if (r === 'busy') {
      // cannot happen (admission was checked above, synchronously); undo the attempt all the same
      this.perClient.succeeded(clientKey, false);
      this.perAddress.succeeded(addressKey, false);
      return { kind: 'busy', retryAfterSeconds: 1 };
    }
    const blockedMs = Math.max(this.perClient.failed(clientKey), this.perAddress.failed(addressKey));
    return { kind: 'bad', blockedMs };
  }
}
