// The Mosquitto password file of the scale-out layout, written from the provisioning file (its
// terminals and their secrets) and the central instances' MQTT users: `locker-central mqtt-passwd`.
// Lines are `user:$7$iterations$salt$hash` (PBKDF2-SHA512, base64), the format mosquitto_passwd
// writes and Mosquitto 2 reads. A line whose hash already matches the password is kept as it is,
// so running the command again with nothing changed leaves the file the same.
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { isHash } from '../auth/secrets';
import type { ProvisioningFile } from '../provisioning/schema';

const ITERATIONS = 1000;
const SALT_LEN = 12;
const KEY_LEN = 64;

export class MqttPasswdError extends Error {}

export function mosquittoHash(password: string, iterations = ITERATIONS, salt: Buffer = crypto.randomBytes(SALT_LEN)): string {
  const hash = crypto.pbkdf2Sync(password, salt, iterations, KEY_LEN, 'sha512');
  return `$7$${iterations}$${salt.toString('base64')}$${hash.toString('base64')}`;
}

/** Whether a `$7$` hash (as in a password file line, after `user:`) was made from this password. */
export function mosquittoHashMatches(password: string, hash: string): boolean {
  const m = /^\$7\$(\d+)\$([A-Za-z0-9+/=]+)\$([A-Za-z0-9+/=]+)$/.exec(hash);
  if (!m) return false;
  const expected = Buffer.from(m[3]!, 'base64');
  const got = crypto.pbkdf2Sync(password, Buffer.from(m[2]!, 'base64'), Number(m[1]), expected.length, 'sha512');
  return got.length === expected.length && crypto.timingSafeEqual(got, expected);
}

/** user -> hash of a password file's lines (comments and blank lines skipped). */
export function parsePasswdFile(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of text.split(/\r?\n/)) {
    if (!line.trim() || line.startsWith('#')) continue;
    const colon = line.indexOf(':');
    if (colon > 0) out.set(line.slice(0, colon), line.slice(colon + 1));
  }
  return out;
}

/** `user:password` lines (the central instances' MQTT users); `#` comments and blank lines skipped. */
export function parseUserPasswords(text: string, source: string): [string, string][] {
  const out: [string, string][] = [];
  text.split(/\r?\n/).forEach((line, i) => {
    if (!line.trim() || line.trimStart().startsWith('#')) return;
    const colon = line.indexOf(':');
    const user = colon > 0 ? line.slice(0, colon) : '';
    const password = colon > 0 ? line.slice(colon + 1) : '';
    if (!/^[A-Za-z0-9_.-]{1,64}$/.test(user) || !password) throw new MqttPasswdError(`${source}:${i + 1}: expected user:password (user of letters, digits, _ . -)`);
    out.push([user, password]);
  });
  return out;
}

/** The `user` names of a Mosquitto ACL file: they have the rights given there, so no terminal may be called so. */
export function aclUsers(text: string): Set<string> {
  const out = new Set<string>();
  for (const line of text.split(/\r?\n/)) {
    const m = /^\s*user\s+(\S+)/.exec(line);
    if (m) out.add(m[1]!);
  }
  return out;
}

export interface MqttPasswdInput {
  terminals: ProvisioningFile['terminals'];
  centrals: [string, string][];
  /** the current password file (user -> hash): unchanged passwords keep their line; terminals with a hashed secret keep theirs */
  existing: Map<string, string>;
  /** user names that must not be terminals (the ACL's `user` entries) */
  reserved?: Set<string>;
}

export interface MqttPasswdResult {
  text: string;
  changes: string[];
}

export function buildPasswdFile(input: MqttPasswdInput): MqttPasswdResult {
  const lines: string[] = [];
  const changes: string[] = [];
  const problems: string[] = [];
  const seen = new Set<string>();
  const add = (user: string, password: string | null, what: string) => {
    if (seen.has(user)) {
      problems.push(`${what} ${user}: the user name is taken twice (a terminal id must not be a central instance's user name)`);
      return;
    }
    seen.add(user);
    const old = input.existing.get(user);
    if (password === null) {
      // the provisioning file has only the scrypt hash: Mosquitto cannot use it
      if (old) {
        lines.push(`${user}:${old}`);
        changes.push(`kept ${what} ${user} (hashed secret in the provisioning file; its line is carried over)`);
      } else problems.push(`${what} ${user}: the provisioning file holds only a hash of its secret and the password file has no line for it; give the plain secret, or add it once with mosquitto_passwd and run this again`);
      return;
    }
    if (old && mosquittoHashMatches(password, old)) {
      lines.push(`${user}:${old}`);
      changes.push(`unchanged ${what} ${user}`);
    } else {
      lines.push(`${user}:${mosquittoHash(password)}`);
      changes.push(`${old ? 'updated' : 'added'} ${what} ${user}`);
    }
  };
  for (const [user, password] of input.centrals) add(user, password, 'central user');
  for (const t of input.terminals) {
    if (input.reserved?.has(t.id) && !input.centrals.some(([u]) => u === t.id)) {
      problems.push(`terminal ${t.id}: the ACL gives this user name the central's rights; rename the terminal`);
      continue;
    }
    add(t.id, isHash(t.secret) ? null : t.secret, 'terminal');
  }
  for (const user of input.existing.keys()) if (!seen.has(user)) changes.push(`removed ${user}`);
  if (problems.length) throw new MqttPasswdError(`password file not written:\n  ${problems.join('\n  ')}`);
  return { text: lines.map((l) => `${l}\n`).join(''), changes };
}

/** Writes the file atomically (a temporary file renamed over it) with the given mode. */
export function writePasswdFile(file: string, text: string, mode: number): void {
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}.tmp`);
  fs.writeFileSync(tmp, text, { mode });
  fs.chmodSync(tmp, mode);
  fs.renameSync(tmp, file);
}
