// The fast verifier of machine-generated terminal secrets (docs/edge-protocol.md, "Connection").
//
// A terminal secret of high entropy (isHighEntropySecret) is stored twice: as the scrypt hash
// (auth/secrets.ts, as every secret) and as a keyed digest, HMAC-SHA256 under a pepper that lives
// only in the configuration (mqtt.terminalSecretPepper, or derived from a configured
// auth.tokenSigningKey), never in the database. A login with such a secret costs one HMAC and a
// constant-time compare instead of about 50 ms of scrypt.
//
// Why that is sound: a slow hash only slows down guessing a secret from its stored hash. A secret
// of 128 random bits or more cannot be guessed, slow hash or not (2^128 HMACs); a human-written one
// can, so it keeps scrypt only. The pepper makes the digest useless without it: a copy of the
// database alone (a backup, an SQL injection) allows no offline guessing at all.
//
// Stored form: `hs256$<tag>$<mac>` (base64url), where
//   key = HMAC-SHA256(pepper, 'locker/terminal-secret-digest/v1')
//   tag = HMAC-SHA256(key, 'tag' NUL secretHash), first 9 bytes
//   mac = HMAC-SHA256(key, 'mac' NUL terminalId NUL secretHash NUL secret)
// The tag binds the digest to the pepper and to the scrypt hash it was made with: a digest made
// under another pepper (rotated) or for another hash (the secret changed by any path) is not
// usable, and the login falls back to scrypt (and may store a fresh digest), rather than refusing a
// right secret. With a usable tag, a mac that differs is a wrong secret.
import crypto from 'node:crypto';

// the rule for high-entropy secrets and the secret generator live in @locker/common (the fleet
// simulator makes secrets that must pass the same rule); re-exported for the central's callers
import { isHighEntropySecret } from '@locker/common';
export { isHighEntropySecret, generateTerminalSecret, MIN_BASE64_CHARS, MIN_HEX_CHARS } from '@locker/common';

const PREFIX = 'hs256';
const KEY_LABEL = 'locker/terminal-secret-digest/v1';
/** the label of a pepper derived from auth.tokenSigningKey (domain separation from the tokens) */
const FROM_SIGNING_KEY_LABEL = 'locker/terminal-secret-pepper/from-token-signing-key/v1';

/** Shortest high-entropy secret in each form: 22 base64 characters or 32 hex digits carry 128 bits when random. */
export type DigestKey = Buffer & { readonly __digestKey: true };

/**
 * The digest key from the configuration: mqtt.terminalSecretPepper when set, else one derived from
 * auth.tokenSigningKey when that is configured (not the one generated into the database: a key
 * stored next to the digests would protect nothing), else null (no digests: every login uses scrypt).
 */
export function terminalDigestKey(cfg: { pepper?: string | null; tokenSigningKey?: string | null }): DigestKey | null {
  let pepper: Buffer | null = null;
  if (cfg.pepper) pepper = Buffer.from(cfg.pepper, 'utf8');
  else if (cfg.tokenSigningKey) pepper = crypto.createHmac('sha256', Buffer.from(cfg.tokenSigningKey, 'utf8')).update(FROM_SIGNING_KEY_LABEL).digest();
  if (!pepper) return null;
  return crypto.createHmac('sha256', pepper).update(KEY_LABEL).digest() as DigestKey;
}

function tag(key: DigestKey, secretHash: string): string {
  return crypto.createHmac('sha256', key).update('tag\u0000').update(secretHash).digest().subarray(0, 9).toString('base64url');
}

function mac(key: DigestKey, terminalId: string, secretHash: string, secret: string): Buffer {
  return crypto.createHmac('sha256', key).update('mac\u0000').update(terminalId).update('\u0000').update(secretHash).update('\u0000').update(secret).digest();
}

/** The fast digest of a terminal's secret to store next to its scrypt hash, or null when the secret is not high-entropy. */
export function terminalSecretDigest(key: DigestKey, terminalId: string, secretHash: string, secret: string): string | null {
  if (!isHighEntropySecret(secret)) return null;
  return `${PREFIX}$${tag(key, secretHash)}$${mac(key, terminalId, secretHash, secret).toString('base64url')}`;
}

/**
 * Checks a login against a stored digest: 'ok' (the secret is right), 'bad' (it is wrong), or
 * 'unusable' (no digest, another pepper, another scrypt hash, or a secret that is not
 * high-entropy): then the slow check decides.
 */
export function verifyTerminalSecretDigest(key: DigestKey, terminalId: string, secretHash: string, secret: string, stored: string | null | undefined): 'ok' | 'bad' | 'unusable' {
  if (!stored || !isHighEntropySecret(secret)) return 'unusable';
  const parts = stored.split('$');
  if (parts.length !== 3 || parts[0] !== PREFIX) return 'unusable';
  const want = Buffer.from(tag(key, secretHash), 'utf8');
  const have = Buffer.from(parts[1]!, 'utf8');
  if (want.length !== have.length || !crypto.timingSafeEqual(want, have)) return 'unusable';
  const expected = Buffer.from(parts[2]!, 'base64url');
  const got = mac(key, terminalId, secretHash, secret);
  return expected.length === got.length && crypto.timingSafeEqual(expected, got) ? 'ok' : 'bad';
}
