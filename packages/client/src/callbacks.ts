// The receiving side of status callbacks (docs/callbacks.md): checks that a ShipmentStatusUpdate
// came from the service and was not changed or replayed. The service signs every callback of the
// HMAC and ApiKey modes with
//   X-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(authKey, t + "." + raw body)>
// (packages/central/src/callbacks/signing.ts). verifyCallback recomputes it over the raw body
// bytes as received, compares in constant time, refuses a timestamp further than
// `toleranceSeconds` from the receiver's clock, and checks X-Hmac-Sha256 (HMAC mode: over the
// shipment uid) and X-Api-Key (ApiKey mode) when they are present. Deduplicate by `eventId`
// yourself: a message may arrive more than once, with a new timestamp each attempt.
import crypto from 'node:crypto';

/** The JSON body of a status callback. */
export interface ShipmentStatusUpdate {
  messageType: 'ShipmentStatusUpdate';
  message: {
    shipmentUid: string;
    stateCode: 'ReadyForDropoff' | 'LockerAssigned' | 'WaitForReceiver' | 'ReadyForPickup' | 'PickedUp' | 'Cancelled' | 'Expired' | (string & {});
    /** ISO 8601 without a zone, UTC */
    stateStart: string;
    shipmentType: string;
    referenceNo: string | null;
    referenceCaseNo: string | null;
    description: string | null;
    pupUid: string | null;
    fromUserUid: string | null;
    toUserUid: string | null;
    /** the same on every delivery attempt of one message: drop duplicates by it */
    eventId: string;
    /** 1, 2, 3, ... per shipment in the order its state changed */
    sequence: number;
  };
}

/** Node's IncomingHttpHeaders, a fetch Headers, or any record of header names (any letter case). */
export type CallbackHeaders = Headers | Record<string, string | string[] | undefined>;

export interface VerifyCallbackInput {
  headers: CallbackHeaders;
  /** the request body exactly as received, before any JSON parsing */
  rawBody: string | Uint8Array;
  /** the authKey ConfigureCallback returned */
  authKey: string;
  /** the largest accepted difference between `t` and the receiver's clock (default 300 s) */
  toleranceSeconds?: number;
  /** the receiver's clock in ms (default Date.now) */
  now?: () => number;
}

export type CallbackRejection = 'missing-signature' | 'malformed-signature' | 'stale-timestamp' | 'bad-signature' | 'bad-hmac-header' | 'bad-api-key' | 'malformed-body';

export type VerifyCallbackResult = { ok: true; body: ShipmentStatusUpdate; timestamp: number } | { ok: false; reason: CallbackRejection };

function header(headers: CallbackHeaders, name: string): string | undefined {
  if (headers instanceof Headers) return headers.get(name) ?? undefined;
  const key = Object.keys(headers).find((k) => k.toLowerCase() === name);
  const v = key === undefined ? undefined : headers[key];
  return Array.isArray(v) ? v[0] : v;
}

/** Constant-time equality of two hex digests (lengths are public: a digest's length is fixed). */
function sameHex(given: string, expected: string): boolean {
  const a = Buffer.from(given, 'utf8');
  const b = Buffer.from(expected, 'utf8');
  return a.length === b.length && crypto.timingSafeEqual(a, b);
}

/** Constant-time equality of two secrets of possibly different lengths (compares their digests). */
function sameSecret(given: string, expected: string): boolean {
  const h = (s: string) => crypto.createHash('sha256').update(s, 'utf8').digest();
  return crypto.timingSafeEqual(h(given), h(expected));
}

const hmac = (key: string, data: Buffer | string) => crypto.createHmac('sha256', Buffer.from(key, 'utf8')).update(data).digest('hex');

/** Checks one callback request; see the top of this file. Never throws for bad input. */
export function verifyCallback(input: VerifyCallbackInput): VerifyCallbackResult {
  const tolerance = input.toleranceSeconds ?? 300;
  const raw = typeof input.rawBody === 'string' ? Buffer.from(input.rawBody, 'utf8') : Buffer.from(input.rawBody.buffer, input.rawBody.byteOffset, input.rawBody.byteLength);
  const sig = header(input.headers, 'x-signature');
  if (!sig) return { ok: false, reason: 'missing-signature' };
  let t: string | undefined;
  const v1: string[] = [];
  for (const part of sig.split(',')) {
    const i = part.indexOf('=');
    if (i < 0) continue;
    const k = part.slice(0, i).trim();
    const v = part.slice(i + 1).trim();
    if (k === 't') t = v;
    else if (k === 'v1') v1.push(v);
  }
  if (t === undefined || !/^\d{1,12}$/.test(t) || !v1.length) return { ok: false, reason: 'malformed-signature' };
  const timestamp = Number(t);
  const nowSeconds = (input.now ?? Date.now)() / 1000;
  if (Math.abs(nowSeconds - timestamp) > tolerance) return { ok: false, reason: 'stale-timestamp' };
  const expected = hmac(input.authKey, Buffer.concat([Buffer.from(`${t}.`, 'utf8'), raw]));
  // every v1 is compared (no early exit on the first match)
  let matched = false;
  for (const v of v1) matched = sameHex(v.toLowerCase(), expected) || matched;
  if (!matched) return { ok: false, reason: 'bad-signature' };
  let body: ShipmentStatusUpdate;
  try {
    body = JSON.parse(raw.toString('utf8')) as ShipmentStatusUpdate;
  } catch {
    return { ok: false, reason: 'malformed-body' };
  }
  if (!body || typeof body !== 'object' || !body.message || typeof body.message.shipmentUid !== 'string') return { ok: false, reason: 'malformed-body' };
  // the API document's own headers, checked when sent (the signature above already covers the body)
  const legacy = header(input.headers, 'x-hmac-sha256');
  if (legacy !== undefined && !sameHex(legacy.toLowerCase(), hmac(input.authKey, body.message.shipmentUid))) return { ok: false, reason: 'bad-hmac-header' };
  const apiKey = header(input.headers, 'x-api-key');
  if (apiKey !== undefined && !sameSecret(apiKey, input.authKey)) return { ok: false, reason: 'bad-api-key' };
  return { ok: true, body, timestamp };
}
