// The agent's configuration: one zod schema with defaults, read from a file (YAML or JSON),
// overridden by LOCKER_AGENT_* environment variables. A bad setting fails fast naming the key.
import fs from 'node:fs';
import path from 'node:path';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';

const Board = z.object({ address: z.number().int().min(0).max(255), locks: z.number().int().min(1).max(255).optional() }).strict();

const Bus = z
  .object({
    name: z.string().min(1),
    /** /dev/ttyUSB0, /dev/ttyUSB0?baud=19200, serial:///dev/..., or tcp://host:port (RS485 gateway) */
    port: z.string().min(1),
    dialect: z.enum(['kerong-cu16', 'kerong-48', 'generic-8a80']),
    baudRate: z.number().int().positive().optional(),
    polarity: z.enum(['closed-high', 'closed-low']).default('closed-high'),
    boards: z.array(Board).min(1),
    pollMs: z.number().int().min(10).default(500),
    /** pulse time set on every board that comes online (where the dialect can); null = leave it */
    pulseMs: z.number().int().positive().nullable().default(null),
    replyTimeoutMs: z.number().int().positive().default(150),
    jamWindowMs: z.number().int().positive().default(10_000),
    /** null: never report a door left open */
    doorLeftOpenMs: z.number().int().positive().nullable().default(120_000),
    reconnect: z.object({ initialMs: z.number().int().positive().default(250), maxMs: z.number().int().positive().default(10_000) }).strict().prefault({}),
  })
  .strict();

const Scanner = z
  .object({
    name: z.string().min(1),
    port: z.string().min(1),
    baudRate: z.number().int().positive().default(9600),
    /** the suffix the scanner sends (CR, LF and CRLF are all accepted; '' = none, ended by silence) */
    suffix: z.enum(['\r', '\n', '\r\n', '']).default('\r'),
  })
  .strict();

export const AgentConfigSchema = z
  .object({
    terminal: z.object({ id: z.string().min(1), secret: z.string().min(1) }).strict(),
    mqtt: z
      .object({
        url: z.string().min(1).default('mqtt://127.0.0.1:1883'),
        keepaliveSeconds: z.number().int().min(1).default(30),
        /** the first retry of a failed or lost connection waits this long (at least), with jitter */
        reconnectMs: z.number().int().positive().default(2000),
        /** each consecutive failure doubles the retry delay's upper bound, up to this (taken as at least reconnectMs) */
        reconnectMaxMs: z.number().int().positive().default(60_000),
        /** the link down for longer than this makes the agent unhealthy (no watchdog pings: systemd restarts it); null: never */
        unhealthyAfterMinutes: z.number().positive().nullable().default(30),
        connectTimeoutMs: z.number().int().positive().default(10_000),
        statusIntervalSeconds: z.number().positive().default(60),
        syncRetrySeconds: z.number().positive().default(30),
        /** an event whose PUBACK has not come within this long is published again */
        publishTimeoutMs: z.number().int().positive().default(15_000),
      })
      .strict()
      .prefault({}),
    buses: z.array(Bus).default([]),
    scanners: z.array(Scanner).default([]),
    store: z
      .object({
        path: z.string().min(1).default('./data/agent.db'),
        /** sent events are kept this long for the diagnostics page, then deleted */
        keepSentEventsHours: z.number().positive().default(72),
      })
      .strict()
      .prefault({}),
    access: z
      .object({
        maxFailures: z.number().int().min(1).default(5),
        failureWindowSeconds: z.number().positive().default(60),
        lockoutSeconds: z.number().positive().default(60),
        /** each lock-out following the previous one within escalationResetSeconds doubles, up to this */
        maxLockoutSeconds: z.number().positive().default(3600),
        /** quiet time after a lock-out ended after which the next lock-out starts again at lockoutSeconds */
        escalationResetSeconds: z.number().positive().default(3600),
        /** failures across all readers of the terminal within failureWindowSeconds; default maxFailures * 3 */
        terminalMaxFailures: z.number().int().min(1).optional(),
        /** codes are refused (CODES_STALE) after this long without a broker connection; null: never */
        maxOfflineHours: z.number().positive().nullable().default(72),
        /**
         * an access session (code accepted, door not yet closed) waits this long for its door's
         * close, e.g. while its board cannot be read; then it ends as accessIncomplete "abandoned"
         */
        sessionMaxHours: z.number().positive().default(72),
      })
      .strict()
      .prefault({}),
    diagnostics: z
      .object({
        enabled: z.boolean().default(true),
        host: z.string().min(1).default('127.0.0.1'),
        port: z.number().int().min(0).max(65535).default(8090),
        /** the technician password for "open lock"; unset: the action is disabled */
        technicianPassword: z.string().min(8).optional(),
        recentEvents: z.number().int().min(1).max(1000).default(50),
        /** a technician's login (POST /api/login) lasts this long */
        sessionMinutes: z.number().positive().max(24 * 60).default(30),
        /** the pick up point's IANA time zone for the page (e.g. Europe/Amsterdam); default the process's */
        timeZone: z
          .string()
          .min(1)
          .refine((tz) => {
            try {
              new Intl.DateTimeFormat('en', { timeZone: tz });
              return true;
            } catch {
              return false;
            }
          }, 'not an IANA time zone')
          .optional(),
      })
      .strict()
      .prefault({}),
    metrics: z
      .object({
        /** serve GET /metrics (Prometheus) on a listener of its own; no authentication: keep it on a private network */
        enabled: z.boolean().default(false),
        host: z.string().min(1).default('127.0.0.1'),
        port: z.number().int().min(0).max(65535).default(9465),
      })
      .strict()
      .prefault({}),
    log: z
      .object({
        level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
      })
      .strict()
      .prefault({}),
  })
  .strict()
  .superRefine((c, ctx) => {
    const seen = new Set<string>();
    c.buses.forEach((b, i) => {
      if (seen.has(b.name)) ctx.addIssue({ code: 'custom', path: ['buses', i, 'name'], message: `duplicate bus name ${b.name}` });
      seen.add(b.name);
    });
    if (c.metrics.enabled && c.diagnostics.enabled && c.metrics.port !== 0 && c.metrics.port === c.diagnostics.port && c.metrics.host === c.diagnostics.host) {
      ctx.addIssue({ code: 'custom', path: ['metrics', 'port'], message: `the diagnostics page's port (diagnostics.port ${c.diagnostics.port}): the metrics endpoint needs a listener of its own` });
    }
  });

export type AgentConfig = z.infer<typeof AgentConfigSchema>;
export type AgentConfigInput = z.input<typeof AgentConfigSchema>;
export type BusConfig = AgentConfig['buses'][number];

export class AgentConfigError extends Error {
  readonly code = 'CONFIG_INVALID';
}

/** Environment variables that override the file. */
export const AGENT_ENV_MAP: Record<string, { path: string[]; type: 'string' | 'number' | 'boolean' }> = {
  LOCKER_AGENT_TERMINAL_ID: { path: ['terminal', 'id'], type: 'string' },
  LOCKER_AGENT_TERMINAL_SECRET: { path: ['terminal', 'secret'], type: 'string' },
  LOCKER_AGENT_MQTT_URL: { path: ['mqtt', 'url'], type: 'string' },
  LOCKER_AGENT_STORE_PATH: { path: ['store', 'path'], type: 'string' },
  LOCKER_AGENT_DIAGNOSTICS_ENABLED: { path: ['diagnostics', 'enabled'], type: 'boolean' },
  LOCKER_AGENT_DIAGNOSTICS_HOST: { path: ['diagnostics', 'host'], type: 'string' },
  LOCKER_AGENT_DIAGNOSTICS_PORT: { path: ['diagnostics', 'port'], type: 'number' },
  LOCKER_AGENT_TECHNICIAN_PASSWORD: { path: ['diagnostics', 'technicianPassword'], type: 'string' },
  LOCKER_AGENT_METRICS_ENABLED: { path: ['metrics', 'enabled'], type: 'boolean' },
  LOCKER_AGENT_METRICS_HOST: { path: ['metrics', 'host'], type: 'string' },
  LOCKER_AGENT_METRICS_PORT: { path: ['metrics', 'port'], type: 'number' },
  LOCKER_AGENT_LOG_LEVEL: { path: ['log', 'level'], type: 'string' },
};

function readFile(file: string): Record<string, unknown> {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    throw new AgentConfigError(`cannot read config file ${file}: ${(e as Error).message}`);
  }
  const yaml = /\.ya?ml$/i.test(file);
  try {
    const parsed = yaml ? parseYaml(text) : JSON.parse(text);
    if (parsed == null) return {};
    if (typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('top level must be an object');
    return parsed as Record<string, unknown>;
  } catch (e) {
    throw new AgentConfigError(`config file ${file} is not valid ${yaml ? 'YAML' : 'JSON'}: ${(e as Error).message}`);
  }
}

function setPath(obj: any, keys: string[], value: unknown): void {
  let o = obj;
  for (const k of keys.slice(0, -1)) {
    if (typeof o[k] !== 'object' || o[k] === null) o[k] = {};
    o = o[k];
  }
  o[keys[keys.length - 1]!] = value;
}

export function loadAgentConfig(opts: { file?: string; env?: NodeJS.ProcessEnv; overrides?: Record<string, unknown> } = {}): AgentConfig {
  const env = opts.env ?? process.env;
  const file = opts.file ?? env.LOCKER_AGENT_CONFIG;
  const raw: any = structuredClone(file ? readFile(path.resolve(file)) : {});
  const origin = new Map<string, string>();
  for (const [name, spec] of Object.entries(AGENT_ENV_MAP)) {
    const val = env[name];
    if (val === undefined || val === '') continue;
    let parsed: unknown = val;
    if (spec.type === 'number') {
      parsed = Number(val);
      if (!Number.isFinite(parsed)) throw new AgentConfigError(`invalid setting ${spec.path.join('.')} (from environment variable ${name}): not a number`);
    } else if (spec.type === 'boolean') {
      if (!/^(true|false|1|0|yes|no|on|off)$/i.test(val)) throw new AgentConfigError(`invalid setting ${spec.path.join('.')} (from environment variable ${name}): expected true/false, 1/0, yes/no or on/off`);
      parsed = /^(true|1|yes|on)$/i.test(val);
    }
    setPath(raw, spec.path, parsed);
    origin.set(spec.path.join('.'), `environment variable ${name}`);
  }
  for (const k of Object.keys(env)) {
    if (k.startsWith('LOCKER_AGENT_') && !(k in AGENT_ENV_MAP) && k !== 'LOCKER_AGENT_CONFIG') {
      throw new AgentConfigError(`unknown environment variable ${k}: known ones are ${Object.keys(AGENT_ENV_MAP).join(', ')}`);
    }
  }
  for (const [k, val] of Object.entries(opts.overrides ?? {})) raw[k] = val;
  const res = AgentConfigSchema.safeParse(raw);
  if (!res.success) {
    const issue = res.error.issues[0]!;
    const keys = (issue as { keys?: string[] }).keys;
    const key = issue.code === 'unrecognized_keys' && keys ? [...issue.path, ...keys].join('.') : issue.path.join('.') || '(root)';
    const where = origin.get(issue.path.join('.')) ?? (file ? `config file ${file}` : 'configuration');
    throw new AgentConfigError(`invalid ${issue.code === 'unrecognized_keys' ? 'unknown setting' : 'setting'} ${key} (from ${where}): ${issue.message}`);
  }
  return res.data;
}
