// A terminal connect storm against one central node (embedded broker, SQLite), as an operator
// would see it: N terminals log in at once, as after a central restart. Not part of `npm run bench`
// (10,000 terminals take minutes); run by hand, one size at a time:
//
//   npx tsx bench/mqtt-storm.ts --terminals 2000 [--seconds 180] [--connect-timeout 30000] [--fast-digest no]
//
// It provisions N terminals (one shared secret, stored as one scrypt hash: every login still costs
// its own scrypt check, as the logins are told apart by terminal id). The secret is high-entropy
// (generateTerminalSecret) and, unless --fast-digest no, each terminal row gets its fast digest
// under a pepper given to the service (LOCKER_MQTT_TERMINAL_SECRET_PEPPER), as provisioning a plain
// high-entropy secret writes it (written here directly: provisioning 10,000 plain secrets would
// cost 10,000 scrypt hashes first), so logins cost one HMAC each. Then it starts `locker-central serve`
// in a child process, and runs bench/mqtt-storm-clients.mjs (mqtt.js clients, another process)
// against it. Reported: time until all N are connected and until all hold a code snapshot, connect
// attempts, refusals by CONNACK code, timeouts, the central process' CPU and memory, and whether
// it stayed up. docs/benchmarks.md, "Terminal connect storm".
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import YAML from 'yaml';
import { generateTerminalSecret, terminalDigestKey, terminalSecretDigest } from '../packages/central/src/auth/terminal-secret-digest';
import { openDatabase } from '../packages/central/src/db/database';

const { values } = parseArgs({ options: { terminals: { type: 'string', default: '2000' }, seconds: { type: 'string', default: '180' }, 'connect-timeout': { type: 'string', default: '30000' }, 'fast-digest': { type: 'string', default: 'yes' } } });
const FAST = values['fast-digest'] !== 'no';
const pepper = crypto.randomBytes(32).toString('base64url');
const N = Number(values.terminals);
const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-storm-'));
const secret = generateTerminalSecret();

function scryptHash(s: string): string {
  const salt = crypto.randomBytes(16);
  const h = crypto.scryptSync(s, salt, 32, { N: 16384, r: 8, p: 1 });
  return `scrypt$16384$8$1$${salt.toString('base64url')}$${h.toString('base64url')}`;
}

async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  const p = (s.address() as net.AddressInfo).port;
  await new Promise((r) => s.close(r));
  return p;
}

function procStat(pid: number): { cpuMs: number; rssMiB: number } | null {
  try {
    const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    const tick = 100; // USER_HZ
    return { cpuMs: ((Number(f[11]) + Number(f[12])) * 1000) / tick, rssMiB: (Number(f[21]) * 4096) / 2 ** 20 };
  } catch {
    return null;
  }
}

async function main() {
  const site = YAML.parse(fs.readFileSync(path.join(root, 'packages/central/provisioning/demo-site.yaml'), 'utf8'));
  const pupUid = site.pickupPoints[0].uid;
  const hash = scryptHash(secret);
  site.terminals = Array.from({ length: N }, (_, i) => ({ id: `storm-${i}`, pupUid, secret: hash }));
  const file = path.join(dir, 'site.json');
  fs.writeFileSync(file, JSON.stringify(site));
  const mqttPort = await freePort();
  const env = { ...process.env, LOCKER_DATABASE_URL: path.join(dir, 'locker.db'), LOCKER_MQTT_PORT: String(mqttPort), LOCKER_HTTP_PORT: '0', LOCKER_LOG_LEVEL: 'warn', LOCKER_ENVIRONMENT: 'staging', ...(FAST ? { LOCKER_MQTT_TERMINAL_SECRET_PEPPER: pepper } : {}) };
  const tsx = path.join(root, 'node_modules/.bin/tsx');
  const cli = path.join(root, 'packages/central/src/cli.ts');
  const p0 = Date.now();
  execFileSync(tsx, ['--conditions=@locker/source', cli, 'provision', file], { env, stdio: ['ignore', 'ignore', 'inherit'] });
  if (FAST) {
    const key = terminalDigestKey({ pepper })!;
    const db = await openDatabase({ url: env.LOCKER_DATABASE_URL, sqliteSynchronous: 'NORMAL' });
    await db.kysely.transaction().execute(async (trx) => {
      for (let i = 0; i < N; i++) await trx.updateTable('terminals').set({ secret_fast: terminalSecretDigest(key, `storm-${i}`, hash, secret) }).where('id', '=', `storm-${i}`).execute();
    });
    await db.close();
  }
  console.error(`provisioned ${N} terminals${FAST ? ' with fast digests' : ''} in ${Date.now() - p0} ms`);

  const central: ChildProcess = spawn(tsx, ['--conditions=@locker/source', cli, 'serve'], { env, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  central.stderr!.on('data', (d) => (stderr = (stderr + d).slice(-20_000)));
  let exit: { code: number | null; signal: string | null; atMs: number } | null = null;
  const started = Date.now();
  central.on('exit', (code, signal) => (exit = { code, signal, atMs: Date.now() - started }));
  for (;;) {
    const ok = await new Promise<boolean>((r) => {
      const s = net.connect(mqttPort, '127.0.0.1', () => (s.destroy(), r(true)));
      s.on('error', () => r(false));
    });
    if (ok) break;
    if (exit) throw new Error(`central exited before listening: ${stderr}`);
    await new Promise((r) => setTimeout(r, 200));
  }
  // the central process' node pid: tsx runs it in a child of its own
  const pids = execFileSync('pgrep', ['-P', String(central.pid)]).toString().trim().split('\n').map(Number);
  const pid = pids[pids.length - 1] ?? central.pid!;
  const cpu0 = procStat(pid);
  const t0 = Date.now();
  const load = spawn(process.execPath, [path.join(root, 'bench/mqtt-storm-clients.mjs'), `mqtt://127.0.0.1:${mqttPort}`, String(N), secret, 'storm-', String(Number(values.seconds) * 1000), String(values['connect-timeout'])], { stdio: ['ignore', 'pipe', 'inherit'] });
  let last: Record<string, unknown> = {};
  let peakRss = 0;
  const sampler = setInterval(() => {
    const s = procStat(pid);
    if (s) peakRss = Math.max(peakRss, s.rssMiB);
  }, 500);
  let buf = '';
  load.stdout!.on('data', (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      try {
        last = JSON.parse(line);
        if (Number(last.t) % 10_000 < 1000) console.error(`${Math.round(Number(last.t) / 1000)} s: connected ${last.connected}, with codes ${last.withCodes}, attempts ${last.attempts}, timeouts ${last.timeouts}, refused ${JSON.stringify(last.refused)}${exit ? ', CENTRAL EXITED' : ''}`);
      } catch {
        /* partial line */
      }
    }
  });
  await new Promise((r) => load.on('exit', r));
  clearInterval(sampler);
  const cpu1 = procStat(pid);
  const wall = Date.now() - t0;
  const result = {
    terminals: N,
    fastDigest: FAST,
    allConnectedS: last.allConnectedMs == null ? null : Number(last.allConnectedMs) / 1000,
    allWithCodesS: last.allCodesMs == null ? null : Number(last.allCodesMs) / 1000,
    connectedAtEnd: last.connected,
    withCodesAtEnd: last.withCodes,
    attempts: last.attempts,
    refused: last.refused,
    timeouts: last.timeouts,
    wallS: wall / 1000,
    centralCpuS: cpu0 && cpu1 ? (cpu1.cpuMs - cpu0.cpuMs) / 1000 : null,
    centralPeakRssMiB: Math.round(peakRss),
    centralExit: exit,
  };
  console.log(JSON.stringify(result));
  if (exit) console.error(`central stderr (tail):\n${stderr.slice(-3000)}`);
  central.kill('SIGTERM');
  await new Promise((r) => setTimeout(r, 1000));
  fs.rmSync(dir, { recursive: true, force: true });
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
