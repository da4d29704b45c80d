// The rule for terminal secrets of high entropy (machine-generated, >= 128 random bits), shared by
// the central service (auth/terminal-secret-digest.ts: only such secrets get a fast digest, see
// docs/edge-protocol.md "Connection") and the fleet simulator (its generated secrets must pass it).
import crypto from 'node:crypto';

export const MIN_BASE64_CHARS = 22;
export const MIN_HEX_CHARS = 32;

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

/** A fresh terminal secret that passes isHighEntropySecret (192 random bits, base64url). */
export function generateTerminalSecret(): string {
  for (;;) {
    const s = crypto.randomBytes(24).toString('base64url');
    if (isHighEntropySecret(s)) return s;
  }
}
