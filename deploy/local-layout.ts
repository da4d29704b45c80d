// The scale-out layout of docker-compose.yml without Docker: this machine's PostgreSQL (a database of
// its own), a Mosquitto process with deploy/mosquitto.conf (or a broker you name), the one-shot steps
// and two central instances, each run with the command and environment the compose file gives it.
//
//   npx tsx deploy/local-layout.ts [--database-url URL] [--mqtt-url URL | --mqtt-port N]
//                                  [--port SERVICE=PORT]... [--work-dir DIR] [--print-plan]
//
// docker-compose.yml is the one description of the layout: this script reads it and translates only
// what differs on one machine (docs/deploy.md, "Without Docker"):
// - a URL naming a compose service (postgres://...@postgres:5432/..., mqtt://mosquitto:1883) becomes
//   the local database URL or broker URL;
// - LOCKER_HTTP_HOST becomes 127.0.0.1 and LOCKER_HTTP_PORT the port the compose file publishes
//   for that instance (8081, 8082; --port overrides);
// - a path inside a container mount (/etc/locker/site.yaml, /var/lib/locker/mqtt/passwd) becomes
//   the mounted host path (deploy/site.yaml) or the named volume's folder under the work dir;
// - `user:` of a step runs it as that local user when this runs as root (the compose file's
//   mqtt-passwd step runs as `mosquitto`, the broker's user, which then owns the password file).
// Everything else (commands, variable names and values) is taken as it is: `localPlan()` returns the
// plan as data and packages/central/test/deploy-layout.test.ts compares it with the compose file.
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { parse as parseYaml } from 'yaml';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const COMPOSE_FILE = path.join(REPO, 'docker-compose.yml');
export const DOCKERFILE = path.join(REPO, 'Dockerfile');
/** where the Dockerfile puts the repository (`WORKDIR /opt/locker`, `COPY . .`) */
const IMAGE_ROOT = '/opt/locker';
/** the central image's name in the compose file */
export const CENTRAL_IMAGE = 'locker-central';

export interface ComposeService {
  image?: string;
  build?: string;
  command?: string[];
  environment?: Record<string, string>;
  user?: string;
  volumes?: string[];
  ports?: string[];
  depends_on?: Record<string, { condition: string }>;
  healthcheck?: { test: string[] };
  restart?: string;
}

/** docker-compose.yml as compose reads it (YAML merge keys resolved, values as strings). */
export function readCompose(file = COMPOSE_FILE): Record<string, ComposeService> {
  const doc = parseYaml(fs.readFileSync(file, 'utf8'), { merge: true }) as { services: Record<string, ComposeService> };
  for (const s of Object.values(doc.services)) {
    if (s.environment) s.environment = Object.fromEntries(Object.entries(s.environment).map(([k, v]) => [k, String(v)]));
  }
  return doc.services;
}

/** The Dockerfile's ENTRYPOINT and HEALTHCHECK (exec form), as the compose services run them. */
export function readDockerfile(file = DOCKERFILE): { entrypoint: string[]; healthcheck: string[] } {
  const text = fs.readFileSync(file, 'utf8');
  const json = (re: RegExp) => {
    const m = re.exec(text);
    if (!m) throw new Error(`${file}: no ${re.source}`);
    return JSON.parse(m[1]!) as string[];
  };
  return { entrypoint: json(/^ENTRYPOINT\s+(\[.*\])\s*$/m), healthcheck: json(/^HEALTHCHECK\b.*?\bCMD\s+(\[.*\])\s*$/m) };
}

/** An image path under the Dockerfile's WORKDIR as the path in this repository. */
export function imagePath(p: string): string {
  return p === IMAGE_ROOT || p.startsWith(`${IMAGE_ROOT}/`) ? path.join(REPO, p.slice(IMAGE_ROOT.length)) : p;
}

export interface LocalEndpoints {
  /** replaces the postgres service: a database of its own on this machine's PostgreSQL */
  databaseUrl: string;
  /** replaces the mosquitto service */
  mqttUrl: string;
  /** named volumes become folders here */
  workDir: string;
  /** per central instance: its HTTP port (default: the host port the compose file publishes) */
  httpPorts?: Record<string, number>;
}

export interface Translation {
  service: string;
  /** `env NAME`, `arg N` or `user` */
  what: string;
  compose: string;
  local: string;
}

export interface PlanStep {
  service: string;
  /** oneshot: runs to completion before what depends on it; instance: a central instance, gated on /ready */
  kind: 'oneshot' | 'instance';
  /** the arguments of locker-central (the image's ENTRYPOINT) */
  args: string[];
  env: Record<string, string>;
  /** compose `user:` (run as this local user when root) */
  user?: string;
  /** the services this one waits for (compose depends_on) */
  after: string[];
}

export interface LocalPlan {
  /** the central image's services in start order */
  steps: PlanStep[];
  /** every value this plan changed from the compose file, and why (the rest is taken as it is) */
  translations: Translation[];
  /** named volume -> local folder */
  volumes: Record<string, string>;
  /** the broker: the config file and the paths it names, translated through the mosquitto service's mounts */
  broker: { service: string; config: string; mounts: Mount[] };
  /** the backing services replaced by local ones */
  replaced: Record<string, string>;
  /** the ENTRYPOINT and HEALTHCHECK of the image, as local commands (node is this node) */
  entrypoint: string[];
  healthcheck: string[];
}

interface Mount {
  container: string;
  local: string;
  /** a named volume (not a bind mount of the repository) */
  volume: boolean;
  readOnly: boolean;
}

function mountsOf(svc: ComposeService, volumes: Record<string, string>): Mount[] {
  return (svc.volumes ?? []).map((v) => {
    const [src, target, mode] = v.split(':') as [string, string, string | undefined];
    const bind = src.startsWith('.') || src.startsWith('/');
    const local = bind ? path.resolve(REPO, src) : volumes[src];
    if (!local) throw new Error(`volume ${src} is not declared`);
    return { container: target, local, volume: !bind, readOnly: mode === 'ro' };
  });
}

function throughMounts(p: string, mounts: Mount[]): string | null {
  for (const m of mounts) {
    if (p === m.container) return m.local;
    if (p.startsWith(`${m.container}/`)) return path.join(m.local, p.slice(m.container.length + 1));
  }
  return null;
}

function order(services: Record<string, ComposeService>): string[] {
  const out: string[] = [];
  const visit = (name: string, seen: string[]) => {
    if (out.includes(name)) return;
    if (seen.includes(name)) throw new Error(`depends_on cycle: ${[...seen, name].join(' -> ')}`);
    for (const d of Object.keys(services[name]?.depends_on ?? {})) visit(d, [...seen, name]);
    out.push(name);
  };
  for (const name of Object.keys(services)) visit(name, []);
  return out;
}

/** The layout of the compose file as local commands and environments. */
export function localPlan(services: Record<string, ComposeService>, ep: LocalEndpoints, dockerfile = readDockerfile()): LocalPlan {
  const volumes: Record<string, string> = {};
  for (const s of Object.values(services)) {
    for (const v of s.volumes ?? []) {
      const src = v.split(':')[0]!;
      if (!src.startsWith('.') && !src.startsWith('/')) volumes[src] = path.join(ep.workDir, 'volumes', src);
    }
  }
  // the backing services and what replaces them here
  const replaced: Record<string, string> = {};
  let brokerService = '';
  for (const [name, s] of Object.entries(services)) {
    if (s.image?.startsWith('postgres:')) replaced[name] = ep.databaseUrl;
    else if (s.image?.startsWith('eclipse-mosquitto:')) {
      replaced[name] = ep.mqttUrl;
      brokerService = name;
    } else if (s.image !== CENTRAL_IMAGE) throw new Error(`service ${name}: image ${s.image} is neither ${CENTRAL_IMAGE}, postgres nor eclipse-mosquitto`);
  }
  if (!brokerService) throw new Error('no eclipse-mosquitto service in the compose file');
  const oneshots = new Set<string>();
  for (const s of Object.values(services)) for (const [d, c] of Object.entries(s.depends_on ?? {})) if (c.condition === 'service_completed_successfully') oneshots.add(d);

  const translations: Translation[] = [];
  const steps: PlanStep[] = [];
  for (const name of order(services)) {
    const s = services[name]!;
    if (s.image !== CENTRAL_IMAGE) continue;
    const mounts = mountsOf(s, volumes);
    const kind = oneshots.has(name) ? 'oneshot' : 'instance';
    const args = s.command ?? ['serve'];
    const localArgs = args.map((a, i) => {
      const local = throughMounts(a, mounts);
      if (local === null) return a;
      translations.push({ service: name, what: `arg ${i}`, compose: a, local });
      return local;
    });
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(s.environment ?? {})) {
      let local = v;
      if (/^[a-z][a-z0-9+.-]*:\/\//i.test(v)) {
        const host = new URL(v).hostname;
        if (replaced[host] !== undefined) local = replaced[host]!;
        else if (services[host]) throw new Error(`${name}: ${k} names service ${host}, which has no local replacement`);
      } else if (k === 'LOCKER_HTTP_HOST') local = '127.0.0.1';
      else if (k === 'LOCKER_HTTP_PORT') {
        const published = (s.ports ?? []).map((p) => String(p).split(':')).find((p) => p[p.length - 1] === v);
        const port = ep.httpPorts?.[name] ?? (published && published.length > 1 ? Number(published[published.length - 2]) : undefined);
        if (port === undefined) throw new Error(`${name}: no port published for ${k}=${v}; pass one`);
        local = String(port);
      }
      env[k] = local;
      if (local !== v) translations.push({ service: name, what: `env ${k}`, compose: v, local });
    }
    steps.push({ service: name, kind, args: localArgs, env, ...(s.user ? { user: s.user } : {}), after: Object.keys(s.depends_on ?? {}) });
  }
  const broker = services[brokerService]!;
  const brokerMounts = mountsOf(broker, volumes);
  const config = throughMounts('/mosquitto/config/mosquitto.conf', brokerMounts);
  if (!config) throw new Error(`${brokerService}: /mosquitto/config/mosquitto.conf is not mounted`);
  const node = (cmd: string[]) => (cmd[0] === 'node' ? [process.execPath, ...cmd.slice(1).map(imagePath)] : cmd.map(imagePath));
  return {
    steps,
    translations,
    volumes,
    broker: { service: brokerService, config, mounts: brokerMounts },
    replaced,
    entrypoint: node(dockerfile.entrypoint),
    healthcheck: node(dockerfile.healthcheck),
  };
}

/** deploy/mosquitto.conf for a local process: the listener on 127.0.0.1:port, its paths through the compose mounts. */
export function brokerConfig(plan: LocalPlan, port: number): string {
  const lines = fs.readFileSync(plan.broker.config, 'utf8').split('\n');
  return lines
    .map((l) => {
      const m = /^(\s*)(listener|password_file|acl_file|persistence_location)\s+(\S+)(.*)$/.exec(l);
      if (!m) return l;
      if (m[2] === 'listener') return `listener ${port} 127.0.0.1`;
      const local = throughMounts(m[3]!.replace(/\/$/, ''), plan.broker.mounts);
      if (local === null) throw new Error(`${plan.broker.config}: ${m[2]} ${m[3]} is outside the mosquitto service's mounts`);
      return `${m[2]} ${local}${m[3]!.endsWith('/') ? '/' : ''}`;
    })
    .join('\n');
}

// ---------------------------------------------------------------------------------------------
// Running it

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(p));
    });
    s.once('error', reject);
  });
}

const listening = (host: string, port: number) =>
  new Promise<boolean>((r) => {
    const c = net.connect(port, host);
    c.once('connect', () => {
      c.destroy();
      r(true);
    });
    c.once('error', () => r(false));
  });

/** Creates the database of the URL on its server when it is missing (PostgreSQL, a superuser or CREATEDB). */
export async function ensureDatabase(url: string): Promise<void> {
  const u = new URL(url);
  const name = decodeURIComponent(u.pathname.slice(1));
  if (!/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(name)) throw new Error(`database name ${name}: letters, digits and _ only`);
  u.pathname = '/postgres';
  const c = new pg.Client({ connectionString: u.toString() });
  await c.connect();
  try {
    const r = await c.query('select 1 from pg_database where datname = $1', [name]);
    if (r.rowCount === 0) await c.query(`create database "${name}"`);
  } finally {
    await c.end();
  }
}

export async function dropDatabase(url: string): Promise<void> {
  const u = new URL(url);
  const name = decodeURIComponent(u.pathname.slice(1));
  u.pathname = '/postgres';
  const c = new pg.Client({ connectionString: u.toString() });
  await c.connect();
  try {
    await c.query(`drop database if exists "${name}" with (force)`);
  } finally {
    await c.end();
  }
}

function localUser(name: string): { uid: number; gid: number } {
  try {
    return { uid: Number(execFileSync('id', ['-u', name]).toString().trim()), gid: Number(execFileSync('id', ['-g', name]).toString().trim()) };
  } catch {
    throw new Error(`user ${name} (compose user:) does not exist on this machine (the mosquitto package creates the user mosquitto)`);
  }
}

/** The environment of a step: this process's, without its LOCKER_* settings, plus the step's. */
function stepEnv(step: PlanStep): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('LOCKER_')) env[k] = v;
  return { ...env, ...step.env };
}

export interface LayoutOptions {
  databaseUrl: string;
  /** use this broker instead of starting Mosquitto (it must use the password file this writes: see the log) */
  mqttUrl?: string;
  /** the private Mosquitto's port (default: a free one) */
  mqttPort?: number;
  workDir: string;
  httpPorts?: Record<string, number>;
  composeFile?: string;
  /** progress lines (default: none) */
  log?: (line: string) => void;
  /** how long an instance may take to answer /ready (ms) */
  readyTimeoutMs?: number;
}

export interface RunningLayout {
  plan: LocalPlan;
  /** central instance -> its base URL */
  instances: Record<string, string>;
  mqttUrl: string;
  /** the password file the one-shot step wrote */
  passwdFile: string | null;
  logs: string;
  stop(): Promise<void>;
}

export async function runLayout(opts: LayoutOptions): Promise<RunningLayout> {
  const log = opts.log ?? (() => undefined);
  const services = readCompose(opts.composeFile);
  const mqttPort = opts.mqttUrl ? null : (opts.mqttPort ?? (await freePort()));
  const mqttUrl = opts.mqttUrl ?? `mqtt://127.0.0.1:${mqttPort}`;
  const workDir = path.resolve(opts.workDir);
  const plan = localPlan(services, { databaseUrl: opts.databaseUrl, mqttUrl, workDir, httpPorts: opts.httpPorts });
  const logs = path.join(workDir, 'logs');
  fs.mkdirSync(logs, { recursive: true });
  const root = process.getuid?.() === 0;
  const children: { name: string; proc: ChildProcess }[] = [];
  const instances: Record<string, string> = {};
  let passwdFile: string | null = null;

  const stop = async () => {
    for (const { proc } of children.splice(0).reverse()) {
      if (proc.exitCode !== null || proc.signalCode !== null) continue;
      const exited = new Promise<void>((r) => proc.once('exit', () => r()));
      proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(t);
    }
  };

  const spawnLogged = (name: string, argv: string[], env: NodeJS.ProcessEnv, user?: string) => {
    const out = fs.openSync(path.join(logs, `${name}.log`), 'a');
    const ids = user && root ? localUser(user) : {};
    const proc = spawn(argv[0]!, argv.slice(1), { cwd: REPO, env, stdio: ['ignore', out, out], ...ids });
    fs.closeSync(out);
    return proc;
  };
  const tail = (name: string) => {
    try {
      return fs.readFileSync(path.join(logs, `${name}.log`), 'utf8').slice(-2000);
    } catch {
      return '';
    }
  };

  try {
    // named volumes: a folder each; a step's `user:` owns the volumes it mounts (the image makes
    // the mount point that user's: Dockerfile, /var/lib/locker/mqtt)
    for (const dir of Object.values(plan.volumes)) fs.mkdirSync(dir, { recursive: true });
    if (root) {
      for (const step of plan.steps) {
        if (!step.user) continue;
        const { uid, gid } = localUser(step.user);
        for (const v of services[step.service]!.volumes ?? []) {
          const dir = plan.volumes[v.split(':')[0]!];
          if (dir) fs.chownSync(dir, uid, gid);
        }
      }
    }
    // the backing services, as the compose healthchecks see them
    await ensureDatabase(opts.databaseUrl);
    const c = new pg.Client({ connectionString: opts.databaseUrl });
    await c.connect();
    await c.query('select 1');
    await c.end();
    log(`postgres: ${opts.databaseUrl.replace(/\/\/([^:@/]+):[^@/]+@/, '//$1:***@')}`);

    const startBroker = async () => {
      if (mqttPort === null) {
        log(`${plan.broker.service}: using ${mqttUrl}; it must read the password file written to ${passwdFile}`);
        return;
      }
      const conf = path.join(workDir, 'mosquitto.conf');
      fs.writeFileSync(conf, brokerConfig(plan, mqttPort));
      fs.chmodSync(conf, 0o644);
      if (root) {
        // Mosquitto started as root runs as its own user: its store must be that user's
        const { uid, gid } = localUser('mosquitto');
        for (const m of plan.broker.mounts) if (m.volume && !m.readOnly) fs.chownSync(m.local, uid, gid);
      }
      const bin = ['/usr/sbin/mosquitto', '/usr/bin/mosquitto'].find((p) => fs.existsSync(p)) ?? 'mosquitto';
      const proc = spawnLogged(plan.broker.service, [bin, '-c', conf], process.env);
      children.push({ name: plan.broker.service, proc });
      for (let i = 0; i < 200; i++) {
        if (proc.exitCode !== null) break;
        if (await listening('127.0.0.1', mqttPort)) {
          log(`${plan.broker.service}: ${mqttUrl} (${conf})`);
          return;
        }
        await sleep(50);
      }
      throw new Error(`mosquitto did not come up on ${mqttUrl}: ${tail(plan.broker.service)}`);
    };

    const runStep = async (step: PlanStep) => {
      const argv = [...plan.entrypoint, ...step.args];
      const proc = spawnLogged(step.service, argv, stepEnv(step), step.user);
      if (step.kind === 'oneshot') {
        const [code, signal] = await new Promise<[number | null, string | null]>((r) => proc.once('exit', (c2, s) => r([c2, s])));
        if (code !== 0) throw new Error(`${step.service} failed (exit ${code ?? signal}): ${tail(step.service)}`);
        if (step.args[0] === 'mqtt-passwd') passwdFile = step.args[step.args.indexOf('--out') + 1] ?? null;
        log(`${step.service}: done`);
        return;
      }
      children.push({ name: step.service, proc });
      // the image's HEALTHCHECK, with the instance's environment
      const deadline = Date.now() + (opts.readyTimeoutMs ?? 60_000);
      for (;;) {
        if (proc.exitCode !== null) throw new Error(`${step.service} exited (${proc.exitCode}): ${tail(step.service)}`);
        const check = spawn(plan.healthcheck[0]!, plan.healthcheck.slice(1), { env: stepEnv(step), stdio: 'ignore' });
        const code = await new Promise<number | null>((r) => check.once('exit', (c2) => r(c2)));
        if (code === 0) break;
        if (Date.now() > deadline) throw new Error(`${step.service} not ready within ${opts.readyTimeoutMs ?? 60_000} ms: ${tail(step.service)}`);
        await sleep(250);
      }
      instances[step.service] = `http://127.0.0.1:${step.env.LOCKER_HTTP_PORT}`;
      log(`${step.service}: ready at ${instances[step.service]}`);
    };

    // compose order: depends_on, topologically
    for (const name of order(services)) {
      if (name === plan.broker.service) await startBroker();
      const step = plan.steps.find((s) => s.service === name);
      if (step) await runStep(step);
    }
  } catch (e) {
    await stop();
    throw e;
  }
  return { plan, instances, mqttUrl, passwdFile, logs, stop };
}

async function main(argv: string[]) {
  const { values } = parseArgs({
    args: argv,
    options: {
      'database-url': { type: 'string', default: 'postgres://postgres@127.0.0.1:5432/locker_layout' },
      'mqtt-url': { type: 'string' },
      'mqtt-port': { type: 'string' },
      port: { type: 'string', multiple: true },
      'work-dir': { type: 'string', default: path.join(REPO, 'data', 'local-layout') },
      'print-plan': { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  const out = (s: string) => process.stdout.write(`${s}\n`);
  if (values.help) {
    out(fs.readFileSync(fileURLToPath(import.meta.url), 'utf8').split('\n').filter((l) => l.startsWith('//')).map((l) => l.slice(3)).join('\n'));
    return;
  }
  const httpPorts: Record<string, number> = {};
  for (const p of values.port ?? []) {
    const m = /^([\w-]+)=(\d+)$/.exec(p);
    if (!m) throw new Error(`--port ${p}: expected SERVICE=PORT, e.g. central-1=9081`);
    httpPorts[m[1]!] = Number(m[2]);
  }
  const opts: LayoutOptions = {
    databaseUrl: values['database-url']!,
    mqttUrl: values['mqtt-url'],
    mqttPort: values['mqtt-port'] ? Number(values['mqtt-port']) : undefined,
    workDir: values['work-dir']!,
    httpPorts,
    log: out,
  };
  if (values['print-plan']) {
    const mqttUrl = opts.mqttUrl ?? `mqtt://127.0.0.1:${opts.mqttPort ?? 1883}`;
    out(JSON.stringify(localPlan(readCompose(), { databaseUrl: opts.databaseUrl, mqttUrl, workDir: path.resolve(opts.workDir), httpPorts }), null, 2));
    return;
  }
  const layout = await runLayout(opts);
  out(`\nlayout up (logs in ${layout.logs}); Ctrl-C stops it`);
  for (const [name, url] of Object.entries(layout.instances)) out(`  ${name}: ${url}/v1/  (${url}/ready)`);
  out(`  MQTT: ${layout.mqttUrl}   (terminals log in with their provisioned secrets)`);
  const done = async () => {
    await layout.stop();
    process.exit(0);
  };
  process.on('SIGINT', () => void done());
  process.on('SIGTERM', () => void done());
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main(process.argv.slice(2)).catch((e) => {
    console.error(`local-layout: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(1);
  });
}
