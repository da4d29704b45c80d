// A terminal never gives up on its broker (issue 11 part 6, docs/agent.md "The MQTT link"):
// every failed attempt (a refused CONNACK of any code, a CONNECT not answered, a socket error) is
// retried with jittered exponential back-off, bounded; the link state (down since, refusals, the
// last reason, the next retry) shows in Agent.state().mqtt, on the diagnostics page and in the
// systemd STATUS= line; a link down for longer than mqtt.unhealthyAfterMinutes makes healthy()
// false (the watchdog restarts the agent). The broker is a real aedes whose authenticate hook
// refuses as told.
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Aedes } from 'aedes';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { Agent } from '../src/agent';
import { sleep, waitFor as worldWaitFor } from './support/world';
import { AgentConfigSchema, type AgentConfigInput } from '../src/config';
import { backoffCeiling, backoffDelay, describeFailure, MIN_RETRY_MS } from '../src/reconnect';
import type { LinkState } from '../src/edge-link';
import { NotifySocket, notifySocketAvailable } from '../../../test-support/notify-socket';
import { createTestService } from '../../central/test/support/harness';
import { EmbeddedBroker } from '../../central/src/mqtt/embedded';
import { hashSecret } from '../../central/src/auth/secrets';
import { createLogger } from '../../central/src/logger';

const TERMINAL = { id: 'term-rc1', secret: 'terminal-secret-rc1' };
const BIN = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../bin/locker-agent.js');
const silent = pino({ level: 'silent' });
const waitFor = <T>(fn: () => T | undefined | null | false, what: string, ms = 15_000): Promise<T> => worldWaitFor(fn, what, ms);

/** A real MQTT broker whose logins are decided by `decide` (a CONNACK code; 0 accepts, 'hang' never answers). */
class ScriptedBroker {
  /** every CONNECT of the terminal, with its time and the answer */
  readonly attempts: { at: number; answer: number | 'hang' }[] = [];
  /** most connections of the terminal open at once */
  maxOpen = 0;
  private open = 0;
  private aedes!: Aedes;
  private server!: net.Server;
  port = 0;

  constructor(public decide: (n: number) => number | 'hang') {}

  async start(): Promise<void> {
    this.aedes = await Aedes.createBroker({
      authenticate: (client, username, password, done) => {
        if (username !== TERMINAL.id || String(password) !== TERMINAL.secret) return done(Object.assign(new Error('bad secret'), { returnCode: 4 as const }) as never, false);
        const answer = this.decide(this.attempts.length);
        this.attempts.push({ at: Date.now(), answer });
        if (answer === 'hang') return; // no CONNACK: the client's connect timeout
        if (answer === 0) return done(null, true);
        done(Object.assign(new Error(`refused ${answer}`), { returnCode: answer as 2 | 3 | 4 | 5 }) as never, false);
      },
    });
    this.aedes.on('client', () => {
      this.open++;
      this.maxOpen = Math.max(this.maxOpen, this.open);
    });
    this.aedes.on('clientDisconnect', () => this.open--);
    this.server = net.createServer((s) => this.aedes.handle(s as never));
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.port = (this.server.address() as net.AddressInfo).port;
  }

  get url(): string {
    return `mqtt://127.0.0.1:${this.port}`;
  }

  /** gaps between consecutive CONNECTs, ms */
  gaps(): number[] {
    return this.attempts.slice(1).map((a, i) => a.at - this.attempts[i]!.at);
  }

  async stop(): Promise<void> {
    await new Promise<void>((r) => this.aedes.close(() => r()));
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

function tmpDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'agent-reconnect-'));
  cleanups.push(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function config(dir: string, url: string, mqtt: AgentConfigInput['mqtt'] = {}) {
  return AgentConfigSchema.parse({
    terminal: TERMINAL,
    mqtt: { url, reconnectMs: 100, reconnectMaxMs: 800, connectTimeoutMs: 2000, ...mqtt },
    store: { path: path.join(dir, 'agent.db') },
    diagnostics: { enabled: true, host: '127.0.0.1', port: 0 },
  });
}

async function startAgent(cfg: ReturnType<typeof config>): Promise<Agent> {
  const agent = new Agent({ config: cfg, log: silent });
  cleanups.push(() => agent.stop().catch(() => undefined));
  await agent.start();
  return agent;
}

async function startBroker(decide: (n: number) => number | 'hang'): Promise<ScriptedBroker> {
  const b = new ScriptedBroker(decide);
  await b.start();
  cleanups.push(() => b.stop());
  return b;
}

describe('the back-off schedule (pure)', () => {
  const o = { initialMs: 100, maxMs: 1000 };

  it('grows: the ceiling doubles with each consecutive failure, up to maxMs', () => {
    expect([1, 2, 3, 4, 5, 10, 100, 1e6].map((n) => backoffCeiling(n, o))).toEqual([200, 400, 800, 1000, 1000, 1000, 1000, 1000]);
    // the largest draw follows the ceiling; the smallest never goes below initialMs (no busy loop)
    expect([1, 2, 3, 4, 8].map((n) => backoffDelay(n, o, () => 0.999999))).toEqual([200, 400, 800, 1000, 1000]);
    expect([1, 2, 3, 4, 8].map((n) => backoffDelay(n, o, () => 0))).toEqual([100, 100, 100, 100, 100]);
  });

  it('is jittered: uniform between initialMs and the ceiling, by the injected random', () => {
    expect(backoffDelay(3, o, () => 0.5)).toBe(450); // 100 + 0.5 * (800 - 100)
    expect(backoffDelay(3, o, () => 0.25)).toBe(275);
    let seed = 42;
    const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
    for (let n = 1; n <= 12; n++) {
      const draws = Array.from({ length: 200 }, () => backoffDelay(n, o, random));
      expect(Math.min(...draws)).toBeGreaterThanOrEqual(100);
      expect(Math.max(...draws)).toBeLessThanOrEqual(backoffCeiling(n, o));
      expect(new Set(draws).size).toBeGreaterThan(50); // spread, not one value
    }
  });

  it('is bounded whatever the settings: never below MIN_RETRY_MS, never above the max (taken as at least the initial)', () => {
    expect(backoffDelay(1, { initialMs: 1, maxMs: 1 }, () => 0)).toBe(MIN_RETRY_MS);
    expect(backoffDelay(50, { initialMs: 5000, maxMs: 1000 }, () => 0.9)).toBe(5000);
    expect(backoffDelay(3, o, () => 7)).toBe(800); // a random source out of range is clamped
  });

  it('names refusals by their CONNACK code and never shows the secret', () => {
    const at = new Date('2026-03-01T10:00:00Z');
    const connack = (code: number) => Object.assign(new Error(`Connection refused: x`), { code });
    expect(describeFailure(connack(5), at).reason).toBe('NOT_AUTHORIZED');
    expect(describeFailure(connack(3), at).reason).toBe('SERVER_UNAVAILABLE');
    expect(describeFailure(connack(4), at).reason).toBe('BAD_USERNAME_OR_PASSWORD');
    expect(describeFailure(connack(135), at).reason).toBe('NOT_AUTHORIZED');
    expect(describeFailure(connack(137), at).reason).toBe('SERVER_BUSY');
    expect(describeFailure(connack(250), at).reason).toBe('CONNACK_250');
    expect(describeFailure(new Error('connack timeout'), at).reason).toBe('CONNECT_TIMEOUT');
    expect(describeFailure(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' }), at)).toMatchObject({ reason: 'ECONNREFUSED', at: '2026-03-01T10:00:00.000Z' });
    expect(describeFailure(null, at).reason).toBe('CLOSED');
    expect(JSON.stringify(describeFailure(new Error('bad password hunter22-secret'), at, 'hunter22-secret'))).not.toContain('hunter22-secret');
  });
});

describe('the agent against a broker that refuses it', () => {
  it('refused 3 times "not authorized", then "server unavailable", then accepted: comes back by itself, within the back-off bound, and reports the refusals meanwhile', async () => {
    let accept = false;
    const script = [5, 5, 5, 3];
    const broker = await startBroker((n) => script[n] ?? (accept ? 0 : 3));
    const cfg = config(tmpDir(), broker.url);
    const agent = await startAgent(cfg);
    const states: LinkState[] = [];
    agent.link.on('linkState', (s) => states.push(s));

    // mqtt.js alone stops for good after the first refused CONNACK: one attempt, then silence
    await waitFor(() => broker.attempts.length >= 4, 'four refused CONNECTs');
    const s = await waitFor(() => {
      const m = agent.state().mqtt;
      return m.refusals >= 4 && m.nextRetryAt !== null && m;
    }, 'the state shows four refusals and a retry time');
    expect(s).toMatchObject({ connected: false, lastRefusal: { reason: 'SERVER_UNAVAILABLE', code: 3 }, downTooLong: false });
    expect(Date.parse(s.downSince!)).toBeLessThanOrEqual(broker.attempts[0]!.at);
    expect(Date.parse(s.nextRetryAt!)).toBeGreaterThan(Date.parse(s.lastRefusal!.at));
    expect(Date.parse(s.nextRetryAt!) - Date.parse(s.lastRefusal!.at)).toBeLessThanOrEqual(cfg.mqtt.reconnectMaxMs + 50);
    // each refusal was reported with its reason as it happened
    const reported = states.filter((x) => x.lastRefusal && x.nextRetryAt).map((x) => `${x.refusals}:${x.lastRefusal!.reason}`);
    expect(reported.slice(0, 4)).toEqual(['1:NOT_AUTHORIZED', '2:NOT_AUTHORIZED', '3:NOT_AUTHORIZED', '4:SERVER_UNAVAILABLE']);
    // the diagnostics page's source says the same, and never the secret
    const res = await fetch(`${agent.diagnostics!.address}/api/state`);
    const body = await res.text();
    expect(JSON.parse(body).mqtt).toMatchObject({ connected: false, lastRefusal: { reason: 'SERVER_UNAVAILABLE' }, unhealthyAfterMinutes: 30 });
    expect(JSON.parse(body).mqtt.refusals).toBeGreaterThanOrEqual(4);
    expect(body).not.toContain(TERMINAL.secret);

    accept = true;
    const acceptedAt = Date.now();
    await waitFor(() => agent.state().mqtt.connected, 'connected again by itself', cfg.mqtt.reconnectMaxMs + 10_000);
    // within one back-off bound of the broker accepting (plus the time of one CONNECT on a loaded machine)
    expect(broker.attempts.find((a) => a.answer === 0)!.at - acceptedAt).toBeLessThanOrEqual(cfg.mqtt.reconnectMaxMs + 1500);
    // never a busy loop, never longer than the bound, never two connections at once
    for (const g of broker.gaps()) {
      expect(g).toBeGreaterThanOrEqual(cfg.mqtt.reconnectMs - 5);
      expect(g).toBeLessThanOrEqual(cfg.mqtt.reconnectMaxMs + 1500);
    }
    expect(broker.maxOpen).toBe(1);
    expect(agent.state().mqtt).toMatchObject({ connected: true, refusals: 0, downSince: null, nextRetryAt: null, lastRefusal: { reason: 'SERVER_UNAVAILABLE' } });
    expect(agent.healthy()).toBe(true);
    // and stays connected: one accepted CONNECT, no more attempts
    const n = broker.attempts.length;
    await sleep(1000);
    expect(broker.attempts.length).toBe(n);
    expect(agent.state().mqtt.connected).toBe(true);
  });

  it('the central service\'s own broker: a rotated secret refused (bad secret, then login throttling) until the central service knows it; then the terminal comes back by itself', async () => {
    const t = await createTestService('sqlite');
    cleanups.push(() => t.close());
    const broker = new EmbeddedBroker({ host: '127.0.0.1', port: 0, db: t.ctx.db.kysely, log: createLogger({ level: 'silent' }), authThrottle: { maxFailuresPerClient: 3, blockMs: 2000 } });
    await broker.start();
    cleanups.push(() => broker.stop());
    // the terminal has its new secret already; the central service still knows the old one
    const secret = 'terminal-secret-a1-rotated';
    const cfg = AgentConfigSchema.parse({ ...config(tmpDir(), broker.address()!), terminal: { id: 'term-a1', secret } });
    const agent = await startAgent(cfg);
    const reasons: string[] = [];
    agent.link.on('linkState', (s) => s.lastRefusal && s.nextRetryAt && reasons.push(s.lastRefusal.reason));
    await waitFor(() => reasons.includes('NOT_AUTHORIZED'), 'throttled by the broker');
    expect(reasons.slice(0, 3)).toEqual(['BAD_USERNAME_OR_PASSWORD', 'BAD_USERNAME_OR_PASSWORD', 'BAD_USERNAME_OR_PASSWORD']);
    expect(JSON.stringify(agent.state())).not.toContain(secret);
    await t.ctx.db.kysely.updateTable('terminals').set({ secret_hash: hashSecret(secret) }).where('id', '=', 'term-a1').execute();
    const rotatedAt = Date.now();
    await waitFor(() => agent.state().mqtt.connected, 'connected with the rotated secret', 20_000);
    // within the broker's block (2 s) and one back-off bound, plus slack for a loaded machine
    expect(Date.now() - rotatedAt).toBeLessThan(2000 + cfg.mqtt.reconnectMaxMs + 3000);
    expect(agent.state().mqtt).toMatchObject({ connected: true, refusals: 0 });
  });

  it('stop() during the back-off ends promptly and cancels the pending retry', async () => {
    const broker = await startBroker(() => 5);
    const cfg = config(tmpDir(), broker.url, { reconnectMs: 3000, reconnectMaxMs: 10_000 });
    const agent = await startAgent(cfg);
    await waitFor(() => agent.state().mqtt.nextRetryAt, 'refused and waiting to retry');
    expect(broker.attempts).toHaveLength(1);
    const t0 = Date.now();
    await agent.stop();
    expect(Date.now() - t0).toBeLessThan(3000);
    expect(agent.link.linkState().nextRetryAt).toBeNull();
    await sleep(cfg.mqtt.reconnectMs * 2 + 500); // past any retry that was due
    expect(broker.attempts).toHaveLength(1);
  });

  it('stop() while an attempt waits for its CONNACK ends promptly; no retry follows', async () => {
    const broker = await startBroker(() => 'hang');
    const cfg = config(tmpDir(), broker.url, { reconnectMs: 200, connectTimeoutMs: 20_000 });
    const agent = await startAgent(cfg);
    await waitFor(() => broker.attempts.length === 1, 'a CONNECT under way');
    const t0 = Date.now();
    await agent.stop();
    expect(Date.now() - t0).toBeLessThan(3000);
    await sleep(1000);
    expect(broker.attempts).toHaveLength(1);
  });

  it('a CONNECT never answered is abandoned after connectTimeoutMs and retried', async () => {
    const broker = await startBroker((n) => (n < 2 ? 'hang' : 0));
    const cfg = config(tmpDir(), broker.url, { connectTimeoutMs: 500 });
    const agent = await startAgent(cfg);
    await waitFor(() => agent.state().mqtt.connected, 'connected after two unanswered CONNECTs');
    expect(broker.attempts.map((a) => a.answer)).toEqual(['hang', 'hang', 0]);
    expect(agent.state().mqtt.lastRefusal).toMatchObject({ reason: 'CONNECT_TIMEOUT' });
  });

  it('healthy() turns false once the link has been down for mqtt.unhealthyAfterMinutes, and true again when it is back', async () => {
    let accept = false;
    const broker = await startBroker(() => (accept ? 0 : 5));
    const cfg = config(tmpDir(), broker.url, { unhealthyAfterMinutes: 0.03 }); // 1.8 s
    const agent = await startAgent(cfg);
    expect(agent.healthy()).toBe(true); // down, but not for long
    await waitFor(() => broker.attempts.length >= 1, 'refused');
    expect(agent.state().mqtt.downTooLong).toBe(false);
    await waitFor(() => !agent.healthy(), 'unhealthy after 1.8 s down', 20_000);
    expect(Date.now() - Date.parse(agent.state().mqtt.downSince!)).toBeGreaterThanOrEqual(1800);
    expect(agent.state().mqtt).toMatchObject({ connected: false, downTooLong: true, unhealthyAfterMinutes: 0.03 });
    const page = (await (await fetch(`${agent.diagnostics!.address}/api/state`)).json()) as any;
    expect(page.mqtt.downTooLong).toBe(true);
    accept = true;
    await waitFor(() => agent.state().mqtt.connected, 'connected', 15_000);
    expect(agent.healthy()).toBe(true);
    expect(agent.state().mqtt.downTooLong).toBe(false);
  });

  it('mqtt.unhealthyAfterMinutes: null never counts the link', async () => {
    const cfg = config(tmpDir(), 'mqtt://127.0.0.1:1', { unhealthyAfterMinutes: null });
    expect(cfg.mqtt.unhealthyAfterMinutes).toBeNull();
    expect(AgentConfigSchema.parse({ terminal: TERMINAL }).mqtt).toMatchObject({ reconnectMaxMs: 60_000, unhealthyAfterMinutes: 30 });
    const agent = await startAgent(cfg);
    await waitFor(() => agent.state().mqtt.lastRefusal, 'a failed attempt');
    expect(agent.state().mqtt.lastRefusal!.reason).toBe('ECONNREFUSED');
    expect(agent.link.downLongerThan(null)).toBe(false);
    expect(agent.link.downLongerThan(0)).toBe(true);
    expect(agent.healthy()).toBe(true);
  });
});

const CHROMIUM = '/usr/bin/chromium';
const withChromium = fs.existsSync(CHROMIUM) || process.env.LOCKER_REQUIRE_SERVICES === '1' ? describe : describe.skip;

withChromium('the diagnostics page shows the link (headless Chromium, the real page)', () => {
  /** Serves the real page for an agent state and returns the MQTT card's text once rendered. */
  async function renderLink(state: Record<string, unknown>): Promise<{ status: string; detail: string }> {
    const { DiagnosticsServer } = await import('../src/diagnostics');
    const server = new DiagnosticsServer({ agent: { state: () => state as never, technicianOpen: async () => ({ ok: true, alreadyOpen: false }) }, host: '127.0.0.1', port: 0, password: null, log: silent });
    await server.start();
    cleanups.push(() => server.stop());
    const { chromium } = await import('playwright-core');
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'] });
    cleanups.push(() => browser.close());
    const page = await browser.newPage();
    await page.goto(server.address!);
    await page.waitForFunction(() => document.getElementById('mqtt')?.textContent !== '…', undefined, { timeout: 15_000 });
    return { status: (await page.textContent('#mqtt')) ?? '', detail: (await page.textContent('#mqtt-detail')) ?? '' };
  }

  const base = {
    terminalId: 'term-rc1',
    agentVersion: '0.1.0',
    startedAt: '2026-03-01T10:00:00.000Z',
    codes: { epoch: null, version: 0, count: 0 },
    journal: { unsent: 0, lastSeq: 0 },
    buses: [],
    scanners: [],
    throttled: [],
    openSessions: 0,
    recentEvents: [],
    wall: [],
    timeZone: 'UTC',
  };
  const mqtt = { url: 'mqtt://central:1883/', lastError: 'Connection refused: Not authorized', eventsSent: 0, unhealthyAfterMinutes: 30, lastConnectedAt: null };

  it('down: since when, the refusals and the last reason, the next retry; and that the watchdog will restart the agent', async () => {
    const downSince = new Date(Date.now() - 40 * 60_000).toISOString();
    const link = await renderLink({
      ...base,
      mqtt: { ...mqtt, connected: false, downSince, refusals: 7, lastRefusal: { reason: 'NOT_AUTHORIZED', code: 5, message: 'x', at: downSince }, nextRetryAt: new Date(Date.now() + 20_000).toISOString(), downTooLong: true },
    });
    expect(link.status).toBe('down');
    expect(link.detail).toContain('since ');
    expect(link.detail).toContain('7 refusals (last: NOT_AUTHORIZED)');
    expect(link.detail).toContain('retry ');
    expect(link.detail).toContain('down too long: the watchdog restarts the agent');
    expect(link.detail).not.toContain(TERMINAL.secret);
  });

  it('up: connected since when, no warning', async () => {
    const link = await renderLink({ ...base, mqtt: { ...mqtt, connected: true, downSince: null, refusals: 0, lastRefusal: null, nextRetryAt: null, downTooLong: false, lastConnectedAt: '2026-03-01T10:00:01.000Z' } });
    expect(link.status).toBe('connected');
    expect(link.detail).toContain('since ');
    expect(link.detail).not.toContain('down too long');
    expect(link.detail).not.toContain('refusal');
  });
});

describe.skipIf(!notifySocketAvailable())('systemd STATUS= shows the link', () => {
  it('the agent process refused by its broker says so in STATUS=, and that it is connected once accepted', async () => {
    let accept = false;
    const broker = await startBroker(() => (accept ? 0 : 5));
    const dir = tmpDir();
    const configFile = path.join(dir, 'agent.json');
    fs.writeFileSync(configFile, JSON.stringify({ ...config(dir, broker.url), diagnostics: { enabled: false }, log: { level: 'error' } }));
    const sock = new NotifySocket();
    await sock.start();
    cleanups.push(() => sock.stop());
    const child: ChildProcess = spawn(process.execPath, [BIN, 'run', '--config', configFile], { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, NOTIFY_SOCKET: sock.path, WATCHDOG_USEC: '' } });
    cleanups.push(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    });
    await waitFor(() => sock.messages.some((m) => m.includes('READY=1')), 'READY=1', 30_000);
    const refused = await waitFor(() => sock.messages.find((m) => /STATUS=.*failed attempts? \(last NOT_AUTHORIZED\)/.test(m)), 'a STATUS= with the refusals', 20_000);
    expect(refused).toMatch(/^STATUS=terminal term-rc1 running; broker down since \S+, \d+ failed attempts? \(last NOT_AUTHORIZED\)$/);
    expect(sock.messages.join('\n')).not.toContain(TERMINAL.secret);
    accept = true;
    await waitFor(() => sock.messages.some((m) => m === 'STATUS=terminal term-rc1 running; broker connected'), 'STATUS= connected', 20_000);
    child.kill('SIGTERM');
    await new Promise((r) => (child.exitCode !== null ? r(null) : child.once('exit', r)));
    expect(child.exitCode).toBe(0);
  });
});
