// The quickstart as a user runs it: `npx tsx packages/central/src/cli.ts serve --demo` as a child
// process (the tsx binary npx resolves, started directly so SIGTERM reaches tsx, which relays it to
// the service, not npm's wrapper) on a free port (LOCKER_HTTP_PORT=0; the CLI prints the real address), then real HTTP:
// a token for the demo tenant and GetPickUpPoints. SIGTERM must end it cleanly (exit code 0).
// Also the CLI's --help and `provision` run twice (the second run changes nothing).
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const CLI = 'packages/central/src/cli.ts';
const TSX = path.join(ROOT, 'node_modules/.bin/tsx');
const BIN = path.join(ROOT, 'packages/central/bin/locker-central.js');
const DEMO_FILE = path.join(ROOT, 'packages/central/provisioning/demo-site.yaml');
const demo = parseYaml(fs.readFileSync(DEMO_FILE, 'utf8')) as {
  tenants: { clientId: string; clientSecret: string; pickupPoints: string[] }[];
  pickupPoints: { uid: string; name: string }[];
};

/** The environment without any LOCKER_* variable of the test runner, plus the given ones. */
function env(extra: Record<string, string>): NodeJS.ProcessEnv {
  const e: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('LOCKER_')) e[k] = v;
  return { ...e, ...extra, NO_COLOR: '1' };
}

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

function run(args: string[], extraEnv: Record<string, string>, timeoutMs = 60_000, command: string[] = [TSX, CLI]): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(command[0]!, [...command.slice(1), ...args], { cwd: ROOT, env: env(extraEnv), stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`timed out: ${args.join(' ')}\n${stdout}\n${stderr}`));
    }, timeoutMs);
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

let tmp: string;
beforeAll(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-quickstart-'));
});
afterAll(() => {
  fs.rmSync(tmp, { recursive: true, force: true });
});

describe('quickstart: serve --demo as a child process', () => {
  let child: ChildProcess | undefined;
  let out = '';
  let err = '';
  let exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  let base: string;

  afterAll(() => {
    if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });

  it('starts and prints its real listening address', async () => {
    child = spawn(TSX, [CLI, 'serve', '--demo'], {
      cwd: ROOT,
      env: env({ LOCKER_HTTP_PORT: '0', LOCKER_DATABASE_URL: path.join(tmp, 'demo.db'), LOCKER_MQTT_MODE: 'off', LOCKER_LOG_LEVEL: 'warn' }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    exited = new Promise((resolve) => child!.on('exit', (code, signal) => resolve({ code, signal })));
    child.stderr!.on('data', (d) => (err += d));
    base = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no address printed within 60 s\nstdout: ${out}\nstderr: ${err}`)), 60_000);
      child!.stdout!.on('data', (d) => {
        out += d;
        const m = /API:\s+(http:\/\/\S+?)\/v1\//.exec(out);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]!);
        }
      });
      child!.on('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`exited early with ${code}\nstdout: ${out}\nstderr: ${err}`));
      });
    });
    expect(base).toMatch(/^http:\/\/(127\.0\.0\.1|localhost|\[::1\]):\d+$/);
    expect(Number(new URL(base).port)).toBeGreaterThan(0);
    expect(out).toContain('demo site loaded');
    // the printed demo credentials are the ones of the demo file
    expect(out).toContain(`${demo.tenants[0]!.clientId} / ${demo.tenants[0]!.clientSecret}`);
  }, 90_000);

  it('answers a token request and GetPickUpPoints with the demo PUPs over real HTTP', async () => {
    const tenant = demo.tenants[0]!;
    const tokRes = await fetch(`${base}/connect/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ grant_type: 'client_credentials', client_id: tenant.clientId, client_secret: tenant.clientSecret, scope: 'integration_api' }),
    });
    expect(tokRes.status).toBe(200);
    const tok = (await tokRes.json()) as { access_token: string; token_type: string };
    expect(tok.token_type.toLowerCase()).toBe('bearer');

    const res = await fetch(`${base}/v1/PickupPoints/GetPickUpPoints`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${tok.access_token}` },
      body: JSON.stringify({ pageNo: 1, pageSize: 50 }),
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { success: boolean; items: { pupUid: string; name: string }[]; totalItems: number };
    expect(body.success).toBe(true);
    const expected = demo.pickupPoints.filter((p) => tenant.pickupPoints.includes(p.uid));
    expect(expected.length).toBeGreaterThan(0);
    expect(body.items.map((i) => i.pupUid).sort()).toEqual(expected.map((p) => p.uid).sort());
    expect(body.items.map((i) => i.name).sort()).toEqual(expected.map((p) => p.name).sort());
    expect(body.totalItems).toBe(expected.length);
  }, 30_000);

  it('serves the API docs page', async () => {
    const res = await fetch(`${base}/docs`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/text\/html/);
  }, 30_000);

  it('exits cleanly (code 0) on SIGTERM', async () => {
    child!.kill('SIGTERM');
    const { code, signal } = await exited;
    expect({ code, signal }).toEqual({ code: 0, signal: null });
    expect(err).not.toMatch(/Error|unhandled/i);
  }, 30_000);
});

describe('locker-central CLI', () => {
  it('locker-central --help (the package bin) prints the usage and exits 0', async () => {
    const r = await run(['--help'], {}, 60_000, [process.execPath, BIN]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/Usage:/);
    for (const cmd of ['serve', 'provision', 'provisioning-schema', 'check-config']) expect(r.stdout).toContain(cmd);
  }, 60_000);

  it('provision applies the demo file; a second run changes nothing', async () => {
    const db = path.join(tmp, 'prov.db');
    const e = { LOCKER_DATABASE_URL: db, LOCKER_MQTT_MODE: 'off' };
    const first = await run(['provision', DEMO_FILE], e);
    expect(first.code, first.stderr).toBe(0);
    const m1 = /(\d+) created, (\d+) updated, (\d+) unchanged/.exec(first.stdout);
    expect(m1).not.toBeNull();
    expect(Number(m1![1])).toBeGreaterThan(0);
    const second = await run(['provision', DEMO_FILE], e);
    expect(second.code, second.stderr).toBe(0);
    const m2 = /(\d+) created, (\d+) updated, (\d+) unchanged/.exec(second.stdout);
    expect(m2).not.toBeNull();
    expect([m2![1], m2![2]]).toEqual(['0', '0']);
    expect(Number(m2![3])).toBe(Number(m1![1]) + Number(m1![3]));
  }, 120_000);
});
