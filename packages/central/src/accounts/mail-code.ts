// Mail delivery codes. Post for an account is addressed to its main pick up point's delivery
// address with the mail code in place of the person's name, so a carrier's label reads
// "<first part> <second part>" and the PUP staff can match the parcel to the account without the
// label carrying personal data.
//
// Format: three letters, a hyphen, five digits, e.g. "KTR-40719". Letters come from an alphabet
// without I, O and Q (no confusion with 1 and 0), digits are 0-9: 23^3 * 10^5 (about 1.2e9) codes.
// Split rule: mailCodeFirstName is the part before the hyphen (the letters), mailCodeLastName the
// part after it (the digits). Codes are unique (unique index on accounts.mail_code).
import crypto from 'node:crypto';
import type { Kysely } from 'kysely';

export const MAIL_CODE_LETTERS = 'ABCDEFGHJKLMNPRSTUVWXYZ';
export const MAIL_CODE_RE = /^[A-HJ-NPR-Z]{3}-\d{5}$/;

export function generateMailCode(rand: (max: number) => number = (max) => crypto.randomInt(max)): string {
  let letters = '';
  for (let i = 0; i < 3; i++) letters += MAIL_CODE_LETTERS[rand(MAIL_CODE_LETTERS.length)];
  const digits = String(rand(100_000)).padStart(5, '0');
  return `${letters}-${digits}`;
}

/** The first and last name a carrier label carries for this mail code. */
export function splitMailCode(code: string | null): { mailCodeFirstName: string | null; mailCodeLastName: string | null } {
  if (!code) return { mailCodeFirstName: null, mailCodeLastName: null };
  const i = code.indexOf('-');
  if (i < 0) return { mailCodeFirstName: code, mailCodeLastName: null };
  return { mailCodeFirstName: code.slice(0, i), mailCodeLastName: code.slice(i + 1) };
}

/**
 * A mail code no account has yet (checked before the write; the unique index accounts_mail_code
 * catches the rare race). Used by the create calls, provisioning and migration 102. Every account
 * gets its code when it is made, so reading an account never writes one.
 */
export async function freeMailCode(q: Kysely<any>): Promise<string> {
  for (let i = 0; i < 20; i++) {
    const code = generateMailCode();
    const taken = await q.selectFrom('accounts').select('uid').where('mail_code', '=', code).executeTakeFirst();
    if (!taken) return code;
  }
  throw new Error('no free mail code found in 20 attempts');
}
