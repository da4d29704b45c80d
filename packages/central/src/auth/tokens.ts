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

export class TokenService {
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
    if (typeof claims.sub !== 'string' || typeof claims.exp !== 'number') return null;
    if (this.clock.now().getTime() / 1000 >= claims.exp) return null;
    return claims;
  }

  private sign(body: string): string {
    return crypto.createHmac('sha256', this.key).update(body).digest('base64url');
  }
}
