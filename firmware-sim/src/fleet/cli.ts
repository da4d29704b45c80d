// `locker-sim fleet ...`: the fleet simulator on the command line (firmware-sim/README.md, "Fleet").
//   locker-sim fleet generate --terminals N [--pups P] [--lockers L] [--prefix P] --out FILE
//   locker-sim fleet run --provisioning FILE --broker mqtt(s)://HOST:PORT [options]
// Progress lines go to stderr (or JSON lines to stdout with --json-progress), the final summary is
// one JSON line on stdout. Bad arguments: one line "locker-sim fleet: ... [CODE]" and exit 2.
import fs from 'node:fs';
import readline from 'node:readline';
import { FleetError } from './errors';
import { Fleet, type FleetMetrics } from './fleet';
import { generateFleetSite, readFleetTerminals, siteToYaml } from './provisioning';

export const FLEET_USAGE = `Usage: locker-sim fleet generate|run [options]

Thousands of lightweight simulated terminals in one process, speaking the edge protocol
(docs/edge-protocol.md) to a central service's MQTT broker: status, code snapshots and deltas,
door events with journal id and seq (resent until acknowledged), command acks.

locker-sim fleet generate --terminals N [--pups P] [--lockers L] [--prefix P] [--tenant-id ID] --out FILE [--force]
    Writes a provisioning file: P pick up points (default N) with L lockers each (default 4),
    one tenant managing them all (client id and secret printed), N terminals "<prefix><i>"
    (default prefix fleet-) with generated high-entropy secrets. Apply it with
    "locker-central provision FILE" using the service's configuration (its terminal secret
    pepper), then run the fleet from the same file.

locker-sim fleet run --provisioning FILE --broker URL [options]
    --broker URL              mqtt://HOST:PORT or mqtts://HOST:PORT
    --terminals N             only the first N terminals of the file
    --prefix P                only terminals whose id starts with P
    --secret-env NAME         the plain secret for terminals whose file entry is an scrypt$ hash,
                              read from environment variable NAME
    --ca FILE                 CA certificate(s) for mqtts (PEM); --insecure skips verification
    --connect-rate R          first connects per second, paced with jitter (default 500; 0 = all at once)
    --reconnect-ms MS         the agent's back-off floor (default 2000); --reconnect-max-ms MS (default 60000)
    --connect-timeout-ms MS   CONNACK timeout (default 10000)
    --status-interval S       a status every S seconds while connected (default 60; 0 = none)
    --status-debounce-ms MS   a status after a change of codes or lockers waits MS, so that close
                              changes share one (default 200, as the agent; 0 = at once)
    --sync-timeout S          how long to wait for every terminal to be in sync (default 300)
    --events-per-second R     door events in total, spread over the terminals in sync
    --duration S              how long to run once all are in sync (or the sync timeout passed);
                              without it: until SIGINT/SIGTERM
    --code-log FILE           one JSON line per code arriving at a terminal ({t, terminal, code, shipment, kind})
    --progress S              a progress line every S seconds (default 5; 0 = none)
    --json-progress           progress as JSON lines on stdout instead of text on stderr
    --stdin-control           read commands on stdin: "mark" (measure the time to all in sync again,
                              counting only new connections), "events R S", "summary", "quit"
    --no-offline              stop without the clean offline status (as if the terminals lost power)
Exit status: 0 when every terminal got in sync and every event was acknowledged; 1 otherwise
(the summary says what is missing); 2 on bad arguments.
`;

export interface FleetGenerateArgs {
  cmd: 'generate';
  terminals: number;
  pups: number | null;
  lockers: number;
  prefix: string;
  tenantId: string | null;
  out: string;
  force: boolean;
}

export interface FleetRunArgs {
  cmd: 'run';
  provisioning: string;
  broker: string;
  terminals: number | null;
  prefix: string | null;
  secretEnv: string | null;
  ca: string | null;
  insecure: boolean;
  connectRate: number;
  reconnectMs: number;
  reconnectMaxMs: number;
  connectTimeoutMs: number;
  statusIntervalS: number;
  statusDebounceMs: number;
  syncTimeoutS: number;
  eventsPerSecond: number;
  durationS: number | null;
  codeLog: string | null;
  progressS: number;
  jsonProgress: boolean;
  stdinControl: boolean;
  offline: boolean;
}

export type FleetArgs = FleetGenerateArgs | FleetRunArgs | { cmd: 'help' };

const bad = (msg: string): never => {
  throw new FleetError('FLEET_ARGS_INVALID', msg);
};

function number(flag: string, v: string, o: { min?: number; int?: boolean } = {}): number {
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n) || (o.int && !Number.isInteger(n)) || (o.min !== undefined && n < o.min)) {
    bad(`${flag} must be ${o.int ? 'an integer' : 'a number'}${o.min !== undefined ? ` >= ${o.min}` : ''}, got "${v}"`);
  }
  return n;
}

export function parseFleetArgs(argv: string[]): FleetArgs {
  const [cmd, ...rest] = argv;
  if (cmd === undefined || cmd === '-h' || cmd === '--help' || cmd === 'help') return { cmd: 'help' };
  if (cmd !== 'generate' && cmd !== 'run') return bad(`unknown fleet command "${cmd}": generate or run (see locker-sim fleet --help)`);
  const flags = new Map<string, string | true>();
  const boolean = new Set(['--force', '--insecure', '--json-progress', '--stdin-control', '--no-offline', '--help', '-h']);
  for (let i = 0; i < rest.length; i++) {
    const a = rest[i]!;
    const eq = a.startsWith('--') ? a.indexOf('=') : -1;
    const flag = eq > 0 ? a.slice(0, eq) : a;
    if (!flag.startsWith('-')) bad(`unexpected argument "${a}" (see locker-sim fleet --help)`);
    if (boolean.has(flag)) {
      flags.set(flag, true);
      continue;
    }
    const v = eq > 0 ? a.slice(eq + 1) : rest[++i];
    if (v === undefined) bad(`${flag} needs a value`);
    flags.set(flag, v!);
  }
  if (flags.has('--help') || flags.has('-h')) return { cmd: 'help' };
  const known =
    cmd === 'generate'
      ? ['--terminals', '--pups', '--lockers', '--prefix', '--tenant-id', '--out', '--force']
      : ['--provisioning', '--broker', '--terminals', '--prefix', '--secret-env', '--ca', '--insecure', '--connect-rate', '--reconnect-ms', '--reconnect-max-ms', '--connect-timeout-ms', '--status-interval', '--status-debounce-ms', '--sync-timeout', '--events-per-second', '--duration', '--code-log', '--progress', '--json-progress', '--stdin-control', '--no-offline'];
  for (const f of flags.keys()) if (!known.includes(f)) bad(`unknown option ${f} for fleet ${cmd} (see locker-sim fleet --help)`);
  const str = (f: string): string | null => {
    const v = flags.get(f);
    return typeof v === 'string' ? v : null;
  };
  const num = (f: string, def: number, o: { min?: number; int?: boolean } = {}): number => (str(f) === null ? def : number(f, str(f)!, o));
  if (cmd === 'generate') {
    if (str('--terminals') === null) bad('fleet generate needs --terminals N');
    if (str('--out') === null) bad('fleet generate needs --out FILE');
    const terminals = num('--terminals', 0, { min: 1, int: true });
    const pups = str('--pups') === null ? null : num('--pups', 0, { min: 1, int: true });
    if (pups !== null && pups > terminals) bad(`--pups ${pups} is more than --terminals ${terminals}: every pick up point needs a terminal`);
    const lockers = num('--lockers', 4, { min: 1, int: true });
    if (lockers > 64 * 16) bad('--lockers must be at most 1024');
    const prefix = str('--prefix') ?? 'fleet-';
    if (!/^[A-Za-z0-9_.-]{1,60}$/.test(prefix)) bad(`--prefix must be letters, digits, _ . or -, got "${prefix}"`);
    return { cmd, terminals, pups, lockers, prefix, tenantId: str('--tenant-id'), out: str('--out')!, force: flags.has('--force') };
  }
  if (str('--provisioning') === null) bad('fleet run needs --provisioning FILE (see locker-sim fleet generate)');
  if (str('--broker') === null) bad('fleet run needs --broker mqtt://HOST:PORT or mqtts://HOST:PORT');
  const broker = str('--broker')!;
  let u: URL | null = null;
  try {
    u = new URL(broker);
  } catch {
    /* below */
  }
  if (!u || !['mqtt:', 'mqtts:', 'tcp:', 'ssl:', 'tls:', 'ws:', 'wss:'].includes(u.protocol) || !u.hostname) {
    throw new FleetError('FLEET_BROKER_URL_INVALID', `--broker must be mqtt://HOST:PORT or mqtts://HOST:PORT, got "${broker}"`);
  }
  return {
    cmd,
    provisioning: str('--provisioning')!,
    broker,
    terminals: str('--terminals') === null ? null : num('--terminals', 0, { min: 1, int: true }),
    prefix: str('--prefix'),
    secretEnv: str('--secret-env'),
    ca: str('--ca'),
    insecure: flags.has('--insecure'),
    connectRate: num('--connect-rate', 500, { min: 0 }),
    reconnectMs: num('--reconnect-ms', 2000, { min: 50, int: true }),
    reconnectMaxMs: num('--reconnect-max-ms', 60_000, { min: 50, int: true }),
    connectTimeoutMs: num('--connect-timeout-ms', 10_000, { min: 100, int: true }),
    statusIntervalS: num('--status-interval', 60, { min: 0 }),
    statusDebounceMs: num('--status-debounce-ms', 200, { min: 0, int: true }),
    syncTimeoutS: num('--sync-timeout', 300, { min: 0 }),
    eventsPerSecond: num('--events-per-second', 0, { min: 0 }),
    durationS: str('--duration') === null ? null : num('--duration', 0, { min: 0 }),
    codeLog: str('--code-log'),
    progressS: num('--progress', 5, { min: 0 }),
    jsonProgress: flags.has('--json-progress'),
    stdinControl: flags.has('--stdin-control'),
    offline: !flags.has('--no-offline'),
  };
}

function progressLine(m: FleetMetrics): string {
  const s = (ms: number | null) => (ms === null ? '-' : `${(ms / 1000).toFixed(1)} s`);
  const refused = Object.entries(m.refused)
    .map(([k, v]) => `${k}:${v}`)
    .join(' ');
  return `${(m.t / 1000).toFixed(0)} s: connected ${m.connected}/${m.terminals}, in sync ${m.inSync} (all in sync: ${s(m.allInSyncMs)}), attempts ${m.attempts}${refused ? `, refused ${refused}` : ''}, events acked ${m.events.acked}/${m.events.journalled} (${m.events.ackedPerSecond}/s, backlog ${m.events.backlog}), codes ${m.codes.arrived}, simulator loop delay max ${m.simLagMaxMs} ms`;
}

async function generate(a: FleetGenerateArgs): Promise<number> {
  if (fs.existsSync(a.out) && !a.force) throw new FleetError('FLEET_OUT_EXISTS', `${a.out} exists; pass --force to overwrite it`);
  const { site, tenant } = generateFleetSite({ terminals: a.terminals, ...(a.pups !== null ? { pups: a.pups } : {}), lockersPerPup: a.lockers, prefix: a.prefix, ...(a.tenantId ? { tenantId: a.tenantId } : {}) });
  fs.writeFileSync(a.out, siteToYaml(site), { mode: 0o600 });
  console.log(`wrote ${a.out}: ${site.terminals.length} terminals, ${site.pickupPoints.length} pick up points with ${a.lockers} lockers each, tenant ${tenant.clientId}`);
  console.log(`apply it: locker-central provision ${a.out}   (with the service's configuration; hashing the secrets takes about 50 ms per terminal once)`);
  console.log(`then: locker-sim fleet run --provisioning ${a.out} --broker mqtt://HOST:PORT`);
  console.log(`tenant client id ${tenant.clientId}, client secret in the file (tenants[0].clientSecret)`);
  return 0;
}

async function run(a: FleetRunArgs): Promise<number> {
  let secret: string | null = null;
  if (a.secretEnv) {
    secret = process.env[a.secretEnv] ?? null;
    if (!secret) throw new FleetError('FLEET_NO_SECRET', `--secret-env ${a.secretEnv}: the environment variable is not set`);
  }
  const terminals = readFleetTerminals(a.provisioning, { secret, only: a.terminals, prefix: a.prefix });
  let ca: Buffer | undefined;
  if (a.ca) {
    try {
      ca = fs.readFileSync(a.ca);
    } catch (err) {
      throw new FleetError('FLEET_CA_UNREADABLE', `--ca ${a.ca}: ${(err as Error).message}`);
    }
  }
  const codeLog = a.codeLog ? fs.createWriteStream(a.codeLog) : null;
  const fleet = new Fleet({
    url: a.broker,
    terminals,
    connectRate: a.connectRate,
    reconnectMs: a.reconnectMs,
    reconnectMaxMs: a.reconnectMaxMs,
    connectTimeoutMs: a.connectTimeoutMs,
    statusIntervalMs: a.statusIntervalS * 1000,
    statusDebounceMs: a.statusDebounceMs,
    mqttOptions: { ...(ca ? { ca } : {}), ...(a.insecure ? { rejectUnauthorized: false } : {}) },
    ...(codeLog ? { onCode: (id, c, at, _pushedAt, kind) => codeLog.write(`${JSON.stringify({ t: at, terminal: id, code: c.id, shipment: c.shipmentUid, kind })}\n`) } : {}),
  });
  const out = (obj: Record<string, unknown>) => process.stdout.write(`${JSON.stringify(obj)}\n`);
  let lastProgress = 0;
  fleet.on('tick', (m: FleetMetrics) => {
    if (a.progressS <= 0 || m.t - lastProgress < a.progressS * 1000 - 500) return;
    lastProgress = m.t;
    if (a.jsonProgress) {
      const { refusedTerminals: _r, ...rest } = m;
      out({ type: 'progress', ...rest });
    } else console.error(progressLine(m));
  });
  console.error(`fleet: ${terminals.length} terminals against ${a.broker.replace(/\/\/[^@/]*@/, '//')}`);
  fleet.start();

  let stopped: (code: number) => void = () => undefined;
  const done = new Promise<number>((r) => (stopped = r));
  const finish = async (): Promise<number> => {
    const m = fleet.metrics();
    await fleet.stop(a.offline);
    if (codeLog) await new Promise((r) => codeLog.end(r));
    const summary = { type: 'summary', ...m, stoppedAt: new Date().toISOString() };
    out(summary);
    const problems: string[] = [];
    if (m.allInSyncMs === null) problems.push(`${m.terminals - m.inSyncSinceMark} of ${m.terminals} terminals never got in sync`);
    if (m.neverConnected > 0) problems.push(`${m.neverConnected} terminal(s) never connected (${m.refusedTerminals.slice(0, 5).map((r) => `${r.id}: ${describeRefusal(r.code)}`).join(', ')})`);
    if (m.events.backlog > 0) problems.push(`${m.events.backlog} event(s) not acknowledged`);
    for (const p of problems) console.error(`locker-sim fleet: ${p}`);
    return problems.length ? 1 : 0;
  };
  let ending: Promise<number> | null = null;
  const end = () => (ending ??= finish().then((c) => (stopped(c), c)));
  process.once('SIGINT', () => void end());
  process.once('SIGTERM', () => void end());

  if (a.stdinControl) {
    const rl = readline.createInterface({ input: process.stdin });
    rl.on('line', (line) => {
      const [c, x, y] = line.trim().split(/\s+/);
      if (c === 'mark') {
        fleet.mark(true);
        out({ type: 'marked', t: fleet.metrics().t });
      } else if (c === 'events') {
        fleet.startEvents(Number(x), Number(y) * 1000);
        fleet.once('eventsDone', () => out({ type: 'eventsDone', ...fleet.metrics().events }));
      } else if (c === 'summary') out({ type: 'metrics', ...fleet.metrics() });
      else if (c === 'quit') void end();
      else if (c) out({ type: 'error', code: 'FLEET_BAD_COMMAND', message: `unknown command "${c}": mark, events R S, summary, quit` });
    });
    rl.on('close', () => void end());
    return done;
  }

  const syncDeadline = Date.now() + a.syncTimeoutS * 1000;
  while (fleet.metrics().allInSyncMs === null && Date.now() < syncDeadline && !ending) await new Promise((r) => setTimeout(r, 200));
  if (ending) return done;
  const m = fleet.metrics();
  console.error(m.allInSyncMs !== null ? `fleet: all ${m.terminals} terminals in sync after ${(m.allInSyncMs / 1000).toFixed(1)} s` : `fleet: ${m.inSync} of ${m.terminals} in sync after the sync timeout of ${a.syncTimeoutS} s; going on`);
  if (a.eventsPerSecond > 0) fleet.startEvents(a.eventsPerSecond, a.durationS === null ? null : a.durationS * 1000);
  if (a.durationS !== null) {
    await Promise.race([new Promise((r) => setTimeout(r, a.durationS! * 1000)), done]);
    if (!ending) {
      fleet.stopEvents();
      // the events journalled get up to 60 s to be acknowledged
      const drain = Date.now() + 60_000;
      while (fleet.metrics().events.backlog > 0 && Date.now() < drain && !ending) await new Promise((r) => setTimeout(r, 200));
      void end();
    }
  }
  return done;
}

export function describeRefusal(code: number | string): string {
  const names: Record<string, string> = { '1': 'CONNACK 1 (protocol)', '2': 'CONNACK 2 (client id rejected)', '3': 'CONNACK 3 (server unavailable)', '4': 'CONNACK 4 (bad user name or password)', '5': 'CONNACK 5 (not authorized)', '134': 'CONNACK 134 (bad user name or password)', '135': 'CONNACK 135 (not authorized)' };
  return names[String(code)] ?? String(code);
}

/** `locker-sim fleet ARGS`: the exit status. */
export async function fleetMain(argv: string[]): Promise<number> {
  let args: FleetArgs;
  try {
    args = parseFleetArgs(argv);
  } catch (err) {
    const code = err instanceof FleetError ? ` [${err.code}]` : '';
    console.error(`locker-sim fleet: ${(err as Error).message}${code}`);
    return 2;
  }
  if (args.cmd === 'help') {
    process.stdout.write(FLEET_USAGE);
    return 0;
  }
  try {
    return args.cmd === 'generate' ? await generate(args) : await run(args);
  } catch (err) {
    if (err instanceof FleetError) {
      console.error(`locker-sim fleet: ${err.message} [${err.code}]`);
      return 2;
    }
    throw err;
  }
}
