// The crash test's processes (packages/agent/test/crash.process.test.ts): the central service
// (`locker-central provision` + `serve`, SQLite, embedded broker), the simulator (`locker-sim`, the
// boards on TCP, a scanner on a socat pty, driven over its control port) and the terminal agent
// (`locker-agent run --config FILE`), each a real child process, plus the tenant API client and a
// read-only view of the central database.
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { freePort } from '../../../central/test/support/mosquitto';

export { freePort };

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../..');
export const CENTRAL_BIN = path.join(ROOT, 'packages/central/bin/locker-central.js');
export const AGENT_BIN = path.join(ROOT, 'packages/agent/bin/locker-agent.js');
export const SIM_BIN = path.join(ROOT, 'firmware-sim/bin/locker-sim.js');

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls fn until it returns something truthy; the error names what was awaited and how long. */
export async function waitFor<T>(fn: () => T | undefined | null | false | Promise<T | undefined | null | false>, what: string, ms = 30_000, every = 25): Promise<T> {
  const start = Date.now();
  let lastErr: unknown = null;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      lastErr = err;
    }
    if (Date.now() - start > ms) throw new Error(`timed out after ${ms} ms waiting for ${what}${lastErr ? ` (last error: ${(lastErr as Error).message})` : ''}`);
    await sleep(every);
  }
}


/** Every child of the test, so that afterAll can kill whatever is still running. */
export class Procs {
  readonly all: Proc[] = [];

  spawn(name: string, args: string[], env: NodeJS.ProcessEnv, logFile: string, stdin: 'ignore' | 'pipe' = 'ignore'): Proc {
    const p = new Proc(name, spawn(process.execPath, args, { env, stdio: [stdin, 'pipe', 'pipe'] }), logFile);
    this.all.push(p);
    return p;
  }

  /** SIGKILL to everything still alive; waits for the exits (bounded). */
  async killAll(): Promise<void> {
    const alive = this.all.filter((p) => p.alive);
    for (const p of alive) p.child.kill('SIGKILL');
    await Promise.race([Promise.all(alive.map((p) => p.exited)), sleep(5000)]);
  }
}

export class Proc {
  out = '';
  readonly exited: Promise<{ code: number | null; signal: string | null }>;
  private readonly log: fs.WriteStream;

  constructor(
    readonly name: string,
    readonly child: ChildProcess,
    readonly logFile: string,
  ) {
    this.log = fs.createWriteStream(logFile, { flags: 'a' });
    const take = (d: Buffer) => {
      const s = d.toString('utf8');
      this.log.write(s);
      // keep only the head (the start-up lines are parsed) and a tail for error messages
      if (this.out.length < 64_000) this.out += s;
      else this.out = this.out.slice(0, 32_000) + this.out.slice(-16_000) + s;
    };
    child.stdout?.on('data', take);
    child.stderr?.on('data', take);
    this.exited = new Promise((r) => child.once('exit', (code, signal) => r({ code, signal })));
    void this.exited.then(() => this.log.end());
  }

  get alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  tail(n = 3000): string {
    return this.out.slice(-n);
  }

  async waitOut(re: RegExp, what: string, ms = 60_000): Promise<RegExpMatchArray> {
    return waitFor(
      () => {
        if (!this.alive) throw new Error(`${this.name} exited: ${this.tail()}`);
        return this.out.match(re);
      },
      `${this.name}: ${what} (output so far: ${this.tail(1500)})`,
      ms,
      50,
    ).catch((err) => {
      // the exit error is more useful than a timeout
      throw err;
    });
  }

  async sigkill(): Promise<void> {
    if (this.alive) this.child.kill('SIGKILL');
    const r = await this.exited;
    if (r.signal !== 'SIGKILL' && r.code === null) throw new Error(`${this.name} did not die of SIGKILL: ${JSON.stringify(r)}`);
  }
}

/** The environment without any LOCKER_* of the developer (the central refuses unknown ones). */
export function cleanEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('LOCKER_') && k !== 'NOTIFY_SOCKET' && k !== 'WATCHDOG_USEC') env[k] = v;
  return { ...env, ...extra };
}

// ---------------------------------------------------------------- central service

export interface CentralHandle {
  proc: Proc;
  apiUrl: string;
  mqttUrl: string;
  dbFile: string;
}

export async function startCentral(procs: Procs, dir: string, siteFile: string): Promise<CentralHandle> {
  const dbFile = path.join(dir, 'central.db');
  const mqttPort = await freePort();
  const env = cleanEnv({
    LOCKER_DATABASE_URL: dbFile,
    LOCKER_HTTP_HOST: '127.0.0.1',
    LOCKER_HTTP_PORT: '0',
    LOCKER_MQTT_MODE: 'embedded',
    LOCKER_MQTT_HOST: '127.0.0.1',
    LOCKER_MQTT_PORT: String(mqttPort),
    LOCKER_ENVIRONMENT: 'staging',
    LOCKER_LOG_LEVEL: 'info',
    LOCKER_EDGE_POLL_MS: '100',
    LOCKER_EDGE_RETRY_SECONDS: '2',
    LOCKER_CALLBACKS_ENABLED: 'false',
  });
  const prov = procs.spawn('central provision', [CENTRAL_BIN, 'provision', siteFile], env, path.join(dir, 'central-provision.log'));
  const r = await prov.exited;
  if (r.code !== 0) throw new Error(`locker-central provision failed (${JSON.stringify(r)}): ${prov.tail()}`);
  const proc = procs.spawn('central', [CENTRAL_BIN, 'serve'], env, path.join(dir, 'central.log'));
  const m = await proc.waitOut(/"listen":"(http:\/\/127\.0\.0\.1:\d+)"/, 'the API listening', 90_000);
  return { proc, apiUrl: m[1]!, mqttUrl: `mqtt://127.0.0.1:${mqttPort}`, dbFile };
}

/** The tenant API over HTTP with a client-credentials token. */
export class Api {
  private token: string | null = null;
  constructor(
    readonly base: string,
    readonly clientId: string,
    readonly clientSecret: string,
  ) {}

  private async getToken(): Promise<string> {
    if (this.token) return this.token;
    const res = await fetch(`${this.base}/connect/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ grant_type: 'client_credentials', client_id: this.clientId, client_secret: this.clientSecret, scope: 'integration_api' }).toString(),
    });
    if (res.status !== 200) throw new Error(`token: ${res.status} ${await res.text()}`);
    this.token = ((await res.json()) as { access_token: string }).access_token;
    return this.token;
  }

  /** POST a route; resolves with the status and body whatever they are. */
  async call(route: string, body: unknown): Promise<{ status: number; body: any }> {
    const res = await fetch(`${this.base}${route}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${await this.getToken()}` },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(60_000),
    });
    const text = await res.text();
    let parsed: any = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      /* not JSON */
    }
    return { status: res.status, body: parsed };
  }

  /** POST a route that must succeed. */
  async ok(route: string, body: unknown): Promise<any> {
    const r = await this.call(route, body);
    if (r.status !== 200 || r.body?.success !== true) throw new Error(`${route}: expected success, got ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  }
}

/** Read-only queries on the central service's SQLite file (WAL: sees every commit). */
export class CentralDb {
  private readonly db: Database.Database;
  constructor(file: string) {
    this.db = new Database(file, { readonly: true, fileMustExist: true });
    this.db.pragma('busy_timeout = 5000');
  }
  all<T = any>(sql: string, ...params: unknown[]): T[] {
    return this.db.prepare(sql).all(...params) as T[];
  }
  get<T = any>(sql: string, ...params: unknown[]): T | undefined {
    return this.db.prepare(sql).get(...params) as T | undefined;
  }
  close(): void {
    this.db.close();
  }
}

// ---------------------------------------------------------------- simulator

export interface LockState {
  bus: string;
  board: number;
  lock: number;
  latched: boolean;
  doorOpen: boolean;
  item: boolean;
}

/** A client of the simulator's control port (locker-sim --control): one JSON answer per line. */
export class SimControl {
  private buf = '';
  private readonly waiting: { resolve: (v: any) => void; reject: (e: Error) => void }[] = [];
  private queue: Promise<unknown> = Promise.resolve();
  private constructor(private readonly sock: net.Socket) {
    sock.setEncoding('utf8');
    sock.on('data', (d: string) => {
      this.buf += d;
      let nl: number;
      while ((nl = this.buf.indexOf('\n')) >= 0) {
        const line = this.buf.slice(0, nl);
        this.buf = this.buf.slice(nl + 1);
        this.waiting.shift()?.resolve(JSON.parse(line));
      }
    });
    const fail = () => {
      for (const w of this.waiting.splice(0)) w.reject(new Error('simulator control connection closed'));
    };
    sock.on('close', fail);
    sock.on('error', fail);
  }

  static connect(port: number): Promise<SimControl> {
    return new Promise((resolve, reject) => {
      const s = net.connect(port, '127.0.0.1', () => resolve(new SimControl(s)));
      s.once('error', reject);
    });
  }

  /** Runs one simulator command; throws when the simulator refuses it. */
  cmd(line: string): Promise<string> {
    const run = () =>
      new Promise<string>((resolve, reject) => {
        this.waiting.push({
          resolve: (r: { ok: boolean; out?: string; code?: string; error?: string }) => (r.ok ? resolve(r.out ?? '') : reject(new Error(`simulator: ${line}: [${r.code}] ${r.error}`))),
          reject,
        });
        this.sock.write(`${line}\n`);
      });
    const p = this.queue.then(run, run);
    this.queue = p.catch(() => undefined);
    return p;
  }

  async lock(board: number, lock: number): Promise<LockState> {
    return JSON.parse(await this.cmd(`lock ${board} ${lock}`)) as LockState;
  }

  async locks(): Promise<LockState[]> {
    return JSON.parse(await this.cmd('locks')) as LockState[];
  }

  close(): void {
    this.sock.destroy();
  }
}

export interface SimHandle {
  proc: Proc;
  control: SimControl;
  busPort: number;
  scannerPath: string;
}

export async function startSim(procs: Procs, dir: string): Promise<SimHandle> {
  const args = [SIM_BIN, '--bus', 'kerong-cu16:0,1:tcp=0:name=bus0', '--scanner', 'scan0:suffix=cr', '--dir', path.join(dir, 'sim'), '--no-repl', '--control', '0'];
  const proc = procs.spawn('simulator', args, cleanEnv({}), path.join(dir, 'sim.log'));
  await proc.waitOut(/ready/, 'ready', 60_000);
  const bus = /bus bus0 \(kerong-cu16[^)]*\): tcp:\/\/127\.0\.0\.1:(\d+)/.exec(proc.out);
  const scanner = /scanner scan0 \(suffix CR\): (\S+)/.exec(proc.out);
  const control = /control tcp:\/\/127\.0\.0\.1:(\d+)/.exec(proc.out);
  if (!bus || !scanner || !control) throw new Error(`unexpected simulator output: ${proc.out}`);
  return { proc, control: await SimControl.connect(Number(control[1])), busPort: Number(bus[1]), scannerPath: scanner[1]! };
}

// ---------------------------------------------------------------- agent

export interface AgentStateView {
  mqtt: { connected: boolean };
  codes: { version: number | null; epoch: string | null; count: number };
  journal: { unsent: number; lastSeq: number };
  buses: { name: string; portOpen: boolean; boards: { address: number; online: boolean | null; locks: { lock: number; door: string; latch: string; item: boolean | null }[] }[] }[];
  openSessions: number;
  recentEvents: { seq: number; type: string; at: string; sent: boolean; summary: string }[];
}

/** The agent as a child process, killed and restarted at will; its state from the diagnostics page. */
export class AgentRunner {
  proc: Proc | null = null;
  starts = 0;
  constructor(
    private readonly procs: Procs,
    private readonly dir: string,
    readonly configFile: string,
    readonly diagPort: number,
  ) {}

  start(): Proc {
    this.starts++;
    this.proc = this.procs.spawn(`agent #${this.starts}`, [AGENT_BIN, 'run', '--config', this.configFile], cleanEnv({}), path.join(this.dir, 'agent.log'));
    return this.proc;
  }

  async kill(): Promise<void> {
    await this.proc?.sigkill();
  }

  async state(): Promise<AgentStateView | null> {
    try {
      const res = await fetch(`http://127.0.0.1:${this.diagPort}/api/state`, { signal: AbortSignal.timeout(5000) });
      if (res.status !== 200) return null;
      return (await res.json()) as AgentStateView;
    } catch {
      return null;
    }
  }

  /** Running, connected, every board polled and every lock's door known, a code set held. */
  async ready(ms = 90_000): Promise<AgentStateView> {
    return waitFor(
      async () => {
        if (this.proc && !this.proc.alive) throw new Error(`the agent exited: ${this.proc.tail()}`);
        const s = await this.state();
        if (!s || !s.mqtt.connected || s.codes.epoch === null) return null;
        const boards = s.buses.flatMap((b) => b.boards);
        if (boards.length === 0 || !boards.every((b) => b.online === true && b.locks.length > 0 && b.locks.every((l) => l.door !== 'unknown'))) return null;
        return s;
      },
      'the agent to be ready (MQTT connected, boards online, doors known, codes held)',
      ms,
      50,
    );
  }

  /** The agent's view of one lock (null while it is not answering). */
  async lockView(board: number, lock: number): Promise<{ door: string; item: boolean | null } | null> {
    const s = await this.state();
    const l = s?.buses[0]?.boards.find((b) => b.address === board)?.locks.find((x) => x.lock === lock);
    return l ?? null;
  }
}
