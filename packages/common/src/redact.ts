// Log redaction shared by the central service and the terminal agent: secrets and personal data
// (GDPR) never reach a log line, at whatever depth of a logged object they sit.
//
// pino's built-in `redact` (fast-redact) matches fixed paths; `*` covers one level, so reaching
// three levels down takes four paths per key, and with ~40 keys that costs ~300 us per log line
// (measured: ~4 us without redaction, ~20-35 us with the 35 one-level paths this replaced). This
// walker visits the logged object once, compares each key against a Set, and copies only the
// objects on the way to a redacted value (the caller's object is never changed): a few
// microseconds per line, any depth up to MAX_DEPTH, key names matched case-insensitively
// (child logger bindings: top-level keys as written or in lower case, see pinoRedaction).

/** Credentials, tokens, keys, and access code values (PINs, Qr, LinkCode). */
export const SECRET_KEYS = [
  'password', 'passwd', 'secret', 'clientSecret', 'client_secret', 'terminalSecret', 'technicianPassword',
  'token', 'access_token', 'accessToken', 'refreshToken', 'authKey', 'apiKey', 'x-api-key', 'authorization', 'cookie',
  'pin', 'pinCode', 'qr', 'qrCode', 'linkCode', 'accessCode', 'credential',
] as const;

/** Personal data: names, contact details, addresses, mail codes. */
export const PERSONAL_KEYS = [
  'emailAddress', 'email', 'phoneNumber', 'phone', 'firstName', 'lastName', 'fullName', 'userName',
  'mailCode', 'mailCodeFirstName', 'mailCodeLastName',
  'street', 'streetName', 'streetNo', 'mailbox', 'city', 'address', 'deliveryAddress', 'locationAddress', 'fromAddress', 'toAddress',
] as const;

/**
 * Redacted only at the top of a logged object: `code` there is an access code value, while inside
 * `err` it is an error code an operator needs (log error codes as `errorCode`).
 */
export const TOP_LEVEL_ONLY_KEYS = ['code'] as const;

export const CENSOR = '[redacted]';
export const MAX_DEPTH = 6;

type Obj = Record<string, unknown>;

function isWalkable(v: unknown): v is Obj | unknown[] {
  if (v === null || typeof v !== 'object') return false;
  if (Array.isArray(v)) return true;
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null || v instanceof Error;
}

export interface Redactor {
  (obj: Obj): Obj;
}

/** A function returning `obj` itself when nothing in it is sensitive, else a redacted copy. */
export function createRedactor(keys: readonly string[] = [...SECRET_KEYS, ...PERSONAL_KEYS], topLevelOnly: readonly string[] = TOP_LEVEL_ONLY_KEYS): Redactor {
  const deep = new Set(keys.map((k) => k.toLowerCase()));
  const top = new Set([...deep, ...topLevelOnly.map((k) => k.toLowerCase())]);

  const walk = (v: unknown, depth: number, set: Set<string>, seen: Set<object>): unknown => {
    if (!isWalkable(v) || depth > MAX_DEPTH) return v;
    // an object met again on its own path: pino would print it again, secrets and all
    if (seen.has(v)) return '[Circular]';
    seen.add(v);
    try {
      if (Array.isArray(v)) {
        let out: unknown[] | undefined;
        for (let i = 0; i < v.length; i++) {
          const r = walk(v[i], depth + 1, deep, seen);
          if (r !== v[i]) (out ??= v.slice())[i] = r;
        }
        return out ?? v;
      }
      let out: Obj | undefined;
      const src = v as Obj;
      for (const k of Object.keys(src)) {
        const val = src[k];
        const r = set.has(k.toLowerCase()) ? (val === undefined || val === null ? val : CENSOR) : walk(val, depth + 1, deep, seen);
        if (r !== val) {
          // an Error stays an Error (same prototype, message and stack) for pino's err serializer
          out ??= src instanceof Error ? Object.defineProperties(Object.create(Object.getPrototypeOf(src)), Object.getOwnPropertyDescriptors(src)) : { ...src };
          out![k] = r;
        }
      }
      return out ?? v;
    } finally {
      seen.delete(v);
    }
  };

  return (obj: Obj) => walk(obj, 0, top, new Set()) as Obj;
}

/** A key as a fast-redact path (keys that are not identifiers are bracketed). */
const asPath = (k: string) => (/^[A-Za-z_$][\w$]*$/.test(k) ? k : `["${k}"]`);

/**
 * pino options: every logged object goes through the walker (formatters.log). The bindings of child
 * loggers do not pass through formatters (pino resets the bindings formatter for children), so
 * the same keys are also redacted at the top level by pino's own `redact`, which covers bindings;
 * with top-level paths only that costs about nothing. `pino({ ...pinoRedaction(), level })`.
 */
export function pinoRedaction(
  keys: readonly string[] = [...SECRET_KEYS, ...PERSONAL_KEYS],
  topLevelOnly: readonly string[] = TOP_LEVEL_ONLY_KEYS,
): { formatters: { log: (o: Obj) => Obj }; redact: { paths: string[]; censor: string } } {
  return {
    formatters: { log: createRedactor(keys, topLevelOnly) },
    redact: { paths: [...new Set([...keys, ...topLevelOnly].flatMap((k) => [k, k.toLowerCase()]))].map(asPath), censor: CENSOR },
  };
}

// --- URLs, paths and query strings ------------------------------------------------------------
//
// A request path is chosen by the client: a mistyped URL can carry an e-mail address
// (/v1/Account/someone%40example.com), a PIN or a token. redactUrl keeps what an operator needs
// (the scheme and host of an absolute URL, the route's words, the query's keys) and replaces:
// - every query value (whatever it holds), and a query key that looks like data (rules below);
// - the user:password@ part of an absolute URL;
// - a path segment that, percent-decoded, holds an `@` (e-mail-like), white space, punctuation or
//   non-ASCII letters (free text such as "Anna de Vries"), a run of 4 or more digits (PINs, phone
//   numbers, codes), or is token-like: 16 or more token characters mixing letters and digits, or
//   holding `-` or `_` (and no dot: a file name), or letters only and not a word of the service's
//   routes (registerRouteWords), or 40 or more token characters of any kind. A single
//   plain word (a bare first name) cannot be told from a route word and stays.

const DIGIT_RUN = /\d{4,}/;
const TOKEN_CHARS = /^[A-Za-z0-9_\-.~+/=:]+$/;
/** letters-only path segments of 16 or more characters that are the service's own route words */
const routeWords = new Set<string>();

/**
 * The service's own routes (their paths): their letters-only segments of 16 or more characters
 * (GetPickUpPointAvailability) stay readable in logged paths; any other such segment is redacted.
 */
export function registerRouteWords(paths: Iterable<string>): void {
  for (const p of paths) for (const seg of p.split('/')) if (seg.length >= 16 && /^[A-Za-z]+$/.test(seg)) routeWords.add(seg);
}

/** Does one percent-decoded path segment or query key look like personal data or a code? */
export function isSensitiveSegment(segment: string): boolean {
  let s = segment;
  try {
    s = decodeURIComponent(segment.replace(/\+/g, ' '));
  } catch {
    // malformed percent-encoding: judge the raw text
  }
  if (s.includes('@') || /%40/i.test(segment)) return true;
  // white space, punctuation, non-ASCII: free text such as a name ("Anna de Vries"), never a route word
  if (/[^A-Za-z0-9._~+/=:-]/.test(s)) return true;
  if (DIGIT_RUN.test(s)) return true;
  if (TOKEN_CHARS.test(s)) {
    if (s.length >= 40) return true;
    if (s.length >= 16 && /\d/.test(s) && /[A-Za-z]/.test(s)) return true;
    // a random token without a digit (a QR value of 24 base64url characters has none about once in
    // 60): `-` or `_` without a file name's dot, or letters only, unless they are a word of the
    // service's own routes (registerRouteWords): no rule on the letters tells a random string from
    // a CamelCase route name for certain
    if (s.length >= 16 && /[-_]/.test(s) && !s.includes('.')) return true;
    if (s.length >= 16 && /^[A-Za-z]+$/.test(s) && !routeWords.has(s)) return true;
  }
  return false;
}

const redactPath = (p: string) =>
  p
    .split('/')
    .map((seg) => (seg && isSensitiveSegment(seg) ? CENSOR : seg))
    .join('/');

const redactQuery = (q: string) =>
  q
    .split('&')
    .map((pair) => {
      if (!pair) return pair;
      const eq = pair.indexOf('=');
      const key = eq < 0 ? pair : pair.slice(0, eq);
      const k = isSensitiveSegment(key) ? CENSOR : key;
      return eq < 0 ? k : `${k}=${pair.length > eq + 1 ? CENSOR : ''}`;
    })
    .join('&');

/**
 * A URL, path or path with query string as it may be logged: see the rules above. Anything not a
 * string comes back as is.
 */
export function redactUrl<T>(url: T): T | string {
  if (typeof url !== 'string') return url;
  let rest: string = url;
  let prefix = '';
  const abs = /^([A-Za-z][A-Za-z0-9+.-]*:\/\/)([^/?#]*)/.exec(rest);
  if (abs) {
    const authority = abs[2]!;
    const at = authority.lastIndexOf('@');
    prefix = abs[1]! + (at >= 0 ? `${CENSOR}@${authority.slice(at + 1)}` : authority);
    rest = rest.slice(abs[0].length);
  }
  const hash = rest.indexOf('#');
  if (hash >= 0) rest = rest.slice(0, hash); // a fragment never reaches a server; drop it if logged
  const qm = rest.indexOf('?');
  const pathPart = qm < 0 ? rest : rest.slice(0, qm);
  const query = qm < 0 ? null : rest.slice(qm + 1);
  return prefix + redactPath(pathPart) + (query === null ? '' : `?${redactQuery(query)}`);
}
