// Issue 13, item 3: the terminal's Debian package. Builds locker-agent_<version>_<arch>.deb with
// `npm run package:agent`, installs it on THIS machine with `dpkg -i`, checks what it put where
// (files, the `locker` user in dialout, permissions, the conffile), runs the INSTALLED agent the way
// systemd would (the unit's ExecStart, WorkingDirectory and Environment, as its User with its
// groups, a clean environment, a notify socket) against a real central service and the simulator
// (processes, as in crash.process.test.ts) until a drop-off completes (the shipment becomes
// ReadyForPickup), upgrades in place (the changed config is kept), then `dpkg -r` (config and store
// kept) and `dpkg -P` (both gone).
//
// Needs root and dpkg-deb/dpkg; without them it is skipped and says why, except in CI
// (LOCKER_REQUIRE_SERVICES=1, .ci/run runs as root), where it is required. It refuses a machine
// where locker-agent is installed or /etc/locker/agent.yaml or /var/lib/locker exist: it would
// replace and then purge them.
import { spawn, spawnSync, type SpawnSyncReturns } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify as toYaml } from 'yaml';
import { NotifySocket, notifySocketAvailable } from '../../../test-support/notify-socket';
import { AgentRunner, Api, CentralDb, Proc, Procs, freePort, startCentral, startSim, waitFor, type CentralHandle, type SimHandle } from './support/crash-procs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const VERSION = JSON.parse(fs.readFileSync(path.join(ROOT, 'packages/agent/package.json'), 'utf8')).version as string;
const REQUIRED = process.env.LOCKER_REQUIRE_SERVICES === '1';

const run = (cmd: string, args: string[], opts: { env?: NodeJS.ProcessEnv; cwd?: string; timeout?: number } = {}): SpawnSyncReturns<string> =>
  spawnSync(cmd, args, { encoding: 'utf8', timeout: opts.timeout ?? 60_000, env: opts.env ?? process.env, cwd: opts.cwd, stdio: ['ignore', 'pipe', 'pipe'] });
const has = (cmd: string) => run('sh', ['-c', `command -v ${cmd}`]).status === 0;
/** Runs a command that must succeed; the error carries its output. */
function ok(cmd: string, args: string[], opts: Parameters<typeof run>[2] = {}): string {
  const r = run(cmd, args, opts);
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} failed (${r.status ?? r.signal}${r.error ? `, ${r.error.message}` : ''}):\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}
/**
 * A long command (the package build, dpkg) without blocking this worker: a synchronous wait past
 * vitest's 60 s RPC timeout fails the whole run ("Timeout calling onTaskUpdate") even when every
 * test passes, as the package build did on a loaded CI machine (82-95 s).
 */
function runAsync(cmd: string, args: string[], opts: { env?: NodeJS.ProcessEnv; cwd?: string; timeout?: number } = {}): Promise<{ status: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { env: opts.env ?? process.env, cwd: opts.cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeout ?? 60_000);
    child.on('error', (err) => {
      clearTimeout(timer);
      resolve({ status: null, signal: null, stdout, stderr: `${stderr}${err.message}` });
    });
    child.on('close', (status, signal) => {
      clearTimeout(timer);
      resolve({ status, signal, stdout, stderr });
    });
  });
}
/** dpkg, waiting for its lock while another dpkg/apt runs on the machine (up to a minute). */
async function dpkg(args: string[], timeout = 110_000): Promise<string> {
  const until = Date.now() + 60_000;
  for (;;) {
    const r = await runAsync('dpkg', args, { timeout });
    if (r.status === 0) return r.stdout;
    if (!/lock was locked by another process|could not get lock|is locked by another process/i.test(r.stderr) || Date.now() > until) {
      throw new Error(`dpkg ${args.join(' ')} failed (${r.status ?? r.signal}):\n${r.stdout}\n${r.stderr}`);
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}
const installedStatus = (): string | null => {
  const r = run('dpkg-query', ['-W', '-f=${Status}', 'locker-agent']);
  const st = r.status === 0 ? r.stdout.trim() : '';
  return st === '' || st.endsWith(' not-installed') ? null : st; // purged: unknown to dpkg, or "... not-installed"
};

function whyNot(): string | null {
  if (process.platform !== 'linux') return 'not Linux';
  if (process.getuid?.() !== 0) return 'not root (dpkg -i needs root)';
  for (const cmd of ['dpkg-deb', 'dpkg', 'dpkg-query', 'setpriv', 'socat', 'adduser']) if (!has(cmd)) return `${cmd} not found`;
  const st = installedStatus();
  if (st) return `locker-agent is already installed here (${st}): the test would replace and purge it (dpkg -P locker-agent first)`;
  if (fs.existsSync('/etc/locker/agent.yaml')) return '/etc/locker/agent.yaml exists: the test would overwrite and purge it';
  if (fs.existsSync('/var/lib/locker')) return '/var/lib/locker exists: the test would purge it';
  return null;
}
const REASON = whyNot();
if (REASON && !REQUIRED) console.warn(`[deb-package] SKIPPED: ${REASON} (CI requires this test: LOCKER_REQUIRE_SERVICES=1)`);

const PUP = 'dec0de00dec0de00dec0de00dec0de01';
const TERMINAL = { id: 'term-deb-01', secret: 'terminal-secret-deb-01' };
const TENANT = { clientId: 'deb-dispatch', clientSecret: 'deb-secret-change-me' };
const DIMENSION = { width: 40, height: 10, length: 60 };
const LOCKER = { uid: 'dec0de00dec0de00dec0de00dec00001', board: 0, lock: 1 };

function siteFile(dir: string): string {
  const site = {
    pickupPoints: [
      {
        uid: PUP,
        name: 'Package Test Lockers',
        timeZone: 'Europe/Amsterdam',
        locationAddress: { streetName: 'Teststraat 2', mailbox: '', city: 'Amsterdam', countryIso2: 'NL' },
        lockers: [{ uid: LOCKER.uid, name: 'DEB-01', dimension: DIMENSION, sizeCode: 'S', typeCode: 'normal', bus: 'bus0', boardAddress: LOCKER.board, lockNumber: LOCKER.lock }],
      },
    ],
    tenants: [{ ...TENANT, name: 'Deb Dispatch', mainAccount: { email: 'dispatch@deb.example', firstName: 'Deb', lastName: 'Dispatcher', languageCode: 'en' }, pickupPoints: [PUP] }],
    terminals: [{ ...TERMINAL, pupUid: PUP, name: 'Package test terminal' }],
  };
  const file = path.join(dir, 'site.json');
  fs.writeFileSync(file, JSON.stringify(site, null, 2));
  return file;
}

/** The [Service] settings of a unit file that say how systemd starts it. */
function parseUnit(text: string) {
  const env: Record<string, string> = {};
  const one = (key: string) => text.match(new RegExp(`^${key}=(.*)$`, 'm'))?.[1]?.trim();
  for (const m of text.matchAll(/^Environment=(.*)$/gm)) {
    const [k, ...v] = m[1]!.trim().split('=');
    env[k!] = v.join('=');
  }
  return { execStart: one('ExecStart')!, workingDirectory: one('WorkingDirectory')!, user: one('User')!, group: one('Group')!, supplementaryGroups: one('SupplementaryGroups') ?? '', env, type: one('Type') };
}

const statOf = (p: string) => {
  const s = fs.statSync(p);
  const user = (id: number) => ok('getent', ['passwd', String(id)]).split(':')[0];
  const group = (id: number) => ok('getent', ['group', String(id)]).split(':')[0];
  return { owner: `${user(s.uid)}:${group(s.gid)}`, mode: (s.mode & 0o7777).toString(8).padStart(4, '0') };
};

const d = REASON && !REQUIRED ? describe.skip : describe;

d('the locker-agent Debian package: build, install, run the installed agent to a drop-off, remove, purge', () => {
  const procs = new Procs();
  let dir: string;
  let deb: string;
  let central: CentralHandle | undefined;
  let sim: SimHandle | undefined;
  let db: CentralDb | undefined;
  let notify: NotifySocket | null = null;
  let failed = true;

  beforeAll(() => {
    if (REASON) throw new Error(`the Debian package test is required here (LOCKER_REQUIRE_SERVICES=1) but cannot run: ${REASON}`);
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-deb-'));
  });

  afterAll(async () => {
    try {
      db?.close();
    } catch {
      /* closed */
    }
    sim?.control.close();
    await procs.killAll();
    await notify?.stop();
    // never leave the package behind (a failed run included)
    if (!REASON && installedStatus()) await dpkg(['--purge', 'locker-agent']);
    if (dir) {
      if (failed) console.log(`[deb-package] logs kept in ${dir}`);
      else fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('npm run package:agent builds locker-agent_<version>_<arch>.deb', { timeout: 240_000 }, async () => {
    const arch = ok('dpkg', ['--print-architecture']).trim();
    const out = path.join(dir, 'out');
    const r = await runAsync('npm', ['run', '--silent', 'package:agent'], { cwd: ROOT, env: { ...process.env, PACKAGE_AGENT_OUT: out }, timeout: 230_000 });
    fs.writeFileSync(path.join(dir, 'package.log'), `${r.stdout}\n${r.stderr}`);
    if (r.status !== 0) throw new Error(`npm run package:agent failed (${r.status ?? r.signal}):\n${r.stderr.slice(-4000)}`);
    deb = r.stdout.trim().split('\n').pop()!;
    expect(deb).toBe(path.join(out, `locker-agent_${VERSION}_${arch}.deb`));
    expect(fs.existsSync(deb)).toBe(true);

    const field = (name: string) => ok('dpkg-deb', ['-f', deb, name]).trim();
    expect(field('Package')).toBe('locker-agent');
    expect(field('Version')).toBe(VERSION);
    expect(field('Architecture')).toBe(arch);
    const major = process.versions.node.split('.')[0];
    expect(field('Depends')).toContain(`nodejs (>= ${major}), nodejs (<< ${Number(major) + 1})`);
    expect(ok('dpkg-deb', ['--ctrl-tarfile', deb]).length).toBeGreaterThan(0);

    const contents = ok('dpkg-deb', ['--contents', deb], { timeout: 60_000 });
    const files = contents.split('\n').filter(Boolean).map((l) => l.replace(/^.*?\s\.\//, '/').replace(/ -> .*$/, ''));
    for (const f of [
      '/opt/locker-agent/package.json',
      '/opt/locker-agent/package-lock.json',
      '/opt/locker-agent/packages/agent/bin/locker-agent.js',
      '/opt/locker-agent/packages/agent/dist/cli.js',
      '/opt/locker-agent/packages/common/dist/index.js',
      '/opt/locker-agent/packages/lockbus/dist/index.js',
      '/opt/locker-agent/node_modules/better-sqlite3/build/Release/better_sqlite3.node',
      '/usr/bin/locker-agent',
      '/lib/systemd/system/locker-agent.service',
      '/lib/udev/rules.d/60-locker-agent.rules',
      '/etc/locker/agent.yaml',
      '/usr/share/doc/locker-agent/copyright',
    ]) {
      expect(files, f).toContain(f);
    }
    // production only: the compiled agent, no sources, no tests, no dev tools, no central service
    expect(files.filter((f) => /\/packages\/[^/]+\/(src|test)\//.test(f) || /\.ts$/.test(f) && !/\.d\.ts$/.test(f) && !f.includes('/node_modules/'))).toEqual([]);
    for (const dev of ['tsx', 'esbuild', 'vitest', 'typescript', 'eslint', '@locker/central', 'fastify-cli']) expect(files.some((f) => f.startsWith(`/opt/locker-agent/node_modules/${dev}/`)), dev).toBe(false);
    // the serialport binaries of this architecture only
    const prebuilds = new Set(files.filter((f) => f.includes('/@serialport/bindings-cpp/prebuilds/')).map((f) => f.split('/prebuilds/')[1]!.split('/')[0]).filter(Boolean));
    expect([...prebuilds]).toEqual([`linux-${process.arch}`]);
    expect(contents).toMatch(/^-rw-r----- root\/root .* \.\/etc\/locker\/agent\.yaml$/m);
    expect(ok('dpkg-deb', ['--info', deb, 'conffiles']).trim()).toBe('/etc/locker/agent.yaml');
  });

  it('dpkg -i: files, the locker user in dialout, permissions, the conffile, the unit, the udev rule', { timeout: 120_000 }, async () => {
    expect(deb, 'the package was built').toBeTruthy();
    await dpkg(['-i', deb]);
    expect(installedStatus()).toBe('install ok installed');
    expect(fs.existsSync('/opt/locker-agent/packages/agent/dist/cli.js')).toBe(true);
    expect(fs.realpathSync('/usr/bin/locker-agent')).toBe('/opt/locker-agent/packages/agent/bin/locker-agent.js');

    // the user: a system user, no login, in its own group and dialout
    const pw = ok('getent', ['passwd', 'locker']).trim().split(':');
    expect(Number(pw[2])).toBeLessThan(1000);
    expect(pw[5]).toBe('/var/lib/locker');
    expect(pw[6]).toMatch(/nologin|false/);
    expect(ok('id', ['-nG', 'locker']).trim().split(/\s+/).sort()).toEqual(['dialout', 'locker']);

    expect(statOf('/var/lib/locker')).toEqual({ owner: 'locker:locker', mode: '0750' });
    expect(statOf('/etc/locker')).toEqual({ owner: 'root:locker', mode: '0750' });
    expect(statOf('/etc/locker/agent.yaml')).toEqual({ owner: 'root:locker', mode: '0640' });
    expect(ok('dpkg-query', ['-W', '-f=${Conffiles}', 'locker-agent'])).toMatch(/^\s*\/etc\/locker\/agent\.yaml [0-9a-f]{32}\s*$/);
    expect(fs.readFileSync('/etc/locker/agent.yaml', 'utf8')).toBe(fs.readFileSync(path.join(ROOT, 'packaging/agent/agent.yaml'), 'utf8'));
    // nothing under /opt writable by the agent's user
    expect(ok('find', ['/opt/locker-agent', '(', '-perm', '-g+w', '-o', '-perm', '-o+w', '-o', '-not', '-user', 'root', ')', '-not', '-type', 'l']).trim()).toBe('');

    // the unit: the repository's with the /opt paths
    const unit = fs.readFileSync('/lib/systemd/system/locker-agent.service', 'utf8');
    const repoUnit = fs.readFileSync(path.join(ROOT, 'systemd/locker-agent.service'), 'utf8');
    const strip = (t: string) => t.split('\n').filter((l) => !l.startsWith('#') && !/^(ExecStart|WorkingDirectory)=/.test(l)).join('\n');
    expect(strip(unit)).toBe(strip(repoUnit));
    const u = parseUnit(unit);
    expect(u.execStart).toBe('/usr/bin/node /opt/locker-agent/packages/agent/bin/locker-agent.js run');
    expect(u.workingDirectory).toBe('/opt/locker-agent');
    expect(u.env.LOCKER_AGENT_CONFIG).toBe('/etc/locker/agent.yaml');
    expect(u.env.LOCKER_AGENT_STORE_PATH).toBe('/var/lib/locker/agent.db');

    // the udev rule parses (udevadm test reads every rules file and reports bad lines)
    expect(fs.readFileSync('/lib/udev/rules.d/60-locker-agent.rules', 'utf8')).toContain('SYMLINK+="locker-rs485-$env{LOCKER_INDEX}"');
    if (has('udevadm') && fs.existsSync('/sys/class/tty/ttyS0')) {
      const t = run('udevadm', ['test', '--action=add', '/sys/class/tty/ttyS0'], { timeout: 30_000 });
      const text = `${t.stdout}\n${t.stderr}`;
      expect(text, text).toContain('60-locker-agent.rules');
      expect(text.split('\n').filter((l) => l.includes('60-locker-agent.rules') && /invalid|error|unknown|fail/i.test(l))).toEqual([]);
    }

    // the command line works with plain node as the agent's user; the shipped template is refused
    // until its terminal id and secret are filled in, with the key named
    const asLocker = (args: string[]) => run('setpriv', ['--reuid=locker', '--regid=locker', '--init-groups', '--', ...args], { env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' }, cwd: '/' });
    const help = asLocker(['locker-agent', '--help']);
    expect(help.status, help.stderr).toBe(0);
    expect(help.stdout).toContain('locker-agent run');
    const check = asLocker(['locker-agent', 'check-config', '--config', '/etc/locker/agent.yaml']);
    expect(check.status).toBe(2);
    expect(check.stderr).toMatch(/invalid setting terminal\.id \(from config file \/etc\/locker\/agent\.yaml\)/);
  });

  it('the installed agent, started as the unit starts it, completes a drop-off against the central service and the simulator', { timeout: 180_000 }, async () => {
    expect(installedStatus()).toBe('install ok installed');
    central = await startCentral(procs, dir, siteFile(dir));
    sim = await startSim(procs, dir);
    // the simulated scanner is a pty of root's: give it to the agent's user as udev does a real
    // adapter (group dialout), and name the device itself (the simulator's link is in a private dir)
    const scannerDev = fs.realpathSync(sim.scannerPath);
    ok('chown', ['root:dialout', scannerDev]);
    fs.chmodSync(scannerDev, 0o660);

    const diagPort = await freePort();
    const config = {
      terminal: TERMINAL,
      mqtt: { url: central.mqttUrl, reconnectMs: 200, connectTimeoutMs: 5000, syncRetrySeconds: 1, publishTimeoutMs: 5000 },
      buses: [{ name: 'bus0', port: `tcp://127.0.0.1:${sim.busPort}`, dialect: 'kerong-cu16', boards: [{ address: 0 }, { address: 1 }], pollMs: 50, replyTimeoutMs: 200, pulseMs: 300, doorLeftOpenMs: null, reconnect: { initialMs: 50, maxMs: 500 } }],
      scanners: [{ name: 'scan0', port: scannerDev, suffix: '\r' }],
      diagnostics: { enabled: true, host: '127.0.0.1', port: diagPort, technicianPassword: 'deb-technician' },
      log: { level: 'info' },
    };
    // the technician edits the conffile in place: owner and mode stay
    fs.writeFileSync('/etc/locker/agent.yaml', `# written by deb-package.test.ts\n${toYaml(config)}`);
    expect(statOf('/etc/locker/agent.yaml')).toEqual({ owner: 'root:locker', mode: '0640' });

    // ExecStart as systemd runs it: User/Group with the user's groups (dialout), WorkingDirectory,
    // the unit's Environment and nothing of ours (no NODE_OPTIONS source condition, no tsx)
    const u = parseUnit(fs.readFileSync('/lib/systemd/system/locker-agent.service', 'utf8'));
    expect(u.type).toBe('notify');
    const [exe, ...args] = u.execStart.split(/\s+/);
    const env: NodeJS.ProcessEnv = { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', HOME: '/var/lib/locker', USER: u.user, LOGNAME: u.user, LANG: 'C.UTF-8', ...u.env };
    if (notifySocketAvailable()) {
      notify = new NotifySocket();
      await notify.start();
      // the agent's user must be able to send to it (systemd's socket is world-writable)
      fs.chmodSync(path.dirname(notify.path), 0o755);
      fs.chmodSync(notify.path, 0o777);
      env.NOTIFY_SOCKET = notify.path;
    }
    const child = spawn('setpriv', [`--reuid=${u.user}`, `--regid=${u.group}`, '--init-groups', '--', exe!, ...args], { cwd: u.workingDirectory, env, stdio: ['ignore', 'pipe', 'pipe'] });
    const proc = new Proc('installed agent', child, path.join(dir, 'agent.log'));
    procs.all.push(proc);
    const agent = new AgentRunner(procs, dir, '/etc/locker/agent.yaml', diagPort);
    agent.proc = proc;
    await agent.ready(90_000);
    if (notify) await waitFor(() => notify!.count('READY=1') === 1, 'READY=1 on the notify socket', 20_000);

    // the agent runs as locker, with dialout, from the build (plain node: no tsx loaded)
    const status = fs.readFileSync(`/proc/${child.pid}/status`, 'utf8');
    const lockerUid = ok('id', ['-u', 'locker']).trim();
    expect(status).toMatch(new RegExp(`^Uid:\\s+${lockerUid}\\s`, 'm'));
    const dialout = ok('getent', ['group', 'dialout']).split(':')[2]!;
    expect(status.match(/^Groups:(.*)$/m)![1]!.trim().split(/\s+/)).toContain(dialout);
    const maps = fs.readFileSync(`/proc/${child.pid}/maps`, 'utf8');
    expect(maps).toContain('/opt/locker-agent/node_modules/better-sqlite3/build/Release/better_sqlite3.node');
    expect(fs.readlinkSync(`/proc/${child.pid}/cwd`)).toBe('/opt/locker-agent');
    // the store where the unit puts it, the agent's own
    expect(statOf('/var/lib/locker/agent.db').owner).toBe('locker:locker');

    // a drop-off: book, the codes reach the terminal, the PIN at the keypad, the door, the parcel
    const api = new Api(central.apiUrl, TENANT.clientId, TENANT.clientSecret);
    db = new CentralDb(central.dbFile);
    const userUid = (await api.ok('/v1/Account/CreateOrGetAccount', { emailAddress: 'receiver@deb.example', firstName: 'Rita', lastName: 'Receiver', pickUpPointUid: PUP })).userUid;
    const booked = await api.ok('/v1/Logistics/CreateLocalShipment', { ToUserUid: userUid, PupUid: PUP, Dimension: DIMENSION, AllowLargerLockers: true, AllowOverflowLockers: false, LockerUid: LOCKER.uid });
    const uid = booked.shipmentUid as string;
    const items = (await api.ok('/v1/Logistics/GetShipmentAccessConfig', { shipmentUid: uid })).items as { usage: string; type: string; value: string }[];
    const pin = items.find((i) => i.usage === 'DropOff' && i.type === 'Code')!.value;
    expect(pin).toMatch(/^\d+$/);
    const ids = db.all<{ uid: string }>("SELECT uid FROM access_codes WHERE shipment_uid = ? AND valid = 1 AND usage = 'DropOff'", uid).map((r) => r.uid);
    await waitFor(() => ids.every((id) => db!.get('SELECT 1 AS x FROM edge_pushed_codes WHERE terminal_id = ? AND code_uid = ?', TERMINAL.id, id)), 'the codes pushed to the terminal', 60_000, 50);
    const v = db.get<{ codes_version: number }>('SELECT codes_version FROM edge_terminals WHERE terminal_id = ?', TERMINAL.id)!.codes_version;
    await waitFor(async () => ((await agent.state())?.codes.version ?? -1) >= v, `code version ${v} at the terminal`, 60_000, 50);

    await sim.control.cmd(`pin ${pin}`);
    await waitFor(async () => (await sim!.control.lock(LOCKER.board, LOCKER.lock)).doorOpen, 'the booked locker to open', 20_000, 20);
    await waitFor(async () => (await agent.lockView(LOCKER.board, LOCKER.lock))?.door === 'open', 'the agent to see the door open', 20_000, 20);
    await sim.control.cmd(`put ${LOCKER.board} ${LOCKER.lock}`);
    await waitFor(async () => (await agent.lockView(LOCKER.board, LOCKER.lock))?.item === true, 'the agent to see the parcel', 20_000, 20);
    await sim.control.cmd(`close ${LOCKER.board} ${LOCKER.lock}`);
    const state = await waitFor(
      async () => {
        const got = await api.ok('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 1, shipmentUid: uid });
        const s = (got.items as { stateCode: string }[])[0]?.stateCode;
        return s === 'ReadyForPickup' ? s : null;
      },
      'the shipment to become ReadyForPickup',
      60_000,
      100,
    );
    expect(state).toBe('ReadyForPickup');
    expect(db.get<{ n: number }>("SELECT count(*) AS n FROM edge_events WHERE terminal_id = ? AND type = 'dropOff'", TERMINAL.id)!.n).toBe(1);

    // systemctl stop: SIGTERM, a clean exit 0
    child.kill('SIGTERM');
    expect(await proc.exited).toEqual({ code: 0, signal: null });
    if (notify) expect(notify.count('STOPPING=1')).toBe(1);
  });

  it('an upgrade keeps the changed config; dpkg -r keeps config and store; dpkg -P removes both', { timeout: 120_000 }, async () => {
    expect(installedStatus()).toBe('install ok installed');
    const mine = fs.readFileSync('/etc/locker/agent.yaml', 'utf8');
    expect(mine).toContain('written by deb-package.test.ts');

    // a newer version of the same package (the template unchanged): the technician's file stays, no question asked
    const x = path.join(dir, 'next');
    ok('dpkg-deb', ['-R', deb, x]);
    const control = path.join(x, 'DEBIAN/control');
    fs.writeFileSync(control, fs.readFileSync(control, 'utf8').replace(/^Version: .*$/m, `Version: ${VERSION}+next1`));
    const next = path.join(dir, `locker-agent_${VERSION}+next1.deb`);
    ok('dpkg-deb', ['--root-owner-group', '-Zgzip', '-z1', '--build', x, next], { timeout: 60_000 });
    fs.rmSync(x, { recursive: true, force: true });
    await dpkg(['-i', next]);
    expect(ok('dpkg-query', ['-W', '-f=${Version}', 'locker-agent'])).toBe(`${VERSION}+next1`);
    expect(fs.readFileSync('/etc/locker/agent.yaml', 'utf8')).toBe(mine);
    expect(statOf('/etc/locker/agent.yaml')).toEqual({ owner: 'root:locker', mode: '0640' });
    expect(fs.existsSync('/var/lib/locker/agent.db')).toBe(true);

    await dpkg(['-r', 'locker-agent']);
    expect(installedStatus()).toBe('deinstall ok config-files');
    for (const gone of ['/opt/locker-agent', '/usr/bin/locker-agent', '/lib/systemd/system/locker-agent.service', '/lib/udev/rules.d/60-locker-agent.rules']) expect(fs.existsSync(gone), gone).toBe(false);
    expect(fs.readFileSync('/etc/locker/agent.yaml', 'utf8')).toBe(mine);
    expect(fs.existsSync('/var/lib/locker/agent.db')).toBe(true);

    await dpkg(['-P', 'locker-agent']);
    expect(installedStatus()).toBeNull();
    expect(fs.existsSync('/etc/locker/agent.yaml')).toBe(false);
    expect(fs.existsSync('/etc/locker')).toBe(false);
    expect(fs.existsSync('/var/lib/locker')).toBe(false);
    failed = false;
  });
});
