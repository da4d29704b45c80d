import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError, ConfigSchema, ENV_MAP, loadConfig, settingType } from '../src/config';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-config-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
let n = 0;
function file(ext: 'yaml' | 'yml' | 'json', text: string): string {
  const f = path.join(dir, `c${n++}.${ext}`);
  fs.writeFileSync(f, text);
  return f;
}

function failure(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    expect((e as ConfigError).code).toBe('CONFIG_INVALID');
    return e as ConfigError;
  }
  throw new Error('expected a ConfigError');
}

/** Every leaf setting of the schema as a dotted path. */
function leaves(): string[] {
  const out: string[] = [];
  const shape = (ConfigSchema as any)._zod.def.shape as Record<string, any>;
  for (const [k, v] of Object.entries(shape)) {
    let inner = v;
    while (inner?._zod?.def?.innerType) inner = inner._zod.def.innerType;
    const sub = inner?._zod?.def?.shape as Record<string, unknown> | undefined;
    if (inner?._zod?.def?.type === 'object' && sub) for (const s of Object.keys(sub)) out.push(`${k}.${s}`);
    else out.push(k);
  }
  return out;
}

describe('configuration', () => {
  it('has defaults for everything', () => {
    const c = loadConfig({ env: {} });
    expect(c.environment).toBe('production');
    expect(c.http).toMatchObject({ host: '127.0.0.1', port: 8080, bodyLimitBytes: 1_048_576, rateLimitPerMinute: 1200, unauthenticatedRateLimitPerMinute: 300, trustProxy: false });
    expect(c.throttle).toMatchObject({ tokenMaxFailuresPerClient: 5, tokenMaxFailuresPerAddress: 20, pinMaxFailuresPerLocker: 10, pinMaxFailuresPerPup: 30, pinMaxFailuresPerTenant: 100 });
    expect(c.database).toMatchObject({ url: './data/locker.db', sqliteSynchronous: 'FULL', poolSize: 10 });
    expect(c.auth.tokenLifetimeSeconds).toBe(3600);
    expect(c.auth.tokenSigningKey).toBeUndefined();
    expect(c.log).toEqual({ level: 'info', pretty: false });
    expect(c.shipments).toEqual({ dropOffDeadlineHours: 72, expirySweepSeconds: 60 });
    expect(c.callbacks.enabled).toBe(true);
    expect(c.mqtt.mode).toBe('embedded');
  });

  it('reads http.trustProxy from LOCKER_HTTP_TRUST_PROXY (default false)', () => {
    expect(loadConfig({ env: { LOCKER_HTTP_TRUST_PROXY: 'true' } }).http.trustProxy).toBe(true);
    expect(loadConfig({ env: { LOCKER_HTTP_TRUST_PROXY: '0' } }).http.trustProxy).toBe(false);
    expect(() => loadConfig({ env: { LOCKER_HTTP_TRUST_PROXY: 'maybe' } })).toThrow(/LOCKER_HTTP_TRUST_PROXY/);
  });

  it('reads a YAML file; environment variables override it; unset keys keep their defaults', () => {
    const f = file('yaml', 'environment: staging\nhttp:\n  port: 9000\n  host: 0.0.0.0\nlog:\n  level: warn\n');
    const fromFile = loadConfig({ file: f, env: {} });
    expect(fromFile.environment).toBe('staging');
    expect(fromFile.http).toMatchObject({ port: 9000, host: '0.0.0.0', bodyLimitBytes: 1_048_576 });
    expect(fromFile.log.level).toBe('warn');
    const both = loadConfig({ file: f, env: { LOCKER_HTTP_PORT: '9100', LOCKER_LOG_LEVEL: 'error' } });
    expect(both.http.port).toBe(9100);
    expect(both.http.host).toBe('0.0.0.0'); // from the file, not overridden
    expect(both.log.level).toBe('error');
    expect(both.environment).toBe('staging');
  });

  it('reads a JSON file the same way, also through LOCKER_CONFIG', () => {
    const f = file('json', JSON.stringify({ http: { port: 9200 }, database: { url: '/tmp/x.db' }, shipments: { dropOffDeadlineHours: 24 } }));
    const c = loadConfig({ env: { LOCKER_CONFIG: f, LOCKER_DATABASE_URL: 'postgres://u@h/db' } });
    expect(c.http.port).toBe(9200);
    expect(c.database.url).toBe('postgres://u@h/db');
    expect(c.shipments.dropOffDeadlineHours).toBe(24);
  });

  it('an empty environment variable counts as unset', () => {
    const f = file('yaml', 'http:\n  port: 9300\n');
    expect(loadConfig({ file: f, env: { LOCKER_HTTP_PORT: '' } }).http.port).toBe(9300);
  });

  it('a bad value in the file fails fast naming the key and the file', () => {
    const f = file('yaml', 'http:\n  port: eighty\n');
    const e = failure(() => loadConfig({ file: f, env: {} }));
    expect(e.message).toContain('http.port');
    expect(e.message).toContain(f);
    expect(e.message).not.toContain('LOCKER_HTTP_PORT');
  });

  it('a bad environment variable fails fast naming the variable', () => {
    for (const [name, value] of [
      ['LOCKER_HTTP_PORT', 'eighty'],
      ['LOCKER_HTTP_PORT', '70000'],
      ['LOCKER_ENVIRONMENT', 'prod'],
      ['LOCKER_LOG_PRETTY', 'maybe'],
      ['LOCKER_DATABASE_SQLITE_SYNCHRONOUS', 'OFF'],
    ] as const) {
      const e = failure(() => loadConfig({ env: { [name]: value } }));
      expect(e.message, `${name}=${value}`).toContain(name);
    }
  });

  it('the environment variable that is bad is named even when the file sets the same key validly', () => {
    const f = file('yaml', 'http:\n  port: 9000\n');
    expect(failure(() => loadConfig({ file: f, env: { LOCKER_HTTP_PORT: 'x' } })).message).toContain('LOCKER_HTTP_PORT');
  });

  it('booleans from the environment: false/0/no/off are false, true/1/yes/on are true', () => {
    for (const v of ['false', '0', 'no', 'off', 'FALSE']) {
      expect(loadConfig({ env: { LOCKER_CALLBACKS_ENABLED: v } }).callbacks.enabled, v).toBe(false);
      expect(loadConfig({ env: { LOCKER_LOG_PRETTY: v } }).log.pretty, v).toBe(false);
    }
    for (const v of ['true', '1', 'yes', 'on']) expect(loadConfig({ env: { LOCKER_LOG_PRETTY: v } }).log.pretty, v).toBe(true);
    expect(loadConfig({ file: file('yaml', 'callbacks:\n  enabled: false\n'), env: {} }).callbacks.enabled).toBe(false);
  });

  it('numbers: numeric strings are accepted; empty, null and booleans are refused instead of becoming 0/1', () => {
    expect(loadConfig({ file: file('yaml', 'http:\n  port: "8081"\n'), env: {} }).http.port).toBe(8081);
    for (const text of ['http:\n  port:\n', 'http:\n  port: ""\n', 'http:\n  port: true\n']) {
      expect(failure(() => loadConfig({ file: file('yaml', text), env: {} })).message, text).toContain('http.port');
    }
  });

  it('an unknown key in the file is named', () => {
    const e = failure(() => loadConfig({ file: file('yaml', 'http:\n  prot: 8080\n'), env: {} }));
    expect(e.message).toContain('http.prot');
    const top = failure(() => loadConfig({ file: file('json', '{"databse": {"url": "x"}}'), env: {} }));
    expect(top.message).toContain('databse');
  });

  it('an unknown LOCKER_ environment variable is named', () => {
    const e = failure(() => loadConfig({ env: { LOCKER_HTTP_PROT: '8080' } }));
    expect(e.message).toContain('LOCKER_HTTP_PROT');
    // unrelated variables are ignored
    expect(() => loadConfig({ env: { HTTP_PORT: 'x', PATH: '/bin' } })).not.toThrow();
  });

  it('the documented LOCKER_ variables that are not settings (tuning, profiling, demo) are not refused', () => {
    for (const name of ['LOCKER_SQLITE_WAL_AUTOCHECKPOINT', 'LOCKER_SQL_TIMES', 'LOCKER_DEMO_DATA_DIR', 'LOCKER_SIM_SOCAT', 'LOCKER_CLI_MAIN', 'LOCKER_REQUIRE_SERVICES']) {
      expect(() => loadConfig({ env: { [name]: '1' } }), name).not.toThrow();
    }
  });

  it('unreadable or malformed files are reported with the file name', () => {
    expect(failure(() => loadConfig({ file: path.join(dir, 'missing.yaml'), env: {} })).message).toContain('missing.yaml');
    const bad = file('json', '{ not json');
    expect(failure(() => loadConfig({ file: bad, env: {} })).message).toContain(bad);
    expect(failure(() => loadConfig({ file: file('yaml', '- a\n- b\n'), env: {} })).message).toMatch(/top level must be an object/);
  });

  it('every setting has an environment variable, and every variable names a setting of the right type', () => {
    const mapped = new Set(Object.values(ENV_MAP).map((p) => p.join('.')));
    const missing = leaves().filter((l) => !mapped.has(l));
    expect(missing, `settings without LOCKER_ variable: ${missing.join(', ')}`).toEqual([]);
    for (const [name, p] of Object.entries(ENV_MAP)) {
      expect(settingType(p), name).toBeDefined();
      // the name follows LOCKER_<SECTION>_<KEY> in upper snake case
      expect(name).toBe(`LOCKER_${p.map((k) => k.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toUpperCase()).join('_')}`);
    }
  });
});
