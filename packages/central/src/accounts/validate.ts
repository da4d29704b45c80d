// Pure validation and normalisation of account fields. Each function returns the normalised value
// or throws an InvalidRequest ApiError whose message names the field (never the value: values are
// personal data and messages may end up in client logs).
import { invalidRequest } from '../errors';

/** ISO 3166-1 alpha-2: the 249 officially assigned codes. */
export const ISO_3166_ALPHA2 = new Set(
  (
    'AD AE AF AG AI AL AM AO AQ AR AS AT AU AW AX AZ BA BB BD BE BF BG BH BI BJ BL BM BN BO BQ BR BS BT BV BW BY BZ ' +
    'CA CC CD CF CG CH CI CK CL CM CN CO CR CU CV CW CX CY CZ DE DJ DK DM DO DZ EC EE EG EH ER ES ET FI FJ FK FM FO FR ' +
    'GA GB GD GE GF GG GH GI GL GM GN GP GQ GR GS GT GU GW GY HK HM HN HR HT HU ID IE IL IM IN IO IQ IR IS IT JE JM JO JP ' +
    'KE KG KH KI KM KN KP KR KW KY KZ LA LB LC LI LK LR LS LT LU LV LY MA MC MD ME MF MG MH MK ML MM MN MO MP MQ MR MS MT ' +
    'MU MV MW MX MY MZ NA NC NE NF NG NI NL NO NP NR NU NZ OM PA PE PF PG PH PK PL PM PN PR PS PT PW PY QA RE RO RS RU RW ' +
    'SA SB SC SD SE SG SH SI SJ SK SL SM SN SO SR SS ST SV SX SY SZ TC TD TF TG TH TJ TK TL TM TN TO TR TT TV TW TZ UA UG ' +
    'UM US UY UZ VA VC VE VG VI VN VU WF WS YE YT ZA ZM ZW'
  ).split(' '),
);

// Pragmatic address check: one @, a non-empty local part without spaces, a domain with at least
// one dot and a TLD of two or more letters. RFC 5321 length limits.
const EMAIL_RE = /^[^\s@"(),:;<>[\\\]]+@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63}$/;

export function isValidEmail(v: string): boolean {
  if (v.length > 254) return false;
  const at = v.lastIndexOf('@');
  if (at < 1 || at > 64) return false;
  const local = v.slice(0, at);
  if (local.startsWith('.') || local.endsWith('.') || local.includes('..')) return false;
  return EMAIL_RE.test(v);
}

export function normEmail(v: string, field = 'emailAddress'): string {
  const s = v.trim();
  if (!s) throw invalidRequest(`${field}: must not be empty`);
  if (!isValidEmail(s)) throw invalidRequest(`${field}: not a valid e-mail address (expected name@domain.tld)`);
  return s;
}

/** The lower-cased key e-mail uniqueness is checked on (accounts.email_key). */
export const emailKey = (email: string) => email.trim().toLowerCase();

/**
 * Phone numbers: international format starting with + or 00. Spaces, dashes, dots and
 * parentheses are ignored; stored as "+" followed by 8 to 15 digits (00 becomes +).
 * Returns null when the value is not acceptable.
 */
export function parsePhone(v: string): string | null {
  const s = v.trim().replace(/[\s\-.()/]/g, '');
  const m = /^(?:\+|00)(\d+)$/.exec(s);
  if (!m) return null;
  const digits = m[1]!;
  if (digits.length < 8 || digits.length > 15 || digits.startsWith('0')) return null;
  return '+' + digits;
}

export function normPhone(v: string, field = 'phoneNumber'): string {
  const p = parsePhone(v);
  if (!p) throw invalidRequest(`${field}: must be in international format starting with + or 00 followed by 8 to 15 digits (e.g. +31612345678)`);
  return p;
}

/** Language codes like nl, en, nl-NL, en-GB: normalised to lower-case language, upper-case region. */
export function parseLanguage(v: string): string | null {
  const m = /^([A-Za-z]{2,3})(?:[-_]([A-Za-z]{2}))?$/.exec(v.trim());
  if (!m) return null;
  return m[2] ? `${m[1]!.toLowerCase()}-${m[2].toUpperCase()}` : m[1]!.toLowerCase();
}

export function normLanguage(v: string, field = 'languageCode'): string {
  const l = parseLanguage(v);
  if (!l) throw invalidRequest(`${field}: must be a language code such as nl, en, nl-NL or en-GB`);
  return l;
}

export function normCountry(v: string, field = 'countryCode'): string {
  const c = v.trim().toUpperCase();
  if (!ISO_3166_ALPHA2.has(c)) throw invalidRequest(`${field}: must be an ISO 3166-1 alpha-2 country code such as NL or BE`);
  return c;
}

/** Required non-empty text, trimmed, at most max characters. */
export function normText(v: string, field: string, max = 100, allowEmpty = false): string {
  const s = v.trim();
  if (!s && !allowEmpty) throw invalidRequest(`${field}: must not be empty`);
  if (s.length > max) throw invalidRequest(`${field}: at most ${max} characters`);
  return s;
}

export function normUserName(v: string, field = 'userName'): string {
  const s = v.trim();
  if (!s) throw invalidRequest(`${field}: must not be empty`);
  if (s.length > 254) throw invalidRequest(`${field}: at most 254 characters`);
  if (/\s/.test(s)) throw invalidRequest(`${field}: must not contain spaces`);
  return s;
}

/** Uids: generated ones are 32 hex characters; provisioned ones letters, digits, _ or -, at most 64. */
export const isUid = (v: unknown): v is string => typeof v === 'string' && /^[A-Za-z0-9_-]{1,64}$/.test(v);
