// The quickstart as the README says it: `npm start` runs demo/start.ts (the central service with
// the demo site, the simulated lock boards of the Central Station PUP and its terminal agent, all
// in one process). The test starts that command (the tsx binary npm resolves, started directly so
// SIGTERM reaches tsx, which relays it, not npm's wrapper) on free ports with its data in a temp
// dir, parses the printed addresses, then over real HTTP: a token, GetPickUpPoints, the terminal's
// diagnostics page, and a whole drop-off: CreateAccount, CreateLocalShipment, the DropOff PIN from
// GetShipmentAccessConfig typed at the simulator's command line on the child's stdin (`pin`), the
// item put in and the door shut (`put`, `close`), GetShipments until ReadyForPickup. SIGTERM must
// end it cleanly (exit code 0).
// Also `locker-central serve --demo` (the central service alone) the same way, the CLI's --help
// and `provision` run twice (the second run changes nothing).
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
  pickupPoints: { uid: string; name: string; lockers: { name: string; bus: string; boardAddress: number; lockNumber: number }[] }[];
  terminals: { id: string; pupUid: string }[];
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

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function waitFor<T>(fn: () => Promise<T | null | undefined | false>, what: string, ms = 20_000): Promise<T> {
  const start = Date.now();
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() - start > ms) throw new Error(`timed out waiting for ${what}${last ? `: ${(last as Error).message}` : ''}`);
    await sleep(100);
  }
}

describe('quickstart: npm start (demo/start.ts) runs the whole system', () => {
  const START = (JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts.start!;
  const terminal = demo.terminals.find((t) => t.id === 'term-ams-cs-01')!;
  const pup = demo.pickupPoints.find((p) => p.uid === terminal.pupUid)!;
  const tenant = demo.tenants.find((t) => t.pickupPoints.includes(pup.uid))!;
  let child: ChildProcess | undefined;
  let out = '';
  let err = '';
  let exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  let base: string;
  let diag: string;
  let token: string;

  afterAll(() => {
    if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });

  const api = async (route: string, body: unknown) => {
    const res = await fetch(`${base}${route}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify(body),
    });
    const json = (await res.json()) as any;
    if (res.status !== 200 || json.success !== true) throw new Error(`${route}: ${res.status} ${JSON.stringify(json)}`);
    return json;
  };
  const state = async () => (await (await fetch(`${diag}/api/state`)).json()) as any;
  const type = (line: string) => child!.stdin!.write(`${line}\n`);

  it('is what the README runs: npm start = tsx (on the sources) demo/start.ts', () => {
    expect(START).toBe('tsx --conditions=@locker/source demo/start.ts');
    const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
    expect(readme).toContain('npm ci && npm start');
    expect(readme).toContain('npm ci && npm test');
  });

  it('starts and prints the API, diagnostics page, credentials and the terminal connected', async () => {
    const [bin, ...args] = START.split(' ');
    expect(bin).toBe('tsx');
    child = spawn(TSX, args, {
      cwd: ROOT,
      env: env({ LOCKER_HTTP_PORT: '0', LOCKER_MQTT_PORT: '0', LOCKER_AGENT_DIAGNOSTICS_PORT: '0', LOCKER_DEMO_DATA_DIR: path.join(tmp, 'npm-start') }),
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    exited = new Promise((resolve) => child!.on('exit', (code, signal) => resolve({ code, signal })));
    child.stderr!.on('data', (d) => (err += d));
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`not up within 60 s\nstdout: ${out}\nstderr: ${err}`)), 60_000);
      child!.stdout!.on('data', (d) => {
        out += d;
        if (/API:\s+http/.test(out) && /Diagnostics:\s+http/.test(out) && /terminal\s+connected to the central service/.test(out)) {
          clearTimeout(timer);
          resolve();
        }
      });
      child!.on('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`exited early with ${code}\nstdout: ${out}\nstderr: ${err}`));
      });
    });
    base = /API:\s+(http:\/\/\S+?)\/v1\//.exec(out)![1]!;
    diag = /Diagnostics:\s+(http:\/\/\S+?)\/\s/.exec(out)![1]!;
    expect(Number(new URL(base).port)).toBeGreaterThan(0);
    expect(Number(new URL(diag).port)).toBeGreaterThan(0);
    expect(out).toContain('demo site loaded');
    expect(out).toContain(`${tenant.clientId} / ${tenant.clientSecret}`);
    expect(out).toMatch(/technician password: \S{8,}/);
    expect(out).toMatch(/MQTT:\s+embedded broker mqtt:\/\/127\.0\.0\.1:\d+/);
    expect(out).toContain(`Terminal ${terminal.id} at "${pup.name}"`);
  }, 90_000);

  it('answers a token request and GetPickUpPoints over real HTTP', async () => {
    const tokRes = await fetch(`${base}/connect/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ grant_type: 'client_credentials', client_id: tenant.clientId, client_secret: tenant.clientSecret, scope: 'integration_api' }),
    });
    expect(tokRes.status).toBe(200);
    token = ((await tokRes.json()) as { access_token: string }).access_token;
    const body = await api('/v1/PickupPoints/GetPickUpPoints', { pageNo: 1, pageSize: 50 });
    expect((body.items as { pupUid: string }[]).map((i) => i.pupUid).sort()).toEqual([...tenant.pickupPoints].sort());
  }, 30_000);

  it("the terminal's diagnostics page shows the simulated boards online and the link up", async () => {
    const home = await fetch(`${diag}/`);
    expect(home.status).toBe(200);
    expect(home.headers.get('content-type')).toMatch(/text\/html/);
    const s = await waitFor(async () => {
      const s = await state();
      return s.mqtt.connected && s.buses[0]?.boards.every((b: any) => b.online === true) ? s : null;
    }, 'boards online');
    expect(s.terminalId).toBe(terminal.id);
    const boards = [...new Set(pup.lockers.map((l) => l.boardAddress))].sort();
    expect(s.buses.map((b: any) => [b.name, b.dialect, b.boards.map((x: any) => x.address)])).toEqual([['bus0', 'kerong-cu16', boards]]);
  }, 30_000);

  it('a shipment created through the API is dropped off at the simulated locker: pin, put, close -> ReadyForPickup', async () => {
    const account = await api('/v1/Account/CreateAccount', { emailAddress: 'quickstart@example.test', firstName: 'Quick', lastName: 'Start', pickUpPointUid: pup.uid });
    const created = await api('/v1/Logistics/CreateLocalShipment', {
      ToUserUid: account.userUid,
      PupUid: pup.uid,
      Dimension: { width: 30, height: 10, length: 40 },
      AllowLargerLockers: true,
      AllowOverflowLockers: false,
      LockerUid: null,
    });
    const uid = created.shipmentUid as string;
    const shipment = async () => (await api('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 1, shipmentUid: uid })).items[0];
    const s0 = await shipment();
    expect(s0.stateCode).toBe('ReadyForDropoff');
    const locker = pup.lockers.find((l) => l.name === s0.bookedLockerName)!;
    expect(locker).toBeDefined();
    const codes = (await api('/v1/Logistics/GetShipmentAccessConfig', { shipmentUid: uid })).items as { usage: string; type: string; value: string }[];
    const pin = codes.find((c) => c.usage === 'DropOff' && c.type === 'Code')?.value;
    expect(pin).toMatch(/^\d+$/);

    // the codes reach the terminal by themselves (edge sync over the embedded broker)
    await waitFor(async () => (await state()).codes.count > 0, 'codes at the terminal');
    const door = async () => (await state()).buses[0].boards.find((b: any) => b.address === locker.boardAddress).locks[locker.lockNumber - 1].door;
    expect(await door()).toBe('closed');

    type(`pin ${pin}`);
    await waitFor(async () => (await door()) === 'open', `the terminal opens ${locker.name}`);
    type(`put ${locker.boardAddress} ${locker.lockNumber}`);
    type(`close ${locker.boardAddress} ${locker.lockNumber}`);
    const s1 = await waitFor(async () => {
      const s = await shipment();
      return s.stateCode === 'ReadyForPickup' ? s : null;
    }, 'ReadyForPickup');
    expect(s1.bookedLockerName).toBe(locker.name);
    // the console shows it happen
    await waitFor(async () => out.includes(`${uid}: ReadyForDropoff -> ReadyForPickup (door)`), 'the feed line');
    expect(out).toContain(`code accepted (keypad) ${locker.name}`);
  }, 60_000);

  it('exits cleanly (code 0) on SIGTERM', async () => {
    child!.kill('SIGTERM');
    const { code, signal } = await exited;
    expect({ code, signal }).toEqual({ code: 0, signal: null });
    expect(err).not.toMatch(/Error|unhandled/i);
    expect(out).toContain('stopped');
  }, 30_000);
});

describe('quickstart: npm start without socat', () => {
  it('runs without a simulated scanner and hands `pin` to the terminal agent directly', async () => {
    const START = (JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts.start!;
    const child = spawn(TSX, START.split(' ').slice(1), {
      cwd: ROOT,
      env: env({
        LOCKER_SIM_SOCAT: path.join(tmp, 'no-such-socat'),
        LOCKER_HTTP_PORT: '0',
        LOCKER_MQTT_PORT: '0',
        LOCKER_AGENT_DIAGNOSTICS_PORT: '0',
        LOCKER_DEMO_DATA_DIR: path.join(tmp, 'no-socat'),
      }),
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    try {
      await waitFor(async () => /terminal\s+connected to the central service/.test(out), 'the terminal connected', 60_000).catch((e) => {
        throw new Error(`${(e as Error).message}\nstdout: ${out}\nstderr: ${err}`);
      });
      expect(out).toMatch(/Scanner:\s+none \(no socat: SIM_SOCAT_MISSING\)/);
      child.stdin.write('pin 123456\n');
      await waitFor(async () => out.includes('code refused (keypad): UNKNOWN_CODE'), 'the agent refuses the unknown PIN');
      child.kill('SIGTERM');
      expect(await exited).toEqual({ code: 0, signal: null });
      expect(err).not.toMatch(/Error|unhandled/i);
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
  }, 90_000);
});

describe('locker-central serve --demo as a child process', () => {
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
    for (const cmd of ['serve', 'provision', 'provisioning-schema', 'mqtt-passwd', 'check-config']) expect(r.stdout).toContain(cmd);
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
