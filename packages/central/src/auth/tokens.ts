// Access tokens: self-contained and HMAC-signed, so validating one costs no database round trip
// and any central instance sharing the signing key accepts it.
//   token = "v1." + base64url(JSON {sub: tenantUid, iat, exp, jti}) + "." + base64url(HMAC-SHA256)
import crypto from 'node:crypto';
import type { Clock } from '../clock';

export interface TokenClaims {
  sub: string;
  iat: number;
  exp: number;
  jti: string;
}

/** Tokens whose signature was checked, kept so a client's next calls skip the HMAC and JSON parse. */
const VERIFIED_CACHE_MAX = 10_000;

export class TokenService {
  private readonly verified = new Map<string, TokenClaims>();

  constructor(
    private readonly key: Buffer,
    private readonly lifetimeSeconds: number,
    private readonly clock: Clock,
  ) {}

  issue(tenantUid: string): { token: string; expiresIn: number } {
    const iat = Math.floor(this.clock.now().getTime() / 1000);
    const claims: TokenClaims = { sub: tenantUid, iat, exp: iat + this.lifetimeSeconds, jti: crypto.randomBytes(9).toString('base64url') };
    const body = Buffer.from(JSON.stringify(claims)).toString('base64url');
    return { token: `v1.${body}.${this.sign(body)}`, expiresIn: this.lifetimeSeconds };
  }

  /** Returns the claims of a valid, unexpired token, or null. */
  verify(token: string): TokenClaims | null {
    // The signature of a token never changes validity, only its expiry does: a token seen
    // before (exact same string) skips the HMAC and the JSON parse but not the expiry check.
    const known = this.verified.get(token);
    if (known) return this.clock.now().getTime() / 1000 >= known.exp ? null : known;
    const claims = this.check(token);
    if (claims) {
      if (this.verified.size >= VERIFIED_CACHE_MAX) this.verified.clear();
      this.verified.set(token, claims);
    }
    return claims;
  }

  private check(token: string): TokenClaims | null {
    const parts = token.split('.');
    if (parts.length !== 3 || parts[0] !== 'v1') return null;
    const [, body, sig] = parts as [string, string, string];
    const expected = Buffer.from(this.sign(body));
    const got = Buffer.from(sig);
    if (got.length !== expected.length || !crypto.timingSafeEqual(got, expected)) return null;
    let claims: TokenClaims;
    try {
      claims = JSON.parse(Buffer.from(body, 'base64url').toString('utf8'));
    } catch {
      return null;
    }
    if (!claims || typeof claims.sub !== 'string' || typeof claims.exp !== 'number') return null;
    if (this.clock.now().getTime() / 1000 >= claims.exp) return null;
    return Object.freeze(claims);
  }

  private sign(body: string): string {
    return crypto.createHmac('sha256', this.key).update(body).digest('base64url');
  }
}
