// How the agent retries its broker (docs/agent.md, "The MQTT link"): every failed connection
// attempt (a refused CONNACK of any code, no CONNACK within mqtt.connectTimeoutMs, a socket error)
// is retried after a delay drawn with full jitter from [initialMs, ceiling), where the ceiling
// doubles with each consecutive failure up to maxMs. The delay is never below initialMs (no busy
// loop), never above maxMs, and the jitter spreads a fleet of terminals that lost the same broker
// (a reconnect storm is what makes a broker throttle logins). The failure count is reset by a
// connection that stayed up for a while (EdgeLink). Pure: the random source is injected.

export interface BackoffOptions {
  /** the smallest delay (mqtt.reconnectMs) */
  initialMs: number;
  /** the largest delay (mqtt.reconnectMaxMs; taken as at least initialMs) */
  maxMs: number;
}

/** A delay is never shorter than this, whatever mqtt.reconnectMs says. */
export const MIN_RETRY_MS = 50;

/** The upper bound of the delay after `failures` consecutive failed attempts (1 = the first). */
export function backoffCeiling(failures: number, o: BackoffOptions): number {
  const floor = Math.max(MIN_RETRY_MS, o.initialMs);
  const max = Math.max(floor, o.maxMs);
  const n = Math.min(Math.max(1, failures), 32); // 2^32 * anything is past any max
  return Math.min(max, floor * 2 ** n);
}

/**
 * The delay before the next attempt after `failures` consecutive failed attempts: uniform in
 * [initialMs, backoffCeiling(failures)). `random` returns a number in [0, 1) (Math.random).
 */
export function backoffDelay(failures: number, o: BackoffOptions, random: () => number = Math.random): number {
  const floor = Math.max(MIN_RETRY_MS, o.initialMs);
  const ceiling = backoffCeiling(failures, o);
  const r = Math.min(Math.max(random(), 0), 1);
  return Math.min(ceiling, Math.round(floor + r * (ceiling - floor)));
}

/** MQTT 3.1.1 CONNACK return codes and the MQTT 5 CONNACK reason codes, by name. */
const CONNACK_NAMES: Record<number, string> = {
  1: 'UNACCEPTABLE_PROTOCOL_VERSION',
  2: 'IDENTIFIER_REJECTED',
  3: 'SERVER_UNAVAILABLE',
  4: 'BAD_USERNAME_OR_PASSWORD',
  5: 'NOT_AUTHORIZED',
  128: 'UNSPECIFIED_ERROR',
  129: 'MALFORMED_PACKET',
  130: 'PROTOCOL_ERROR',
  131: 'IMPLEMENTATION_SPECIFIC_ERROR',
  132: 'UNSUPPORTED_PROTOCOL_VERSION',
  133: 'CLIENT_IDENTIFIER_NOT_VALID',
  134: 'BAD_USERNAME_OR_PASSWORD',
  135: 'NOT_AUTHORIZED',
  136: 'SERVER_UNAVAILABLE',
  137: 'SERVER_BUSY',
  138: 'BANNED',
  140: 'BAD_AUTHENTICATION_METHOD',
  144: 'TOPIC_NAME_INVALID',
  149: 'PACKET_TOO_LARGE',
  151: 'QUOTA_EXCEEDED',
  153: 'PAYLOAD_FORMAT_INVALID',
  154: 'RETAIN_NOT_SUPPORTED',
  155: 'QOS_NOT_SUPPORTED',
  156: 'USE_ANOTHER_SERVER',
  157: 'SERVER_MOVED',
  159: 'CONNECTION_RATE_EXCEEDED',
};

/** Why an attempt failed, as the link state shows it (never the secret). */
export interface Refusal {
  /** e.g. NOT_AUTHORIZED, SERVER_UNAVAILABLE (CONNACK), CONNECT_TIMEOUT, ECONNREFUSED, CLOSED */
  reason: string;
  /** the CONNACK code, the socket error code, or null */
  code: number | string | null;
  message: string;
  at: string;
}

/**
 * Names the error mqtt.js reported for a failed attempt: a refused CONNACK carries its numeric
 * code, a socket error its errno name; a CONNECT not answered in time has only its message.
 * `secret` is cut out of the message should it ever appear there.
 */
export function describeFailure(err: Error | null, at: Date, secret?: string): Refusal {
  const clean = (s: string) => (secret && secret.length >= 4 ? s.split(secret).join('[redacted]') : s);
  if (!err) return { reason: 'CLOSED', code: null, message: 'the connection closed before the broker answered', at: at.toISOString() };
  const code = (err as { code?: unknown }).code;
  const message = clean(err.message).slice(0, 300);
  if (typeof code === 'number') return { reason: CONNACK_NAMES[code] ?? `CONNACK_${code}`, code, message, at: at.toISOString() };
  if (typeof code === 'string' && code) return { reason: code.toUpperCase(), code, message, at: at.toISOString() };
  if (/connack timeout/i.test(err.message)) return { reason: 'CONNECT_TIMEOUT', code: null, message, at: at.toISOString() };
  return { reason: 'ERROR', code: null, message, at: at.toISOString() };
}
