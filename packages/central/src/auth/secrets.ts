// Client and terminal secrets are stored as scrypt hashes: `scrypt$N$r$p$salt$hash` (base64url).
import crypto from 'node:crypto';

const N = 16384, R = 8, P = 1, LEN = 32;

export function hashSecret(secret: string): string {
  const salt = crypto.randomBytes(16);
  const hash = crypto.scryptSync(secret, salt, LEN, { N, r: R, p: P });
  return `scrypt$${N}$${R}$${P}$${salt.toString('base64url')}$${hash.toString('base64url')}`;
}

export function verifySecret(secret: string, stored: string): boolean {
  const parts = stored.split('$');
  if (parts.length !== 6 || parts[0] !== 'scrypt') return false;
  const [, n, r, p, salt, hash] = parts as [string, string, string, string, string, string];
  const expected = Buffer.from(hash, 'base64url');
  const got = crypto.scryptSync(secret, Buffer.from(salt, 'base64url'), expected.length, { N: Number(n), r: Number(r), p: Number(p) });
  return got.length === expected.length && crypto.timingSafeEqual(got, expected);
}

/** verifySecret on the libuv thread pool: the event loop stays free while scrypt runs (network-facing checks). */
export async function verifySecretAsync(secret: string, stored: string): Promise<boolean> {
  const parts = stored.split('$');
  if (parts.length !== 6 || parts[0] !== 'scrypt') return false;
  const [, n, r, p, salt, hash] = parts as [string, string, string, string, string, string];
  const expected = Buffer.from(hash, 'base64url');
  const got = await new Promise<Buffer>((resolve, reject) =>
    crypto.scrypt(secret, Buffer.from(salt, 'base64url'), expected.length, { N: Number(n), r: Number(r), p: Number(p) }, (err, key) => (err ? reject(err) : resolve(key))),
  );
  return got.length === expected.length && crypto.timingSafeEqual(got, expected);
}

/** Cheap check whether a stored hash was made from this secret, without timing concerns (provisioning). */
export function isHash(v: string): boolean {
  return v.startsWith('scrypt$');
}
