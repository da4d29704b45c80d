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

const PREFIX = 'hs256';
const KEY_LABEL = 'locker/terminal-secret-digest/v1';
/** the label of a pepper derived from auth.tokenSigningKey (domain separation from the tokens) */
const FROM_SIGNING_KEY_LABEL = 'locker/terminal-secret-pepper/from-token-signing-key/v1';

/** Shortest high-entropy secret in each form: 22 base64 characters or 32 hex digits carry 128 bits when random. */
export const MIN_BASE64_CHARS = 22;
export const MIN_HEX_CHARS = 32;

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

const BASE64 = /^[A-Za-z0-9_+/-]+={0,2}$/;
const HEX = /^(?:[0-9a-f]+|[0-9A-F]+)$/;

/** upper, lower, digit, other: for counting class changes along the string */
function cls(c: number): number {
  if (c >= 65 && c <= 90) return 0;
  if (c >= 97 && c <= 122) return 1;
  if (c >= 48 && c <= 57) return 2;
  return 3;
}

/**
 * Does this secret look machine-generated with at least 128 bits of entropy? Conservative: a random
 * secret is rejected now and then (it just keeps scrypt); a human-written one must not pass.
 * - Form: hex of >= 32 digits (one case), or base64/base64url of >= 22 characters with upper case
 *   letters, lower case letters and digits.
 * - Looks random: the character class (upper / lower / digit / other) changes at least every 3
 *   characters on average in base64 (MyTerminalPassword2024 does not), every 5 in hex
 *   (deadbeefcafebabe... does not); no character 4 times in a row; no 4 characters (6 in a
 *   string of 40 or more) repeated anywhere in the string; no run of 5 consecutive ascending or descending characters (abcde, 98765).
 */
export function isHighEntropySecret(s: string): boolean {
  const body = s.replace(/=+$/, '');
  let minChanges: number;
  if (HEX.test(body)) {
    if (body.length < MIN_HEX_CHARS) return false;
    minChanges = body.length / 5;
  } else if (BASE64.test(s)) {
    if (body.length < MIN_BASE64_CHARS || !/[A-Z]/.test(body) || !/[a-z]/.test(body) || !/[0-9]/.test(body)) return false;
    minChanges = body.length / 3;
  } else return false;
  let changes = 0;
  let run = 1;
  let up = 1;
  let down = 1;
  const grams = new Set<string>();
  const g = body.length >= 40 ? 6 : 4; // longer strings: longer repeats (random ones repeat 4 characters by chance)
  for (let i = 0; i < body.length; i++) {
    const c = body.charCodeAt(i);
    if (i > 0) {
      const p = body.charCodeAt(i - 1);
      if (cls(c) !== cls(p)) changes++;
      run = c === p ? run + 1 : 1;
      up = c === p + 1 ? up + 1 : 1;
      down = c === p - 1 ? down + 1 : 1;
      if (run >= 4 || up >= 5 || down >= 5) return false;
    }
    if (i >= g - 1) {
      const gram = body.slice(i - g + 1, i + 1);
      if (grams.has(gram)) return false;
      grams.add(gram);
    }
  }
  return changes >= minChanges;
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

/** A fresh terminal secret that passes isHighEntropySecret (192 random bits, base64url). */
export function generateTerminalSecret(): string {
  for (;;) {
    const s = crypto.randomBytes(24).toString('base64url');
    if (isHighEntropySecret(s)) return s;
  }
}
