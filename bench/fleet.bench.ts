// The fleet bench (issue 15 part 3): simulated terminals (`locker-sim fleet run`, firmware-sim/src/
// fleet) against the central service as an operator runs it, in two setups:
//   (a) one central node (`locker-central serve` in a child process): embedded broker, SQLite;
//   (b) Mosquitto (a private one on a free port: deploy/mosquitto.conf and deploy/mosquitto.acl with
//       a generated password file) and two central instances on PostgreSQL (a fresh database per
//       run, dropped after), sharing terminal events through mqtt.sharedGroup.
// Every process is a child of this one (central instances, the fleet, Mosquitto), so the central
// service can be killed with SIGKILL and its CPU and memory read from /proc. Reported per setup:
// - storm: N terminals connect at once (a fleet that waited for its central service); time until
//   all hold their codes (connected, status delivered, a code snapshot held);
// - restart: the central service SIGKILLed and started again ((a) the node; (b) both instances);
//   time until every terminal is reconnected and in sync again ((b): the terminals stay connected
//   to Mosquitto, so the figure is until the instances serve again: a booking made as soon as the
//   API answers reaches its terminal);
// - booking -> code: bookings through the HTTP API (CreateLocalShipment) spread over time against
//   a fleet of BENCH_FLEET_LATENCY_TERMINALS (1,000): from the API's answer to the arrival of the
//   booking's first code at its terminal (the fleet's code log; same machine, same clock);
// - door events ingested end to end: the fleet journals door events at a rate above the goal for a
//   few seconds (each terminal at most 32 ahead of its acknowledgement, as the agent); the rate is
//   the events acknowledged (committed) per second from the first event to the last ack; "lost" is
//   what the fleet journalled minus the rows in edge_events (must be 0); beside it the central
//   CPU per 1,000 events (from the burst's start to the last ack; /proc), which a busy machine
//   disturbs far less than the rate;
// - central RSS and CPU: RSS with N connected minus RSS before any terminal, per 1,000; CPU of an
//   idle connected fleet (status every 60 s) per 1,000, and CPU seconds the storm cost.
// Terminals share one high-entropy secret (one scrypt hash in the provisioning file; in (a) each
// row gets its fast digest written directly, as provisioning a plain secret writes it, without
// hashing 10,000 secrets first), as the hand-run bench/mqtt-storm.ts did (this bench replaces it).
//
// Env: BENCH_FLEET_TERMINALS (storm and restart N of (a); default 2000: 10000 takes about 5 minutes on
// the 2-core machine, which would take the whole bench past its 10 minutes), BENCH_FLEET_LATENCY_TERMINALS
// (1000), BENCH_FLEET_BOOKINGS (200), BENCH_FLEET_EVENTS_RATE (15000/s) and
// BENCH_FLEET_EVENTS_SECONDS (3), BENCH_FLEET_SETUPS (a,b), BENCH_FLEET_TERMINALS_B (setup (b)'s N,
// default 1000: more there too would take the bench well past its 3 minutes), BENCH_FLEET_CONNECT_RATE
// (first connects per second, 0 = all at once, the default), BENCH_FLEET_SYNC_TIMEOUT_S (how long to
// wait for all in sync, 60 = the goal; the storm counts it on the fleet's clock, from its first connect),
// BENCH_FLEET_TRACE (a file: every progress line with the broker's accept queue),
// BENCH_FLEET_RESTART_NODE_ARGS (node options of the restarted node, e.g. --cpu-prof), BENCH_FLEET_LATENCIES=1
// (every booking's latency to its terminal printed, sorted: where a p99 comes from).
// Alone: npx tsx --conditions=@locker/source bench/run.ts fleet
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { generateFleetSite } from '../firmware-sim/src/fleet/provisioning';
import { percentile } from '../firmware-sim/src/fleet/fleet';
import { generateTerminalSecret, terminalDigestKey, terminalSecretDigest } from '../packages/central/src/auth/terminal-secret-digest';
import { hashSecret } from '../packages/central/src/auth/secrets';
import { openDatabase } from '../packages/central/src/db/database';
import { mosquittoHash } from '../packages/central/src/mqtt/passwd';
import { reachable } from './support';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const CENTRAL_CLI = path.join(ROOT, 'packages/central/src/cli.ts');
const SIM_CLI = path.join(ROOT, 'firmware-sim/src/cli.ts');
const NODE_TS = ['--import', 'tsx', '--conditions=@locker/source'];
const PG_BASE = process.env.LOCKER_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const MOSQUITTO = ['/usr/sbin/mosquitto', '/usr/bin/mosquitto'].find((p) => fs.existsSync(p));

const env = (k: string, d: number) => (process.env[k] ? Number(process.env[k]) : d);
const N = env('BENCH_FLEET_TERMINALS', 2_000);
const N_B = env('BENCH_FLEET_TERMINALS_B', 1_000);
const N_LAT = env('BENCH_FLEET_LATENCY_TERMINALS', 1_000);
const BOOKINGS = env('BENCH_FLEET_BOOKINGS', 200);
const EV_RATE = env('BENCH_FLEET_EVENTS_RATE', 15_000);
const EV_SECONDS = env('BENCH_FLEET_EVENTS_SECONDS', 3);
const CONNECT_RATE = env('BENCH_FLEET_CONNECT_RATE', 0);
const SETUPS = (process.env.BENCH_FLEET_SETUPS ?? 'a,b').split(',');
const SYNC_TIMEOUT_MS = env('BENCH_FLEET_SYNC_TIMEOUT_S', 60) * 1000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const log = (s: string) => console.error(`[fleet] ${s}`);

async function freePort(): Promise<number> {
  const net = await import('node:net');
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => resolve(p));
    });
  });
}

function procStat(pid: number): { cpuMs: number; rssMiB: number } | null {
  try {
    const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return { cpuMs: ((Number(f[11]) + Number(f[12])) * 1000) / 100, rssMiB: (Number(f[21]) * 4096) / 2 ** 20 };
  } catch {
    return null;
  }
}

/** A `locker-central serve` child (node with tsx loaded: its pid is the service's own, SIGKILL hits it). */
class Central {
  proc: ChildProcess | null = null;
  stderr = '';
  exited: { code: number | null; signal: string | null } | null = null;
  constructor(
    readonly label: string,
    readonly env: NodeJS.ProcessEnv,
    readonly httpPort: number,
  ) {}
  get pid(): number {
    return this.proc!.pid!;
  }
  get base(): string {
    return `http://127.0.0.1:${this.httpPort}`;
  }
  async start(nodeArgs: string[] = []): Promise<void> {
    this.exited = null;
    const p = spawn(process.execPath, [...nodeArgs, ...NODE_TS, CENTRAL_CLI, 'serve'], { env: this.env, stdio: ['ignore', 'ignore', 'pipe'], cwd: ROOT });
    this.proc = p;
    p.stderr!.on('data', (d) => (this.stderr = (this.stderr + d).slice(-20_000)));
    p.on('exit', (code, signal) => (this.exited = { code, signal }));
    await this.waitReady(60_000);
  }
  /** until GET /ready answers 200 (throws after `ms`, or when the process exits) */
  async waitReady(ms: number): Promise<void> {
    const deadline = Date.now() + ms;
    for (;;) {
      if (this.exited) throw new Error(`${this.label} exited while starting: ${this.stderr.slice(-2000)}`);
      try {
        const r = await fetch(`${this.base}/ready`);
        if (r.status === 200) return;
      } catch {
        /* not listening yet */
      }
      if (Date.now() > deadline) throw new Error(`${this.label} not ready within ${ms / 1000} s: ${this.stderr.slice(-2000)}`);
      await sleep(100);
    }
  }
  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    const p = this.proc;
    if (!p || this.exited) return;
    const gone = new Promise((r) => p.once('exit', r));
    p.kill(signal);
    await Promise.race([gone, sleep(15_000)]);
    if (!this.exited) {
      p.kill('SIGKILL');
      await gone;
    }
  }
}

type Json = Record<string, any>;

/**
 * BENCH_FLEET_TRACE=<file>: every progress line of the fleet, with the broker's accept queue (the
 * connections the kernel holds that the broker has not accepted yet), appended to that file.
 */
const TRACE = process.env.BENCH_FLEET_TRACE ?? '';

/** The accept queue of the socket listening on 127.0.0.1:port (/proc/net/tcp: rx_queue of a listening socket). */
function acceptQueue(port: number): number | null {
  try {
    const hexPort = port.toString(16).toUpperCase().padStart(4, '0');
    for (const line of fs.readFileSync('/proc/net/tcp', 'utf8').split('\n')) {
      const f = line.trim().split(/\s+/);
      if (f[3] === '0A' && f[1]?.endsWith(`:${hexPort}`)) return parseInt(f[4]!.split(':')[1]!, 16);
    }
  } catch {
    /* not Linux */
  }
  return null;
}

/** A `locker-sim fleet run --stdin-control --json-progress` child. */
class FleetProc {
  proc: ChildProcess;
  last: Json = {};
  stderr = '';
  private waiters: { pred: (m: Json) => boolean; resolve: (m: Json) => void }[] = [];
  exit: Promise<number | null>;
  private readonly port: number | null;
  constructor(args: string[], extraEnv: NodeJS.ProcessEnv) {
    const broker = args[args.indexOf('--broker') + 1];
    this.port = broker ? Number(new URL(broker).port) || null : null;
    this.proc = spawn(process.execPath, ['--max-old-space-size=4096', ...NODE_TS, SIM_CLI, 'fleet', 'run', '--stdin-control', '--json-progress', '--progress', '1', '--no-offline', ...args], { env: { ...process.env, ...extraEnv }, stdio: ['pipe', 'pipe', 'pipe'], cwd: ROOT });
    this.proc.stderr!.on('data', (d) => (this.stderr = (this.stderr + d).slice(-10_000)));
    const rl = readline.createInterface({ input: this.proc.stdout! });
    rl.on('line', (line) => {
      let m: Json;
      try {
        m = JSON.parse(line);
      } catch {
        return;
      }
      if (m.type === 'progress' || m.type === 'metrics' || m.type === 'summary') this.last = m;
      if (TRACE && m.type === 'progress') fs.appendFileSync(TRACE, `${JSON.stringify({ ...pick(m), simLagMaxMs: m.simLagMaxMs, acceptQueue: this.port ? acceptQueue(this.port) : null })}\n`);
      for (const w of [...this.waiters]) {
        if (w.pred(m)) {
          this.waiters.splice(this.waiters.indexOf(w), 1);
          w.resolve(m);
        }
      }
    });
    this.exit = new Promise((r) => this.proc.once('exit', (c) => r(c)));
  }
  next(pred: (m: Json) => boolean, timeoutMs: number, what: string): Promise<Json | null> {
    return new Promise((resolve) => {
      const w = { pred, resolve: (m: Json) => (clearTimeout(timer), resolve(m)) };
      const timer = setTimeout(() => {
        this.waiters.splice(this.waiters.indexOf(w), 1);
        log(`timed out after ${timeoutMs} ms waiting for ${what}; last: ${JSON.stringify(pick(this.last))}`);
        resolve(null);
      }, timeoutMs);
      this.waiters.push(w);
    });
  }
  send(line: string): void {
    this.proc.stdin!.write(`${line}\n`);
  }
  async quit(): Promise<Json> {
    const summary = this.next((m) => m.type === 'summary', 60_000, 'the fleet summary');
    this.send('quit');
    const s = await summary;
    await Promise.race([this.exit, sleep(10_000)]);
    if (this.proc.exitCode === null) this.proc.kill('SIGKILL');
    return s ?? this.last;
  }
}

/**
 * The storm's figure counts from the fleet's first connection attempt (its progress `t`), not from
 * spawning the simulator: starting it (compiling, 10,000 terminal objects) takes seconds on a
 * loaded 2-core machine, and counting them cut the storm's 60 s short by 7-13 s. Done when all are
 * in sync, or when the fleet's clock passes the 60 s; the wait itself allows the start on top.
 */
const stormDone = (m: Json) => m.type === 'progress' && (m.allInSyncMs !== null || m.t >= SYNC_TIMEOUT_MS);
const FLEET_START_ALLOWANCE_MS = 60_000;

const pick = (m: Json) => ({ t: m.t, connected: m.connected, inSync: m.inSync, inSyncSinceMark: m.inSyncSinceMark, refused: m.refused, attempts: m.attempts, events: m.events });

interface SetupResult {
  name: string;
  n: number;
  storm: { allInSyncS: number | null; inSync: number; attempts: number; refused: Json; centralCpuS: number; fleetCpuS: number; wallS: number; fleetRssMiB: number };
  restart: { what: string; allInSyncS: number | null; inSync: number; attempts: number; refused: Json; probeS?: number | null };
  rss: { connected: number; snapshotsIdle: number; baseMiB: number; connectedMiB: number; perThousandMiB: number; idleCpuPctPerThousand: number; instances: number };
  latency: { n: number; bookings: number; p50: number | null; p99: number | null; max: number | null; lost: number; beforeAnswer: number; stormS: number | null };
  events: { journalled: number; acked: number; stored: number; ratePerS: number; drainS: number; lost: number; backlog: number; centralCpuMsPerThousand: number } | null;
  notes: string[];
}

/** Writes the fleet's provisioning file (one shared secret) and applies it with `locker-central provision`. */
function provision(dir: string, n: number, centralEnv: NodeJS.ProcessEnv, secret: string, hash: string) {
  const { site, tenant } = generateFleetSite({ terminals: n, lockersPerPup: 4, prefix: 'fleet-', sharedSecret: { secret, hash } });
  const file = path.join(dir, 'fleet.json');
  fs.writeFileSync(file, JSON.stringify(site));
  const t0 = Date.now();
  execFileSync(process.execPath, [...NODE_TS, CENTRAL_CLI, 'provision', file], { env: centralEnv, stdio: ['ignore', 'ignore', 'inherit'], cwd: ROOT });
  log(`provisioned ${n} terminals, ${site.pickupPoints.length} pick up points in ${Date.now() - t0} ms`);
  return { file, site, tenant };
}

async function tenantToken(base: string, tenant: { clientId: string; clientSecret: string }): Promise<string> {
  const r = await fetch(`${base}/connect/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'client_credentials', client_id: tenant.clientId, client_secret: tenant.clientSecret, scope: 'integration_api' }),
  });
  if (r.status !== 200) throw new Error(`token: ${r.status} ${await r.text()}`);
  return ((await r.json()) as { access_token: string }).access_token;
}

async function post(base: string, token: string, p: string, body: unknown): Promise<Json> {
  const r = await fetch(`${base}${p}`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` }, body: JSON.stringify(body) });
  const b = (await r.json()) as Json;
  if (r.status !== 200 || b.success !== true) throw new Error(`${p}: ${r.status} ${JSON.stringify(b).slice(0, 300)}`);
  return b;
}

/** The storm: N terminals at once; then the kill and restart; the fleet is stopped after. */
async function stormAndRestart(o: {
  n: number;
  url: string;
  file: string;
  secret: string;
  centrals: Central[];
  restart: 'reconnect' | 'probe';
  probe?: () => Promise<number | null>;
}): Promise<Pick<SetupResult, 'storm' | 'restart' | 'rss'>> {
  const pids = () => o.centrals.map((c) => c.pid);
  const sumStat = (): { cpuMs: number; rssMiB: number } => {
    const out = { cpuMs: 0, rssMiB: 0 };
    for (const pid of pids()) {
      const st = procStat(pid);
      out.cpuMs += st?.cpuMs ?? 0;
      out.rssMiB += st?.rssMiB ?? 0;
    }
    return out;
  };
  await sleep(1000);
  const base = sumStat();
  const fleet = new FleetProc(['--provisioning', o.file, '--broker', o.url, '--secret-env', 'FLEET_SECRET', '--terminals', String(o.n), '--connect-rate', String(CONNECT_RATE), '--status-interval', '60'], { FLEET_SECRET: o.secret });
  const fleetCpu0 = procStat(fleet.proc.pid!)?.cpuMs ?? 0;
  const w0 = Date.now();
  let peakRss = 0;
  const sampler = setInterval(() => (peakRss = Math.max(peakRss, sumStat().rssMiB)), 500);
  try {
    const synced = await fleet.next(stormDone, SYNC_TIMEOUT_MS + FLEET_START_ALLOWANCE_MS, `all ${o.n} in sync`);
    const afterStorm = sumStat();
    const m0 = synced ?? fleet.last;
    const fst = procStat(fleet.proc.pid!);
    const fleetCpuS = ((fst?.cpuMs ?? 0) - fleetCpu0) / 1000;
    const storm = { allInSyncS: m0.allInSyncMs == null ? null : m0.allInSyncMs / 1000, inSync: m0.inSync, attempts: m0.attempts, refused: m0.refused, centralCpuS: (afterStorm.cpuMs - base.cpuMs) / 1000, fleetCpuS, wallS: (Date.now() - w0) / 1000, fleetRssMiB: Math.round(fst?.rssMiB ?? 0) };
    log(`storm: ${JSON.stringify(storm)}`);
    // idle: N connected, statuses every 60 s
    await sleep(2000);
    const i0 = sumStat();
    const snaps0 = Number(fleet.last.codes?.snapshots ?? 0);
    const t0 = Date.now();
    await sleep(5000);
    const i1 = sumStat();
    const snapshotsIdle = Number(fleet.last.codes?.snapshots ?? 0) - snaps0;
    const idleCpuPct = ((i1.cpuMs - i0.cpuMs) / (Date.now() - t0)) * 100;
    // per 1,000 of the terminals connected then (all N unless the storm did not finish)
    const connected = Number(fleet.last.connected ?? o.n);
    const k = Math.max(1, connected) / 1000;
    const rss = { connected, snapshotsIdle, baseMiB: Math.round(base.rssMiB), connectedMiB: Math.round(i1.rssMiB), perThousandMiB: Number(((i1.rssMiB - base.rssMiB) / k).toFixed(1)), idleCpuPctPerThousand: Number((idleCpuPct / k).toFixed(2)), instances: o.centrals.length };
    log(`memory/cpu: ${JSON.stringify(rss)} (peak ${Math.round(peakRss)} MiB)`);

    // the kill
    let restart: SetupResult['restart'];
    if (o.restart === 'reconnect') {
      const c = o.centrals[0]!;
      await c.kill('SIGKILL');
      fleet.send('mark');
      const r0 = Date.now();
      // the figure is the terminals back in sync, whether or not /ready answers meanwhile (a node
      // busy with a reconnecting fleet may answer /ready late: that time is reported beside it)
      // BENCH_FLEET_RESTART_NODE_ARGS: node options for the restarted node, e.g. a V8 tick log
      // ('--prof --logfile=/tmp/v8.log --no-logfile-per-isolate', read with node --prof-process);
      // it is stopped once the restart is measured and started again without them
      const nodeArgs = (process.env.BENCH_FLEET_RESTART_NODE_ARGS ?? '').split(' ').filter(Boolean);
      const ready = c.start(nodeArgs).then(
        () => Date.now() - r0,
        () => null,
      );
      const again = await fleet.next((m) => m.type === 'progress' && m.allInSyncMs !== null && m.markedAtMs > 0, SYNC_TIMEOUT_MS, 'all in sync after the restart');
      const m1 = again ?? fleet.last;
      const readyMs = await ready;
      log(`central restarted (/ready ${readyMs === null ? 'not answered 200 within 60 s' : `after ${readyMs} ms`} since the kill)`);
      restart = {
        what: `the node SIGKILLed and started again; /ready answered 200 ${readyMs === null ? 'not within 60 s' : `${(readyMs / 1000).toFixed(1)} s after the kill`}`,
        allInSyncS: m1.allInSyncMs == null ? null : m1.allInSyncMs / 1000,
        inSync: m1.inSyncSinceMark,
        attempts: m1.attempts - m0.attempts,
        refused: m1.refused,
      };
      if (nodeArgs.length) {
        await c.kill('SIGTERM');
        await c.start();
      } else if (readyMs === null) await c.waitReady(120_000);
    } else {
      const k0 = Date.now();
      await Promise.all(o.centrals.map((c) => c.kill('SIGKILL')));
      await Promise.all(o.centrals.map((c) => c.start()));
      const probeMs = o.probe ? await o.probe() : null;
      const m1 = (await fleet.next((m) => m.type === 'progress', 5000, 'progress')) ?? fleet.last;
      restart = {
        what: 'both instances SIGKILLed and started again (the terminals stay connected to Mosquitto)',
        allInSyncS: probeMs === null ? null : (Date.now() - k0) / 1000,
        probeS: probeMs === null ? null : probeMs / 1000,
        inSync: m1.inSync,
        attempts: m1.attempts - m0.attempts,
        refused: m1.refused,
      };
    }
    log(`restart: ${JSON.stringify(restart)}`);
    return { storm, restart, rss };
  } finally {
    clearInterval(sampler);
    await fleet.quit();
  }
}

/** Bookings against a fleet of N_LAT terminals (code log), then the door-event burst. */
async function latencyAndEvents(o: {
  url: string;
  file: string;
  secret: string;
  base: string;
  tenant: { clientId: string; clientSecret: string };
  pups: string[];
  countEvents: () => Promise<number>;
  dir: string;
  /** the central processes, whose CPU the event burst costs (per 1,000 events: a figure less disturbed by other work on the machine than the rate) */
  centrals: Central[];
}): Promise<Pick<SetupResult, 'latency' | 'events'>> {
  const codeLog = path.join(o.dir, 'codes.jsonl');
  const n = Math.min(N_LAT, o.pups.length);
  const fleet = new FleetProc(['--provisioning', o.file, '--broker', o.url, '--secret-env', 'FLEET_SECRET', '--terminals', String(n), '--connect-rate', '0', '--code-log', codeLog], { FLEET_SECRET: o.secret });
  try {
    const synced = await fleet.next(stormDone, SYNC_TIMEOUT_MS + FLEET_START_ALLOWANCE_MS, `all ${n} in sync`);
    const stormS = synced?.allInSyncMs != null ? synced.allInSyncMs / 1000 : null;
    const token = await tenantToken(o.base, o.tenant);
    const user = (await post(o.base, token, '/v1/Account/CreateOrGetAccount', { emailAddress: 'fleet-bench@example.test', firstName: 'Fleet', lastName: 'Bench', pickUpPointUid: o.pups[0] })).userUid as string;
    await sleep(1000);
    const answered = new Map<string, number>();
    const spacing = 50;
    const t0 = Date.now();
    for (let i = 0; i < BOOKINGS; i++) {
      const due = t0 + i * spacing;
      if (Date.now() < due) await sleep(due - Date.now());
      const pup = o.pups[(i * 7) % n]!;
      const b = await post(o.base, token, '/v1/Logistics/CreateLocalShipment', { ToUserUid: user, PupUid: pup, Dimension: { width: 30, height: 10, length: 40 }, AllowLargerLockers: true, AllowOverflowLockers: false });
      answered.set(b.shipmentUid as string, Date.now());
    }
    await sleep(3000);
    const arrived = new Map<string, number>();
    for (const line of fs.readFileSync(codeLog, 'utf8').split('\n')) {
      if (!line) continue;
      const c = JSON.parse(line) as { t: number; shipment: string; kind: string };
      if (!answered.has(c.shipment)) continue;
      const prev = arrived.get(c.shipment);
      if (prev === undefined || c.t < prev) arrived.set(c.shipment, c.t);
    }
    const lat: number[] = [];
    let before = 0;
    for (const [s, at] of answered) {
      const a = arrived.get(s);
      if (a === undefined) continue;
      if (a < at) before++;
      lat.push(Math.max(0, a - at));
    }
    lat.sort((a, b) => a - b);
    const latency = { n, bookings: answered.size, p50: percentile(lat, 50), p99: percentile(lat, 99), max: lat.length ? lat[lat.length - 1]! : null, lost: answered.size - lat.length, beforeAnswer: before, stormS };
    log(`booking -> code: ${JSON.stringify(latency)}`);
    if (process.env.BENCH_FLEET_LATENCIES) log(`lat: ${JSON.stringify(lat)}`);

    // door events
    const stored0 = await o.countEvents();
    const centralCpu = () => o.centrals.reduce((sum, c) => sum + (procStat(c.pid)?.cpuMs ?? 0), 0);
    const cpu0 = centralCpu();
    let cpuAtLastAck = cpu0;
    const done = fleet.next((m) => m.type === 'eventsDone', EV_SECONDS * 1000 + 30_000, 'the event burst');
    const e0 = Date.now();
    fleet.send(`events ${EV_RATE} ${EV_SECONDS}`);
    const burst = await done;
    const journalled = burst?.journalled ?? 0;
    let acked = 0;
    // the rate is taken up to the last acknowledgement seen: 15 s of draining measures it as well
    // as a longer wait (setup (b) ingests 500-1,500 events/s and would need minutes to drain a
    // 3 s burst at 15,000/s; that wait only lengthened the bench)
    const drainDeadline = Date.now() + 15_000;
    let lastAckAt = Date.now();
    for (;;) {
      fleet.send('summary');
      const m = await fleet.next((x) => x.type === 'metrics', 5000, 'metrics');
      if (m) {
        if (m.events.acked > acked) {
          lastAckAt = Date.now();
          cpuAtLastAck = centralCpu();
        }
        acked = m.events.acked;
        if (m.events.backlog === 0 || Date.now() > drainDeadline) break;
      }
      await sleep(200);
    }
    const stored = (await o.countEvents()) - stored0;
    const spanS = (lastAckAt - e0) / 1000;
    // lost: journalled, acknowledged to the terminal and yet not in edge_events; what is still
    // unacknowledged when the drain window ends is the backlog (the terminal keeps it), not lost
    const events = { journalled, acked, stored, ratePerS: Math.round(acked / spanS), drainS: Number(spanS.toFixed(1)), lost: Math.max(0, acked - stored), backlog: journalled - acked, centralCpuMsPerThousand: acked ? Number(((cpuAtLastAck - cpu0) / (acked / 1000)).toFixed(1)) : 0 };
    log(`events: ${JSON.stringify(events)}`);
    return { latency, events };
  } finally {
    await fleet.quit();
  }
}

async function setupA(): Promise<SetupResult> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-fleet-a-'));
  const secret = generateTerminalSecret();
  const hash = hashSecret(secret);
  const pepper = crypto.randomBytes(32).toString('base64url');
  const mqttPort = await freePort();
  const httpPort = await freePort();
  const dbUrl = path.join(dir, 'locker.db');
  const cenv: NodeJS.ProcessEnv = { ...process.env, LOCKER_DATABASE_URL: dbUrl, LOCKER_MQTT_PORT: String(mqttPort), LOCKER_MQTT_HOST: '127.0.0.1', LOCKER_HTTP_PORT: String(httpPort), LOCKER_HTTP_HOST: '127.0.0.1', LOCKER_LOG_LEVEL: 'warn', LOCKER_ENVIRONMENT: 'staging', LOCKER_MQTT_TERMINAL_SECRET_PEPPER: pepper, LOCKER_HTTP_RATE_LIMIT_PER_MINUTE: '0' };
  const notes: string[] = [];
  const central = new Central('central', cenv, httpPort);
  try {
    const n = Math.max(N, N_LAT);
    const { file, site, tenant } = provision(dir, n, cenv, secret, hash);
    // the fast digests, as provisioning a plain high-entropy secret writes them
    const key = terminalDigestKey({ pepper })!;
    const db = await openDatabase({ url: dbUrl, sqliteSynchronous: 'NORMAL' });
    await db.kysely.transaction().execute(async (trx) => {
      for (const t of site.terminals) await trx.updateTable('terminals').set({ secret_fast: terminalSecretDigest(key, t.id, hash, secret) }).where('id', '=', t.id).execute();
    });
    await db.close();
    await central.start();
    const url = `mqtt://127.0.0.1:${mqttPort}`;
    const sr = await stormAndRestart({ n: N, url, file, secret, centrals: [central], restart: 'reconnect' });
    if (central.exited) notes.push(`the central service exited: ${JSON.stringify(central.exited)}`);
    await sleep(2000);
    const Sqlite = (await import('better-sqlite3')).default;
    const countEvents = async () => {
      const d = new Sqlite(dbUrl, { readonly: true, fileMustExist: true });
      try {
        return Number((d.prepare('SELECT count(*) AS n FROM edge_events').get() as { n: number }).n);
      } finally {
        d.close();
      }
    };
    const le = await latencyAndEvents({ url, file, secret, base: central.base, tenant, pups: site.terminals.map((t) => t.pupUid), countEvents, dir, centrals: [central] });
    if (central.exited) notes.push(`the central service exited: ${JSON.stringify(central.exited)}; stderr: ${central.stderr.slice(-500)}`);
    return { name: '(a) one node, embedded broker, SQLite', n: N, ...sr, ...le, notes };
  } finally {
    await central.kill('SIGTERM');
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

async function setupB(): Promise<SetupResult | string> {
  if (!MOSQUITTO) return 'skipped: no mosquitto binary on this machine';
  if (!(await reachable('127.0.0.1', 5432))) return 'skipped: PostgreSQL not reachable at 127.0.0.1:5432';
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-fleet-b-'));
  fs.chmodSync(dir, 0o777); // mosquitto started as root drops to its own user
  const dbName = `fleet_bench_${crypto.randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: PG_BASE });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${dbName}`);
  const dbUrl = PG_BASE.replace(/\/[^/]*$/, `/${dbName}`);
  let mosq: ChildProcess | null = null;
  const centrals: Central[] = [];
  const notes: string[] = [];
  try {
    const secret = generateTerminalSecret();
    const hash = hashSecret(secret);
    const n = Math.max(N_B, N_LAT);
    const httpPorts = [await freePort(), await freePort()];
    const mqttPort = await freePort();
    const url = `mqtt://127.0.0.1:${mqttPort}`;
    const users: [string, string][] = [['central-1', crypto.randomBytes(18).toString('base64url')], ['central-2', crypto.randomBytes(18).toString('base64url')]];
    const cenv = (i: number): NodeJS.ProcessEnv => ({ ...process.env, LOCKER_DATABASE_URL: dbUrl, LOCKER_MQTT_MODE: 'external', LOCKER_MQTT_URL: url, LOCKER_MQTT_USERNAME: users[i]![0], LOCKER_MQTT_PASSWORD: users[i]![1], LOCKER_MQTT_SHARED_GROUP: 'central', LOCKER_HTTP_PORT: String(httpPorts[i]), LOCKER_HTTP_HOST: '127.0.0.1', LOCKER_LOG_LEVEL: 'warn', LOCKER_ENVIRONMENT: 'staging', LOCKER_HTTP_RATE_LIMIT_PER_MINUTE: '0' });
    const { file, site, tenant } = provision(dir, n, cenv(0), secret, hash);
    // Mosquitto: deploy/mosquitto.conf and its ACL, a password file of every terminal (one shared secret: one PBKDF2 hash) and both instances
    const th = mosquittoHash(secret);
    const passwd = path.join(dir, 'passwd');
    fs.writeFileSync(passwd, [...users.map(([u, p]) => `${u}:${mosquittoHash(p)}`), ...site.terminals.map((t) => `${t.id}:${th}`), ''].join('\n'), { mode: 0o644 });
    const replaced = /^\s*(listener|password_file|acl_file|persistence_location|log_dest)\b/;
    const kept = fs.readFileSync(path.join(ROOT, 'deploy/mosquitto.conf'), 'utf8').split('\n').filter((l) => !replaced.test(l));
    const conf = path.join(dir, 'mosquitto.conf');
    fs.writeFileSync(conf, [`listener ${mqttPort} 127.0.0.1`, `password_file ${passwd}`, `acl_file ${path.join(ROOT, 'deploy/mosquitto.acl')}`, `persistence_location ${dir}/`, ...kept, ''].join('\n'));
    mosq = spawn(MOSQUITTO, ['-c', conf], { stdio: ['ignore', 'ignore', 'pipe'] });
    let mosqErr = '';
    mosq.stderr!.on('data', (d) => (mosqErr = (mosqErr + d).slice(-5000)));
    const deadline = Date.now() + 10_000;
    while (!(await reachable('127.0.0.1', mqttPort))) {
      if (Date.now() > deadline || mosq.exitCode !== null) throw new Error(`mosquitto did not start: ${mosqErr}`);
      await sleep(100);
    }
    for (let i = 0; i < 2; i++) centrals.push(new Central(`central-${i + 1}`, cenv(i), httpPorts[i]!));
    await centrals[0]!.start(); // migrations once
    await centrals[1]!.start();
    const token0 = await tenantToken(centrals[0]!.base, tenant);
    const probeUser = (await post(centrals[0]!.base, token0, '/v1/Account/CreateOrGetAccount', { emailAddress: 'fleet-probe@example.test', firstName: 'Fleet', lastName: 'Probe', pickUpPointUid: site.pickupPoints[0]!.uid })).userUid as string;
    // after the restart: a booking at the PUP of fleet-0 as soon as the API answers, and its codes
    // seen at the terminal through the central's records (edge_pushed_codes of fleet-0)
    const probe = async (): Promise<number | null> => {
      const t0 = Date.now();
      const token = await tenantToken(centrals[0]!.base, tenant);
      const b = await post(centrals[0]!.base, token, '/v1/Logistics/CreateLocalShipment', { ToUserUid: probeUser, PupUid: site.pickupPoints[0]!.uid, Dimension: { width: 30, height: 10, length: 40 }, AllowLargerLockers: true, AllowOverflowLockers: false });
      const c = new pg.Client({ connectionString: dbUrl });
      await c.connect();
      try {
        for (;;) {
          const r = await c.query('SELECT count(*)::int AS n FROM edge_pushed_codes p JOIN access_codes a ON a.uid = p.code_uid WHERE p.terminal_id = $1 AND a.shipment_uid = $2', ['fleet-0', b.shipmentUid]);
          if (r.rows[0].n > 0) return Date.now() - t0;
          if (Date.now() - t0 > 60_000) return null;
          await sleep(20);
        }
      } finally {
        await c.end();
      }
    };
    const sr = await stormAndRestart({ n: N_B, url, file, secret, centrals, restart: 'probe', probe });
    for (const c of centrals) if (c.exited) notes.push(`${c.label} exited: ${JSON.stringify(c.exited)}`);
    const countEvents = async () => {
      const c = new pg.Client({ connectionString: dbUrl });
      await c.connect();
      try {
        return (await c.query('SELECT count(*)::int AS n FROM edge_events')).rows[0].n as number;
      } finally {
        await c.end();
      }
    };
    const le = await latencyAndEvents({ url, file, secret, base: centrals[0]!.base, tenant, pups: site.terminals.map((t) => t.pupUid), countEvents, dir, centrals });
    return { name: '(b) Mosquitto, two central instances, PostgreSQL', n: N_B, ...sr, ...le, notes };
  } finally {
    for (const c of centrals) await c.kill('SIGTERM');
    if (mosq && mosq.exitCode === null) {
      const gone = new Promise((r) => mosq!.once('exit', r));
      mosq.kill('SIGTERM');
      await Promise.race([gone, sleep(5000)]);
    }
    await admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`).catch((e) => log(`drop database: ${(e as Error).message}`));
    await admin.end();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const s = (x: number | null | undefined, unit = ' s') => (x === null || x === undefined ? 'not reached' : `${Number(x).toFixed(1)}${unit}`);

function table(results: (SetupResult | { name: string; skipped: string })[]): string {
  const ok = results.filter((r): r is SetupResult => !('skipped' in r));
  const cols = ok.map((r) => r.name);
  const row = (label: string, f: (r: SetupResult) => string) => `| ${label} | ${ok.map(f).join(' | ')} |`;
  if (!ok.length) return results.map((r) => `${r.name}: ${(r as { skipped: string }).skipped}.`).join('\n\n');
  const lines = [
    `| figure | ${cols.join(' | ')} | goal |`,
    `|---|${cols.map(() => '---|').join('')}---|`,
    `${row('terminals in the storm and restart (N)', (r) => r.n.toLocaleString('en'))} |`,
    `${row('all N hold their codes after the first connect (all at once)', (r) => `${r.storm.allInSyncS === null ? `not within ${SYNC_TIMEOUT_MS / 1000} s` : s(r.storm.allInSyncS)} (${r.storm.inSync.toLocaleString('en')} in sync then, ${r.storm.attempts} attempts${Object.keys(r.storm.refused).length ? `, refused ${JSON.stringify(r.storm.refused)}` : ''})`)} <= 60 s at 10,000 |`,
    `${row('CPU spent on that storm: central / the fleet simulator', (r) => `${r.storm.centralCpuS.toFixed(1)} s / ${r.storm.fleetCpuS.toFixed(1)} s in ${r.storm.wallS.toFixed(0)} s (the simulator's RSS: ${r.storm.fleetRssMiB} MiB)`)} |`,
    `${row('after SIGKILL + restart of the central service: all in sync again', (r) => `${r.restart.allInSyncS === null ? `not within ${SYNC_TIMEOUT_MS / 1000} s (${r.restart.inSync.toLocaleString('en')} back in sync)` : s(r.restart.allInSyncS)} (${r.restart.what}${r.restart.probeS !== undefined ? `; a booking made when the API answered reached its terminal ${s(r.restart.probeS)} later` : `; ${r.restart.attempts} attempts`})`)} <= 60 s at 10,000 |`,
    `${row('booking answered -> terminal holds the code, p50 / p99 / max', (r) => `${r.latency.p50 ?? '-'} / ${r.latency.p99 ?? '-'} / ${r.latency.max ?? '-'} ms (${r.latency.bookings} bookings at N = ${r.latency.n.toLocaleString('en')}, ${r.latency.lost} lost, ${r.latency.beforeAnswer} before the answer)`)} p99 <= 50 ms at 1,000 |`,
    `${row('door events ingested end to end', (r) => (r.events ? `${r.events.ratePerS.toLocaleString('en')}/s (${r.events.acked.toLocaleString('en')} of ${r.events.journalled.toLocaleString('en')} events acknowledged in ${r.events.drainS} s${r.events.backlog ? `, ${r.events.backlog.toLocaleString('en')} still unacknowledged when the bench stopped waiting` : ''}; ${r.events.stored.toLocaleString('en')} rows in edge_events; lost ${r.events.lost}; central CPU ${r.events.centralCpuMsPerThousand} ms per 1,000 events)` : '-'))} >= 5,000/s on one node, none lost |`,
    `${row('central RSS per 1,000 connected terminals', (r) => `${r.rss.perThousandMiB} MiB (${r.rss.baseMiB} MiB before the fleet, ${r.rss.connectedMiB} MiB with ${r.rss.connected.toLocaleString('en')} connected${r.rss.instances > 1 ? `, ${r.rss.instances} instances together` : ''})`)} documented |`,
    `${row('central CPU per 1,000 connected idle terminals', (r) => `${r.rss.idleCpuPctPerThousand} % of a core (over 5 s, ${r.rss.connected.toLocaleString('en')} connected${r.rss.connected < r.n ? ', the rest still trying' : ''}; code snapshots received meanwhile: ${r.rss.snapshotsIdle.toLocaleString('en')})`)} documented |`,
  ];
  for (const r of results) if ('skipped' in r) lines.push('', `${r.name}: ${r.skipped}.`);
  for (const r of ok) for (const n of r.notes) lines.push('', `${r.name}: ${n}`);
  return lines.join('\n');
}

export default async function fleetBench(): Promise<{ title: string; markdown: string }> {
  const results: (SetupResult | { name: string; skipped: string })[] = [];
  if (SETUPS.includes('a')) {
    try {
      results.push(await setupA());
    } catch (e) {
      results.push({ name: '(a) one node, embedded broker, SQLite', skipped: `FAILED: ${(e as Error).message.slice(0, 500)}` });
    }
  }
  if (SETUPS.includes('b')) {
    try {
      const r = await setupB();
      results.push(typeof r === 'string' ? { name: '(b) Mosquitto, two central instances, PostgreSQL', skipped: r } : r);
    } catch (e) {
      results.push({ name: '(b) Mosquitto, two central instances, PostgreSQL', skipped: `FAILED: ${(e as Error).message.slice(0, 500)}` });
    }
  }
  const md = [
    `Simulated terminals (\`locker-sim fleet\`, one process) against \`locker-central serve\` child processes; terminals share one high-entropy secret (fast digest). Storm: N connect at once. Restart: SIGKILL, then start again. Bookings: ${BOOKINGS} through the HTTP API, one every 50 ms, against ${N_LAT.toLocaleString('en')} connected terminals (one per pick up point). Events: door events at ${EV_RATE.toLocaleString('en')}/s for ${EV_SECONDS} s over those terminals, each at most 32 ahead of its acknowledgement.`,
    '',
    table(results),
  ].join('\n');
  return { title: 'Fleet: simulated terminals against the central service', markdown: md };
}
