// Test world for the agent: the REAL simulator (@locker/firmware-sim) on socat pseudo-terminals,
// the REAL MQTT broker of the central service (aedes, terminal auth + topic ACL) on a free port,
// backed by a central test database with the standard site (terminal term-a1 / terminal-secret-a1),
// and a real agent on a SQLite file. The test plays the central side of the protocol.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino, { type Logger } from 'pino';
import { Simulator } from '@locker/firmware-sim';
import { createTransport, dialects, type Transport } from '@locker/lockbus';
import { hashCode, parseEdgeTopic, type CodeEntry } from '@locker/common';
import { Agent } from '../../src/agent';
import { AgentConfigSchema, type AgentConfig, type AgentConfigInput } from '../../src/config';
import { createTestService, type TestService } from '../../../central/test/support/harness';
import { EmbeddedBroker } from '../../../central/src/mqtt/embedded';
import { createLogger } from '../../../central/src/logger';

export const TERMINAL = { id: 'term-a1', secret: 'terminal-secret-a1' };
export const silent = pino({ level: 'silent' });
const centralLog = createLogger({ level: 'silent' });

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function waitFor<T>(fn: () => T | undefined | null | false, what = 'condition', ms = 8000): Promise<T> {
  const start = Date.now();
  for (;;) {
    const v = fn();
    if (v !== undefined && v !== null && v !== false) return v as T;
    if (Date.now() - start > ms) throw new Error(`timed out waiting for ${what}`);
    await sleep(15);
  }
}

export interface Received {
  topic: string;
  kind: string;
  body: any;
}

/** A code entry as the central service would push it. */
export function codeEntry(id: string, usage: 'DropOff' | 'PickUp', value: string, lock: { board: number; lock: number; uid?: string }, type: 'Qr' | 'Code' = 'Qr', shipmentUid = `ship-${id}`): CodeEntry {
  return { id, shipmentUid, usage, type, hash: hashCode(value), locker: { uid: lock.uid ?? `locker-${lock.board}-${lock.lock}`, bus: 'bus0', board: lock.board, lock: lock.lock } };
}

export const BUS_TIMING = { pollMs: 40, replyTimeoutMs: 60, pulseMs: 300, jamWindowMs: 1500, doorLeftOpenMs: null, reconnect: { initialMs: 30, maxMs: 300 } };

export function agentConfig(dir: string, busPath: string, scannerPath: string, extra: Partial<AgentConfigInput> = {}, mqttUrl = 'mqtt://127.0.0.1:1'): AgentConfig {
  return AgentConfigSchema.parse({
    terminal: TERMINAL,
    mqtt: { url: mqttUrl, reconnectMs: 100, reconnectMaxMs: 1000, connectTimeoutMs: 2000, statusIntervalSeconds: 60, syncRetrySeconds: 1 },
    buses: [{ name: 'bus0', port: `${busPath}?baud=19200`, dialect: 'kerong-cu16', boards: [{ address: 0 }, { address: 1 }], ...BUS_TIMING }],
    scanners: [{ name: 'scan0', port: scannerPath, suffix: '\r' }],
    store: { path: path.join(dir, 'agent.db') },
    diagnostics: { enabled: true, host: '127.0.0.1', port: 0, technicianPassword: 'tech-password-1' },
    access: { maxFailures: 3, failureWindowSeconds: 60, lockoutSeconds: 1 },
    ...extra,
  });
}

export class World {
  t!: TestService;
  broker!: EmbeddedBroker;
  brokerPort = 0;
  sim!: Simulator;
  agent!: Agent;
  dir!: string;
  config!: AgentConfig;
  readonly received: Received[] = [];
  /** acknowledge events as the central service would (down/eventAcks) */
  ackEvents = true;
  /** the seqs "stored" per journal (for the acknowledgements) */
  readonly stored = new Map<string, Set<number>>();

  /** The agent's logger (default: silent). */
  log: Logger = silent;

  /**
   * opts.simBoards: the board addresses the simulator has on bus0 (default 0, 1); opts.agentBoards:
   * the ones the agent's config expects there (default 0, 1): a board configured but not simulated
   * is missing, one simulated but not configured is unexpected.
   */
  /**
   * `busTiming`: the agent's bus timing over BUS_TIMING (e.g. a longer replyTimeoutMs for a test
   * that shares its process with a browser: a poll answered late is a failed poll, and a failed
   * poll during an unlock leaves it unobserved instead of a jam)
   */
  static async create(extra: Partial<AgentConfigInput> = {}, opts: { startAgent?: boolean; simBoards?: number[]; agentBoards?: number[]; log?: Logger; busTiming?: Partial<typeof BUS_TIMING>; dialect?: 'kerong-cu16' | 'generic-8a80' } = {}): Promise<World> {
    // `dialect`: the boards' protocol, simulated and configured (kerong-cu16 answers no unlock;
    // generic-8a80 does, so an unlock waits for the board's answer)
    const dialect = opts.dialect ?? 'kerong-cu16';
    const w = new World();
    if (opts.log) w.log = opts.log;
    w.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'agent-world-'));
    w.t = await createTestService('sqlite');
    await w.startBroker(0);
    w.sim = new Simulator({
      buses: [{ name: 'bus0', link: { kind: 'pty' }, dialect, boards: (opts.simBoards ?? [0, 1]).map((address) => ({ address })) }],
      scanners: [{ name: 'scan0', link: { kind: 'pty' }, suffix: '\r' }],
    });
    await w.sim.start();
    if (opts.agentBoards || opts.busTiming || opts.dialect) {
      const boards = (opts.agentBoards ?? [0, 1]).map((address) => ({ address }));
      extra = { ...extra, buses: [{ name: 'bus0', port: `${w.sim.bus('bus0').path!}?baud=19200`, dialect, boards, ...BUS_TIMING, ...opts.busTiming }] };
    }
    w.config = agentConfig(w.dir, w.sim.bus('bus0').path!, w.sim.scanner('scan0').path, extra, `mqtt://127.0.0.1:${w.brokerPort}`);
    if (opts.startAgent !== false) await w.startAgent();
    return w;
  }

  async startBroker(port: number): Promise<void> {
    this.broker = new EmbeddedBroker({ host: '127.0.0.1', port, db: this.t.ctx.db.kysely, log: centralLog });
    await this.broker.start();
    this.brokerPort = Number(new URL(this.broker.address()!).port);
    // plays the central's edge sync storing each event before its PUBACK (without a store the
    // broker refuses up/events: an event is never acknowledged unless something took it)
    // and acknowledging the journal as the central service does (down/eventAcks: every seq up to
    // upTo stored), unless the test holds the acknowledgements back (ackEvents = false)
    await this.broker.subscribe(
      'locker/v1/t/+/up/events',
      (topic, payload) => {
        const body = JSON.parse(payload.toString('utf8'));
        if (!this.ackEvents || typeof body.journalId !== 'string') return;
        const seen = this.stored.get(body.journalId) ?? new Set<number>();
        this.stored.set(body.journalId, seen);
        seen.add(body.seq);
        let upTo = 0;
        while (seen.has(upTo + 1)) upTo++;
        const terminal = parseEdgeTopic(topic)!.terminalId;
        void this.broker.publish(`locker/v1/t/${terminal}/down/eventAcks`, JSON.stringify({ v: 1, journalId: body.journalId, upTo, at: new Date().toISOString() }), { qos: 1 }).catch(() => undefined);
      },
      { beforeAck: true },
    );
    await this.broker.subscribe('locker/v1/t/+/up/#', (topic, payload) => {
      const p = parseEdgeTopic(topic);
      let body: any = null;
      try {
        body = JSON.parse(payload.toString('utf8'));
      } catch {
        body = payload.toString('utf8');
      }
      this.received.push({ topic, kind: p?.kind ?? '?', body });
    });
  }

  async stopBroker(): Promise<void> {
    await this.broker.stop();
  }

  async startAgent(): Promise<void> {
    const statusesBefore = this.received.filter((r) => r.kind === 'status').length;
    this.agent = new Agent({ config: this.config, log: this.log, createTransport: (port, o) => this.faultable(port, createTransport(port, o)) });
    await this.agent.start();
    await waitFor(() => this.agent.state().mqtt.connected, 'agent connected');
    // the agent subscribes after its CONNACK and then sends its status: a message published to it
    // before that would find no subscription (the central service answers the status, never the
    // CONNACK), so the world waits for the status too (when the agent talks to the world's broker)
    if (new URL(this.config.mqtt.url).port === String(this.brokerPort)) await waitFor(() => this.received.filter((r) => r.kind === 'status').length > statusesBefore, 'agent status after its subscriptions');
    await waitFor(() => this.agent.buses.bus('bus0').boardOnline(0) && this.agent.buses.bus('bus0').boardOnline(1), 'boards online');
  }

  /** Events received on up/events, deduplicated by eventId, in arrival order. */
  events(): any[] {
    const seen = new Set<string>();
    const out: any[] = [];
    for (const r of this.received) {
      if (r.kind !== 'events' || seen.has(r.body.eventId)) continue;
      seen.add(r.body.eventId);
      out.push(r.body);
    }
    return out;
  }

  async publish(kind: 'codes' | 'commands' | 'lockers', body: unknown): Promise<void> {
    await this.broker.publish(`locker/v1/t/${TERMINAL.id}/down/${kind}`, typeof body === 'string' ? body : JSON.stringify(body), { qos: 1 });
  }

  async snapshot(codes: CodeEntry[], version = 1, epoch = 'epoch-1'): Promise<void> {
    await this.publish('codes', { v: 1, type: 'snapshot', epoch, version, at: new Date().toISOString(), codes });
    await waitFor(() => this.agent.state().codes.version === version && this.agent.state().codes.epoch === epoch, `codes version ${version}`);
  }

  /**
   * Runs `fn` while the agent's own port write of an unlock of board/lock (bus0, CU16) breaks off:
   * after the frame left (the board got it), or before (it did not). The driver sees WRITE_FAILED.
   */
  async whileUnlockWriteBreaks<T>(board: number, lock: number, after: boolean, fn: () => Promise<T>): Promise<T> {
    const frame = dialects['kerong-cu16'].encodeRequest({ kind: 'unlock', board, lock });
    const bus0 = this.config.buses.find((b) => b.name === 'bus0')!.port;
    this.breakWrite = (port, d) => (port === bus0 && d.equals(frame) ? (after ? 'after' : 'before') : null);
    try {
      return await fn();
    } finally {
      this.breakWrite = null;
    }
  }

  /** which write of the agent's ports breaks off, and where (whileUnlockWriteBreaks) */
  private breakWrite: ((port: string, d: Buffer) => 'before' | 'after' | null) | null = null;

  /** The agent's real transport of `port`, its writes passed through breakWrite (the agent's createTransport seam). */
  private faultable(port: string, t: Transport): Transport {
    const write = t.write.bind(t);
    t.write = async (d: Buffer) => {
      const where = this.breakWrite?.(port, d) ?? null;
      if (where === 'before') throw Object.assign(new Error('EIO'), { code: 'EIO' });
      await write(d);
      if (where === 'after') throw Object.assign(new Error('EIO'), { code: 'EIO' });
    };
    return t;
  }

  lock(board: number, lock: number) {
    return this.sim.bus('bus0').lock(board, lock);
  }

  async close(): Promise<void> {
    await this.agent?.stop().catch(() => undefined);
    await this.broker?.stop().catch(() => undefined);
    await this.sim?.stop().catch(() => undefined);
    await this.t?.close().catch(() => undefined);
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}
