// `locker-sim fleet` on the command line: argument errors (one clear line with a code, exit 2),
// `fleet generate` writes a provisioning file the central service takes, and `fleet run` against a
// real central service (embedded broker, SQLite, free ports) prints a JSON summary, exit 0 when all
// terminals got in sync and every event was acknowledged, exit 1 naming the terminal refused for a
// wrong secret.
import { spawn, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseFleetArgs } from '../src/fleet/cli';
import { generateSecret } from '../src/fleet/provisioning';
import { isHighEntropySecret } from '../../packages/central/src/auth/terminal-secret-digest';
import { loadConfig } from '../../packages/central/src/config';
import { CentralService } from '../../packages/central/src/service';
import { createLogger } from '../../packages/central/src/logger';

const here = path.dirname(fileURLToPath(import.meta.url));
const SIM = path.resolve(here, '../bin/locker-sim.js');
const CENTRAL_BIN = path.resolve(here, '../../packages/central/bin/locker-central.js');

function sim(args: string[], env: NodeJS.ProcessEnv = {}) {
  const r = spawnSync(process.execPath, [SIM, ...args], { env: { ...process.env, ...env }, encoding: 'utf8', timeout: 60_000 });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

describe('locker-sim fleet: arguments', () => {
  it.each([
    [['fleet', 'bogus'], 'locker-sim fleet: unknown fleet command "bogus": generate or run (see locker-sim fleet --help) [FLEET_ARGS_INVALID]'],
    [['fleet', 'generate', '--out', 'x.yaml'], 'locker-sim fleet: fleet generate needs --terminals N [FLEET_ARGS_INVALID]'],
    [['fleet', 'generate', '--terminals', 'ten', '--out', 'x.yaml'], 'locker-sim fleet: --terminals must be an integer >= 1, got "ten" [FLEET_ARGS_INVALID]'],
    [['fleet', 'generate', '--terminals', '2', '--pups', '3', '--out', 'x.yaml'], 'locker-sim fleet: --pups 3 is more than --terminals 2: every pick up point needs a terminal [FLEET_ARGS_INVALID]'],
    [['fleet', 'run', '--broker', 'mqtt://127.0.0.1:1'], 'locker-sim fleet: fleet run needs --provisioning FILE (see locker-sim fleet generate) [FLEET_ARGS_INVALID]'],
    [['fleet', 'run', '--provisioning', 'f.yaml', '--broker', 'http://x'], 'locker-sim fleet: --broker must be mqtt://HOST:PORT or mqtts://HOST:PORT, got "http://x" [FLEET_BROKER_URL_INVALID]'],
    [['fleet', 'run', '--provisioning', 'f.yaml', '--broker', 'mqtt://h:1', '--bogus', '1'], 'locker-sim fleet: unknown option --bogus for fleet run (see locker-sim fleet --help) [FLEET_ARGS_INVALID]'],
    [['fleet', 'run', '--provisioning', 'f.yaml', '--broker', 'mqtt://h:1', '--duration'], 'locker-sim fleet: --duration needs a value [FLEET_ARGS_INVALID]'],
    [['fleet', 'run', '--provisioning', '/nonexistent/f.yaml', '--broker', 'mqtt://h:1'], /^locker-sim fleet: cannot read \/nonexistent\/f.yaml: .* \[FLEET_PROVISIONING_UNREADABLE\]$/],
  ])('%j: one clear line with its code, exit 2', (args, line) => {
    const r = sim(args);
    expect(r.code).toBe(2);
    expect(r.out).toBe('');
    const lines = r.err.trim().split('\n');
    expect(lines).toHaveLength(1);
    if (typeof line === 'string') expect(lines[0]).toBe(line);
    else expect(lines[0]).toMatch(line);
  });

  it('fleet --help: the usage on stdout, exit 0; the main usage names the fleet command', () => {
    const r = sim(['fleet', '--help']);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^Usage: locker-sim fleet generate\|run/);
    expect(r.err).toBe('');
    expect(sim(['--help']).out).toMatch(/locker-sim fleet generate\|run/);
  });

  it('parses run options with their defaults', () => {
    const a = parseFleetArgs(['run', '--provisioning', 'f.yaml', '--broker', 'mqtts://broker.example:8883', '--events-per-second', '100', '--duration=30']);
    expect(a).toMatchObject({ cmd: 'run', broker: 'mqtts://broker.example:8883', eventsPerSecond: 100, durationS: 30, connectRate: 500, reconnectMs: 2000, reconnectMaxMs: 60_000, offline: true, stdinControl: false });
  });

  it('generated secrets pass the central service rule for high-entropy secrets (fast digests)', () => {
    for (let i = 0; i < 2000; i++) {
      const s = generateSecret();
      expect(isHighEntropySecret(s), s).toBe(true);
    }
  });
});

describe('locker-sim fleet generate + run against the real central service', () => {
  let dir: string;
  let svc: CentralService;
  let url: string;
  let file: string;
  const pepper = crypto.randomBytes(32).toString('base64url');

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-cli-'));
    file = path.join(dir, 'fleet.yaml');
    const g = sim(['fleet', 'generate', '--terminals', '6', '--pups', '3', '--lockers', '2', '--prefix', 'cli-', '--out', file]);
    expect(g.code, g.err).toBe(0);
    expect(g.out).toMatch(/wrote .*fleet\.yaml: 6 terminals, 3 pick up points with 2 lockers each/);
    expect(fs.statSync(file).mode & 0o077).toBe(0); // it holds secrets
    const again = sim(['fleet', 'generate', '--terminals', '6', '--out', file]);
    expect(again.code).toBe(2);
    expect(again.err).toMatch(/exists; pass --force to overwrite it \[FLEET_OUT_EXISTS\]/);
    const dbUrl = path.join(dir, 'central.db');
    const prov = spawnSync(process.execPath, [CENTRAL_BIN, 'provision', file], { env: { ...process.env, LOCKER_DATABASE_URL: dbUrl, LOCKER_MQTT_TERMINAL_SECRET_PEPPER: pepper }, encoding: 'utf8', timeout: 60_000 });
    expect(prov.status, prov.stderr).toBe(0);
    const config = loadConfig({ env: {}, overrides: { database: { url: dbUrl }, log: { level: 'silent' }, environment: 'staging', mqtt: { mode: 'embedded', host: '127.0.0.1', port: 0, terminalSecretPepper: pepper }, http: { port: 0 } } });
    svc = new CentralService({ config, log: createLogger({ level: 'silent' }), startWorkers: true });
    const ctx = await svc.start();
    url = ctx.bus!.address()!;
    // every terminal's login is the fast digest (provisioned with the pepper)
    const rows = await ctx.db.kysely.selectFrom('terminals').select(['id', 'secret_fast']).execute();
    expect(rows).toHaveLength(6);
    expect(rows.every((r) => typeof r.secret_fast === 'string' && r.secret_fast.startsWith('hs256$'))).toBe(true);
  });

  afterAll(async () => {
    await svc?.stop();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  const runFleet = (args: string[]) =>
    new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
      const p = spawn(process.execPath, [SIM, 'fleet', 'run', '--provisioning', file, '--broker', url, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      let err = '';
      p.stdout.on('data', (d) => (out += d));
      p.stderr.on('data', (d) => (err += d));
      p.on('exit', (code) => resolve({ code, out, err }));
    });

  it('runs the fleet: all in sync, events acknowledged, a JSON summary, exit 0', async () => {
    const r = await runFleet(['--duration', '2', '--events-per-second', '30', '--progress', '1', '--reconnect-ms', '200']);
    expect(r.code, r.err).toBe(0);
    const summary = JSON.parse(r.out.trim().split('\n').pop()!);
    expect(summary).toMatchObject({ type: 'summary', terminals: 6, inSync: 6, neverConnected: 0, refused: {} });
    expect(summary.allInSyncMs).toBeGreaterThan(0);
    expect(summary.events.journalled).toBeGreaterThan(20);
    expect(summary.events.acked).toBe(summary.events.journalled);
    expect(summary.events.backlog).toBe(0);
    expect(r.err).toMatch(/fleet: all 6 terminals in sync after/);
    expect(r.err).toMatch(/connected 6\/6, in sync 6/);
  });

  it('a terminal with a wrong secret: reported by id and CONNACK code, exit 1', async () => {
    const site = YAML.parse(fs.readFileSync(file, 'utf8'));
    site.terminals[2].secret = generateSecret();
    fs.writeFileSync(file, YAML.stringify(site));
    const r = await runFleet(['--duration', '1', '--sync-timeout', '3', '--reconnect-ms', '200', '--reconnect-max-ms', '500']);
    expect(r.code).toBe(1);
    const summary = JSON.parse(r.out.trim().split('\n').pop()!);
    expect(summary.neverConnected).toBe(1);
    expect(summary.refusedTerminals[0].id).toBe('cli-2');
    expect(summary.inSync).toBe(5);
    expect(r.err).toMatch(/locker-sim fleet: 1 terminal\(s\) never connected \(cli-2: CONNACK [45] \((bad user name or password|not authorized)\)\)/);
  });
});
