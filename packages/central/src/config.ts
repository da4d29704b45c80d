// One configuration schema for the central service: defaults here, a file (JSON or YAML) over
// them, environment variables over the file. A bad setting fails fast with a message that names
// the key (file path or environment variable).
import fs from 'node:fs';
import path from 'node:path';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';

export const ConfigSchema = z
  .object({
    environment: z.enum(['production', 'staging']).default('production'),
    http: z
      .object({
        host: z.string().min(1).default('127.0.0.1'),
        port: z.coerce.number().int().min(0).max(65535).default(8080),
        bodyLimitBytes: z.coerce.number().int().positive().default(1_048_576),
        uploadLimitBytes: z.coerce.number().int().positive().default(5 * 1_048_576),
        // requests per minute per tenant (calls with a valid bearer token), per instance; 0: off
        rateLimitPerMinute: z.coerce.number().int().min(0).default(1200),
        // requests per minute per client address without a valid token (/connect/token, /health,
        // /docs), per instance; 0: off
        unauthenticatedRateLimitPerMinute: z.coerce.number().int().min(0).default(300),
        // Trust X-Forwarded-For / X-Forwarded-Proto (the client address of rate limiting and
        // logs). Only behind a reverse proxy that sets them; otherwise any client could spoof them.
        trustProxy: z.boolean().default(false),
        // A request (headers and body) must arrive completely within this many milliseconds, else
        // it is answered 408 and the connection closed (0 disables it: a client that sends headers
        // and never finishes its body would hold the connection forever).
        requestTimeoutMs: z.coerce.number().int().min(0).default(30_000),
        publicBaseUrl: z.string().url().optional(),
      })
      .strict()
      .prefault({}),
    database: z
      .object({
        // A file path (SQLite, the embedded default) or a postgres:// URL (scale-out).
        url: z.string().min(1).default('./data/locker.db'),
        // SQLite durability: FULL survives a power cut; NORMAL is faster but may lose the last
        // commits on power loss (never corrupts). Set explicitly on every open.
        sqliteSynchronous: z.enum(['FULL', 'NORMAL', 'EXTRA']).default('FULL'),
        // SQLite WAL checkpoints: 'background' in a thread of their own, between two write
        // transactions (db/checkpointer.ts); 'commit' inside the COMMIT that fills the WAL, on the
        // event loop (SQLite's automatic checkpoint)
        sqliteCheckpoints: z.enum(['background', 'commit']).default('background'),
        // SQLite in a file: threads that run reads (a GetShipments page and its total, searches,
        // the tenant API's quick reads per turn of the event loop) on read-only connections of
        // their own, off the event loop (db/read-pool.ts); 0: every read on the main connection
        sqliteReadThreads: z.coerce.number().int().min(0).max(16).default(1),
        poolSize: z.coerce.number().int().min(1).max(100).default(10),
        // PostgreSQL: the booking's hot statements as named prepared statements (parsed once per
        // connection). Turn off behind a pooler in transaction mode that cannot carry them
        // (PgBouncer before 1.21, or without max_prepared_statements).
        pgPreparedStatements: z.boolean().default(true),
        // PostgreSQL: connections (besides the pool) on which the small fixed reads of the API and
        // the edge sync are pipelined, each turn of the event loop's reads in one write
        // (db/pg-pipeline.ts); 0: every read takes a pooled connection. Set 0 behind a pooler
        // that cannot carry pipelined statements. Unset: 2, or 0 with pgPreparedStatements false
        // (that setting says a transaction-mode pooler is in between).
        pgReadPipelines: z.coerce.number().int().min(0).max(32).optional(),
      })
      .strict()
      .prefault({}),
    auth: z
      .object({
        tokenLifetimeSeconds: z.coerce.number().int().min(1).default(3600),
        // HMAC key for access tokens; generated and stored in the database when absent, so
        // several central instances sharing one database accept each other's tokens.
        tokenSigningKey: z.string().min(32).optional(),
        // client secret checks (scrypt, on the thread pool) running at once per instance, and how
        // many more may wait; beyond that /connect/token answers 503 at once, without scrypt
        verifyConcurrency: z.coerce.number().int().min(1).max(64).default(2),
        verifyQueueLimit: z.coerce.number().int().min(0).default(16),
        // a client secret that verified is accepted again without scrypt for this long (0: never)
        verifiedSecretCacheSeconds: z.coerce.number().int().min(0).max(3600).default(60),
      })
      .strict()
      .prefault({}),
    log: z
      .object({
        level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
        pretty: z.boolean().default(false),
      })
      .strict()
      .prefault({}),
    shipments: z
      .object({
        // A booking not dropped off within this many hours expires and releases its locker.
        dropOffDeadlineHours: z.coerce.number().positive().default(72),
        expirySweepSeconds: z.coerce.number().positive().default(60),
      })
      .strict()
      .prefault({}),
    callbacks: z
      .object({
        enabled: z.boolean().default(true),
        initialBackoffMs: z.coerce.number().int().positive().default(1000),
        maxBackoffMs: z.coerce.number().int().positive().default(15 * 60_000),
        requestTimeoutMs: z.coerce.number().int().positive().default(10_000),
        pollIntervalMs: z.coerce.number().int().positive().default(500),
        // delivered and skipped messages are deleted after this many days (0 keeps them forever)
        retentionDays: z.coerce.number().min(0).default(7),
        // messages delivered at the same time (each to a different shipment) per central instance
        concurrency: z.coerce.number().int().min(1).max(256).default(8),
        // callback URLs may point to loopback, RFC 1918, CGNAT and unique-local addresses (on-premises
        // receivers); link-local, cloud metadata and other special addresses stay refused (docs/callbacks.md)
        allowPrivateNetworks: z.boolean().default(false),
      })
      .strict()
      .prefault({}),
    idempotency: z
      .object({
        // how long an Idempotency-Key and its stored answer are kept
        ttlHours: z.coerce.number().positive().default(24),
        // a repeat that arrives while the first request still runs waits this long, then 400 IdempotencyKeyInProgress
        waitMs: z.coerce.number().int().min(0).default(5_000),
        // a reservation whose request never finished (process died) can be taken over after this
        lockSeconds: z.coerce.number().int().positive().default(60),
      })
      .strict()
      .prefault({}),
    edge: z
      .object({
        // how often the code-change marker is polled (a change is pushed to terminals as a delta)
        pollMs: z.coerce.number().int().positive().default(1000),
        // a full diff of every online terminal's codes, whatever the marker says
        reconcileSeconds: z.coerce.number().positive().default(60),
        // how long a remote unlock waits for the terminal's ack
        commandTimeoutMs: z.coerce.number().int().positive().default(10_000),
        // unprocessed terminal events (a transient failure) are retried this often
        retrySeconds: z.coerce.number().positive().default(10),
        // a terminal's event that arrives before an earlier one is held (stored, not applied) until
        // the gap is filled; after this long the terminal is asked to send again from the gap
        gapResendSeconds: z.coerce.number().positive().default(5),
        // ... and after this long the missing events are given up on (logged as an error) and the
        // held ones are applied: a journal that lost an event must not hold its terminal forever
        gapGiveUpSeconds: z.coerce.number().positive().default(900),
        // events of a journal other than the live one the terminal's status names wait this long
        // for a status naming theirs (a new store's first events can overtake it) before they are
        // applied late as a replaced store's (edge/ingest.ts)
        otherJournalWaitSeconds: z.coerce.number().positive().default(60),
        // a terminal whose clock is off by more than this (measured at each status) is flagged and
        // its event times are corrected by the measured offset (edge/clock.ts)
        maxClockSkewSeconds: z.coerce.number().positive().default(120),
        // the expiry sweep waits for a silent terminal (it may hold drop-offs made before a deadline)
        // at most this long after it was last heard from; match the agents' access.maxOfflineHours
        maxOfflineHours: z.coerce.number().positive().default(72),
        // a door/shipment disagreement about the item counts only once both sides have been still
        // this long (the terminal's next event may be in flight); docs/state-machine.md, "Disagreements"
        disagreementGraceSeconds: z.coerce.number().min(0).default(60),
        // how often disagreements are looked for (a new one is logged once)
        disagreementCheckSeconds: z.coerce.number().positive().default(15),
      })
      .strict()
      .prefault({}),
    suggestions: z
      .object({
        // UploadAccountSuggestions: the most data rows one file may hold (more is InvalidRequest)
        maxRows: z.coerce.number().int().positive().default(100_000),
        // an .xlsx (a ZIP container) may unpack to at most this many bytes (a ZIP bomb guard)
        maxUnpackedBytes: z.coerce.number().int().positive().default(64 * 1_048_576),
        // an .xlsx part that unpacks to more than 1 MiB may be compressed at most this much
        maxCompressionRatio: z.coerce.number().positive().default(200),
        // the response lists at most this many rejected rows in errorLogs (errorCount stays exact)
        maxErrorLogs: z.coerce.number().int().min(0).default(1000),
        // a workbook (.xlsx, .xls) is read in a worker thread; one that takes longer is InvalidRequest
        parseTimeoutMs: z.coerce.number().int().positive().default(10_000),
      })
      .strict()
      .prefault({}),
    // Brute-force throttling (docs/api.md, "Throttling and limits"); a max of 0 turns that one off.
    throttle: z
      .object({
        // /connect/token, in memory per instance: failed secrets per client id from one address,
        // and per address across client ids, within the window; then a block that doubles each time
        tokenMaxFailuresPerClient: z.coerce.number().int().min(0).default(5),
        tokenMaxFailuresPerAddress: z.coerce.number().int().min(0).default(20),
        tokenFailureWindowSeconds: z.coerce.number().int().positive().default(900),
        tokenBlockSeconds: z.coerce.number().int().positive().default(60),
        tokenMaxBlockSeconds: z.coerce.number().int().positive().default(3600),
        // wrong PINs of UnlockShipmentLocker and SimulateLockerAccess (in the database: shared by
        // all instances), per tenant and locker, per tenant and pick up point, per tenant
        pinMaxFailuresPerLocker: z.coerce.number().int().min(0).default(10),
        pinMaxFailuresPerPup: z.coerce.number().int().min(0).default(30),
        pinMaxFailuresPerTenant: z.coerce.number().int().min(0).default(100),
        pinFailureWindowSeconds: z.coerce.number().int().positive().default(900),
      })
      .strict()
      .prefault({}),
    metrics: z
      .object({
        // the operator metrics endpoint (Prometheus text format, GET /metrics) on a listener of its
        // own, never the tenant API's port; off by default
        enabled: z.boolean().default(false),
        host: z.string().min(1).default('127.0.0.1'),
        port: z.coerce.number().int().min(0).max(65535).default(9464),
      })
      .strict()
      .prefault({}),
    mqtt: z
      .object({
        // embedded: an aedes broker inside the central service; external: connect to url.
        mode: z.enum(['embedded', 'external', 'off']).default('embedded'),
        url: z.string().default('mqtt://127.0.0.1:1883'),
        port: z.coerce.number().int().min(0).max(65535).default(1883),
        host: z.string().default('0.0.0.0'),
        // credentials of the central service at an external broker; each central instance needs
        // a user name of its own (deploy/mosquitto.conf: the user name is the client id)
        username: z.string().optional(),
        // its MQTT client id at an external broker: stable across restarts (persistent session);
        // each central instance needs its own (default: the user name, else locker-central-<hostname>)
        clientId: z.string().min(1).max(128).optional(),
        password: z.string().optional(),
        // external broker: take the terminals' events (and status, sync requests) through an MQTT 5
        // shared subscription of this group ($share/<group>/...): the broker splits them among the
        // instances instead of giving each instance every one (order is kept per terminal by seq)
        sharedGroup: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/).optional(),
        // embedded broker: the largest MQTT packet a terminal may send (a PUBLISH's topic and
        // payload); a larger one drops the connection (code snapshots to terminals are not limited)
        maxMessageBytes: z.coerce.number().int().min(1024).default(256 * 1024),
        // embedded broker: distinct topic filters one terminal connection may subscribe to
        maxSubscriptions: z.coerce.number().int().min(1).default(16),
        // embedded broker: descriptors of its listening socket; a turn of the event loop accepts at
        // most one connection per descriptor (mqtt/acceptors.ts); 1: the socket's own only
        acceptors: z.coerce.number().int().min(1).max(64).default(32),
        // embedded broker: terminal secret checks (scrypt) running at once; a login beyond them is
        // refused at once with CONNACK 3 (server unavailable) and retried by the terminal
        maxPendingLogins: z.coerce.number().int().min(1).default(4),
        // embedded broker: a verified terminal login is remembered this long (no scrypt on a
        // reconnect with the same secret while the stored hash is unchanged); 0: never
        loginCacheSeconds: z.coerce.number().int().min(0).default(43_200),
        // embedded broker and provisioning: the key of the fast digests of high-entropy terminal
        // secrets (HMAC-SHA256 next to the scrypt hash; docs/edge-protocol.md "Connection"). Kept
        // out of the database. Absent: derived from auth.tokenSigningKey when that is configured,
        // else none (every terminal login uses scrypt)
        terminalSecretPepper: z.string().min(32).optional(),
      })
      .strict()
      .prefault({}),
  })
  .strict();

export type Config = z.infer<typeof ConfigSchema>;
export type ConfigInput = z.input<typeof ConfigSchema>;

export class ConfigError extends Error {
  readonly code = 'CONFIG_INVALID';
}

/** Environment variables that override the file: LOCKER_<SECTION>_<KEY> (upper snake case). */
/**
 * LOCKER_* variables that are not settings of the schema but are read elsewhere: the config file's
 * path, test and profiling switches (docs/configuration.md, "Other variables").
 */
const NOT_CONFIG_ENV = new Set([
  'LOCKER_CONFIG',
  'LOCKER_REQUIRE_SERVICES',
  'LOCKER_CLI_MAIN',
  'LOCKER_SQLITE_WAL_AUTOCHECKPOINT',
  'LOCKER_SQL_TIMES',
  'LOCKER_DEMO_DATA_DIR',
  'LOCKER_SIM_SOCAT',
]);

export const ENV_MAP: Record<string, [string, string] | [string]> = {
  LOCKER_ENVIRONMENT: ['environment'],
  LOCKER_HTTP_HOST: ['http', 'host'],
  LOCKER_HTTP_PORT: ['http', 'port'],
  LOCKER_HTTP_BODY_LIMIT_BYTES: ['http', 'bodyLimitBytes'],
  LOCKER_HTTP_UPLOAD_LIMIT_BYTES: ['http', 'uploadLimitBytes'],
  LOCKER_HTTP_RATE_LIMIT_PER_MINUTE: ['http', 'rateLimitPerMinute'],
  LOCKER_HTTP_UNAUTHENTICATED_RATE_LIMIT_PER_MINUTE: ['http', 'unauthenticatedRateLimitPerMinute'],
  LOCKER_HTTP_TRUST_PROXY: ['http', 'trustProxy'],
  LOCKER_HTTP_REQUEST_TIMEOUT_MS: ['http', 'requestTimeoutMs'],
  LOCKER_HTTP_PUBLIC_BASE_URL: ['http', 'publicBaseUrl'],
  LOCKER_DATABASE_URL: ['database', 'url'],
  LOCKER_DATABASE_SQLITE_SYNCHRONOUS: ['database', 'sqliteSynchronous'],
  LOCKER_DATABASE_SQLITE_CHECKPOINTS: ['database', 'sqliteCheckpoints'],
  LOCKER_DATABASE_SQLITE_READ_THREADS: ['database', 'sqliteReadThreads'],
  LOCKER_DATABASE_POOL_SIZE: ['database', 'poolSize'],
  LOCKER_DATABASE_PG_PREPARED_STATEMENTS: ['database', 'pgPreparedStatements'],
  LOCKER_DATABASE_PG_READ_PIPELINES: ['database', 'pgReadPipelines'],
  LOCKER_AUTH_TOKEN_LIFETIME_SECONDS: ['auth', 'tokenLifetimeSeconds'],
  LOCKER_AUTH_TOKEN_SIGNING_KEY: ['auth', 'tokenSigningKey'],
  LOCKER_AUTH_VERIFY_CONCURRENCY: ['auth', 'verifyConcurrency'],
  LOCKER_AUTH_VERIFY_QUEUE_LIMIT: ['auth', 'verifyQueueLimit'],
  LOCKER_AUTH_VERIFIED_SECRET_CACHE_SECONDS: ['auth', 'verifiedSecretCacheSeconds'],
  LOCKER_THROTTLE_TOKEN_MAX_FAILURES_PER_CLIENT: ['throttle', 'tokenMaxFailuresPerClient'],
  LOCKER_THROTTLE_TOKEN_MAX_FAILURES_PER_ADDRESS: ['throttle', 'tokenMaxFailuresPerAddress'],
  LOCKER_THROTTLE_TOKEN_FAILURE_WINDOW_SECONDS: ['throttle', 'tokenFailureWindowSeconds'],
  LOCKER_THROTTLE_TOKEN_BLOCK_SECONDS: ['throttle', 'tokenBlockSeconds'],
  LOCKER_THROTTLE_TOKEN_MAX_BLOCK_SECONDS: ['throttle', 'tokenMaxBlockSeconds'],
  LOCKER_THROTTLE_PIN_MAX_FAILURES_PER_LOCKER: ['throttle', 'pinMaxFailuresPerLocker'],
  LOCKER_THROTTLE_PIN_MAX_FAILURES_PER_PUP: ['throttle', 'pinMaxFailuresPerPup'],
  LOCKER_THROTTLE_PIN_MAX_FAILURES_PER_TENANT: ['throttle', 'pinMaxFailuresPerTenant'],
  LOCKER_THROTTLE_PIN_FAILURE_WINDOW_SECONDS: ['throttle', 'pinFailureWindowSeconds'],
  LOCKER_LOG_LEVEL: ['log', 'level'],
  LOCKER_LOG_PRETTY: ['log', 'pretty'],
  LOCKER_SHIPMENTS_DROP_OFF_DEADLINE_HOURS: ['shipments', 'dropOffDeadlineHours'],
  LOCKER_SHIPMENTS_EXPIRY_SWEEP_SECONDS: ['shipments', 'expirySweepSeconds'],
  LOCKER_CALLBACKS_ENABLED: ['callbacks', 'enabled'],
  LOCKER_CALLBACKS_RETENTION_DAYS: ['callbacks', 'retentionDays'],
  LOCKER_CALLBACKS_INITIAL_BACKOFF_MS: ['callbacks', 'initialBackoffMs'],
  LOCKER_CALLBACKS_MAX_BACKOFF_MS: ['callbacks', 'maxBackoffMs'],
  LOCKER_CALLBACKS_REQUEST_TIMEOUT_MS: ['callbacks', 'requestTimeoutMs'],
  LOCKER_CALLBACKS_POLL_INTERVAL_MS: ['callbacks', 'pollIntervalMs'],
  LOCKER_CALLBACKS_CONCURRENCY: ['callbacks', 'concurrency'],
  LOCKER_CALLBACKS_ALLOW_PRIVATE_NETWORKS: ['callbacks', 'allowPrivateNetworks'],
  LOCKER_IDEMPOTENCY_TTL_HOURS: ['idempotency', 'ttlHours'],
  LOCKER_IDEMPOTENCY_WAIT_MS: ['idempotency', 'waitMs'],
  LOCKER_IDEMPOTENCY_LOCK_SECONDS: ['idempotency', 'lockSeconds'],
  LOCKER_EDGE_POLL_MS: ['edge', 'pollMs'],
  LOCKER_EDGE_RECONCILE_SECONDS: ['edge', 'reconcileSeconds'],
  LOCKER_EDGE_COMMAND_TIMEOUT_MS: ['edge', 'commandTimeoutMs'],
  LOCKER_EDGE_RETRY_SECONDS: ['edge', 'retrySeconds'],
  LOCKER_EDGE_GAP_RESEND_SECONDS: ['edge', 'gapResendSeconds'],
  LOCKER_EDGE_OTHER_JOURNAL_WAIT_SECONDS: ['edge', 'otherJournalWaitSeconds'],
  LOCKER_EDGE_GAP_GIVE_UP_SECONDS: ['edge', 'gapGiveUpSeconds'],
  LOCKER_EDGE_MAX_CLOCK_SKEW_SECONDS: ['edge', 'maxClockSkewSeconds'],
  LOCKER_EDGE_MAX_OFFLINE_HOURS: ['edge', 'maxOfflineHours'],
  LOCKER_EDGE_DISAGREEMENT_GRACE_SECONDS: ['edge', 'disagreementGraceSeconds'],
  LOCKER_EDGE_DISAGREEMENT_CHECK_SECONDS: ['edge', 'disagreementCheckSeconds'],
  LOCKER_METRICS_ENABLED: ['metrics', 'enabled'],
  LOCKER_METRICS_HOST: ['metrics', 'host'],
  LOCKER_METRICS_PORT: ['metrics', 'port'],
  LOCKER_SUGGESTIONS_MAX_ROWS: ['suggestions', 'maxRows'],
  LOCKER_SUGGESTIONS_MAX_UNPACKED_BYTES: ['suggestions', 'maxUnpackedBytes'],
  LOCKER_SUGGESTIONS_MAX_COMPRESSION_RATIO: ['suggestions', 'maxCompressionRatio'],
  LOCKER_SUGGESTIONS_MAX_ERROR_LOGS: ['suggestions', 'maxErrorLogs'],
  LOCKER_SUGGESTIONS_PARSE_TIMEOUT_MS: ['suggestions', 'parseTimeoutMs'],
  LOCKER_MQTT_MODE: ['mqtt', 'mode'],
  LOCKER_MQTT_URL: ['mqtt', 'url'],
  LOCKER_MQTT_PORT: ['mqtt', 'port'],
  LOCKER_MQTT_HOST: ['mqtt', 'host'],
  LOCKER_MQTT_USERNAME: ['mqtt', 'username'],
  LOCKER_MQTT_CLIENT_ID: ['mqtt', 'clientId'],
  LOCKER_MQTT_SHARED_GROUP: ['mqtt', 'sharedGroup'],
  LOCKER_MQTT_MAX_PENDING_LOGINS: ['mqtt', 'maxPendingLogins'],
  LOCKER_MQTT_LOGIN_CACHE_SECONDS: ['mqtt', 'loginCacheSeconds'],
  LOCKER_MQTT_TERMINAL_SECRET_PEPPER: ['mqtt', 'terminalSecretPepper'],
  LOCKER_MQTT_PASSWORD: ['mqtt', 'password'],
  LOCKER_MQTT_MAX_MESSAGE_BYTES: ['mqtt', 'maxMessageBytes'],
  LOCKER_MQTT_MAX_SUBSCRIPTIONS: ['mqtt', 'maxSubscriptions'],
  LOCKER_MQTT_ACCEPTORS: ['mqtt', 'acceptors'],
};

function readFile(file: string): Record<string, unknown> {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    throw new ConfigError(`cannot read config file ${file}: ${(e as Error).message}`);
  }
  try {
    const parsed = /\.ya?ml$/i.test(file) ? parseYaml(text) : JSON.parse(text);
    if (parsed == null) return {};
    if (typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('top level must be an object');
    return parsed as Record<string, unknown>;
  } catch (e) {
    throw new ConfigError(`config file ${file} is not valid ${/\.ya?ml$/i.test(file) ? 'YAML' : 'JSON'}: ${(e as Error).message}`);
  }
}

export interface LoadConfigOptions {
  file?: string;
  env?: NodeJS.ProcessEnv;
  overrides?: ConfigInput;
}

function merge(a: any, b: any): any {
  if (b === undefined) return a;
  if (a && b && typeof a === 'object' && typeof b === 'object' && !Array.isArray(a) && !Array.isArray(b)) {
    const out: any = { ...a };
    for (const [k, v] of Object.entries(b)) out[k] = merge(a[k], v);
    return out;
  }
  return b;
}

/** The innermost schema type of a setting ('number', 'boolean', 'string', ...), or undefined. */
export function settingType(keyPath: readonly string[]): string | undefined {
  let cur: any = ConfigSchema;
  for (const k of keyPath) {
    cur = unwrapSchema(cur);
    cur = cur?._zod?.def?.shape?.[k];
    if (!cur) return undefined;
  }
  return unwrapSchema(cur)?._zod?.def?.type;
}

function unwrapSchema(s: any): any {
  for (let i = 0; i < 10 && s?._zod?.def?.innerType; i++) s = s._zod.def.innerType;
  return s;
}

const TRUE = /^(true|1|yes|on)$/i;
const FALSE = /^(false|0|no|off)$/i;

/**
 * Booleans may be written as true/false, 1/0, yes/no, on/off (environment variables are strings).
 * Numbers are coerced from strings, but an empty string, null or a boolean is refused instead of
 * silently becoming 0 or 1.
 */
function normalizeLeaves(raw: any, prefix: string[] = []): any {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) return raw;
  const out: any = {};
  for (const [k, v] of Object.entries(raw)) {
    const keyPath = [...prefix, k];
    const type = settingType(keyPath);
    if (v && typeof v === 'object' && !Array.isArray(v)) out[k] = normalizeLeaves(v, keyPath);
    else if (type === 'boolean' && typeof v === 'string') out[k] = TRUE.test(v.trim()) ? true : FALSE.test(v.trim()) ? false : v;
    else if (type === 'number' && (v === null || typeof v === 'boolean' || (typeof v === 'string' && v.trim() === ''))) out[k] = Number.NaN;
    else out[k] = v;
  }
  return out;
}

export function loadConfig(opts: LoadConfigOptions = {}): Config {
  const env = opts.env ?? process.env;
  const file = opts.file ?? env.LOCKER_CONFIG;
  let raw: any = file ? readFile(path.resolve(file)) : {};
  const fromEnv: any = {};
  const origin = new Map<string, string>();
  for (const [name, keyPath] of Object.entries(ENV_MAP)) {
    const v = env[name];
    if (v === undefined || v === '') continue;
    origin.set(keyPath.join('.'), `environment variable ${name}`);
    if (keyPath.length === 1) fromEnv[keyPath[0]] = v;
    else (fromEnv[keyPath[0]] ??= {})[keyPath[1]!] = v;
  }
  for (const k of Object.keys(env)) {
    if (k.startsWith('LOCKER_') && !(k in ENV_MAP) && !NOT_CONFIG_ENV.has(k) && !k.startsWith('LOCKER_TEST_')) {
      throw new ConfigError(`unknown environment variable ${k}: known ones are ${Object.keys(ENV_MAP).join(', ')}`);
    }
  }
  raw = normalizeLeaves(merge(merge(raw, fromEnv), opts.overrides));
  const res = ConfigSchema.safeParse(raw);
  if (!res.success) {
    const issue = res.error.issues[0]!;
    const key = issue.path.join('.') || (issue as any).keys?.join(', ') || '(root)';
    const where = origin.get(key) ?? (file ? `config file ${file}` : 'configuration');
    const unknown = issue.code === 'unrecognized_keys' ? `unknown setting ${[...issue.path, ...(issue as any).keys].join('.')}` : `setting ${key}`;
    throw new ConfigError(`invalid ${unknown} (from ${where}): ${issue.message}`);
  }
  // unset: 2, none with prepared statements off (a transaction-mode pooler in between); resolved
  // here so that check-config prints the value in use
  res.data.database.pgReadPipelines ??= res.data.database.pgPreparedStatements ? 2 : 0;
  return res.data;
}

export function isPostgresUrl(url: string): boolean {
  return /^postgres(ql)?:\/\//i.test(url);
}
