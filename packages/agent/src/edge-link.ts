// The agent's MQTT link to the central service (docs/edge-protocol.md). It connects as the
// terminal (client id = username = terminal id, password = terminal secret) with a retained
// "offline" last will, announces its status on every connect, takes code updates and commands
// from down/, and drains the event journal: oldest unsent first, one event in flight at a time,
// marked sent only when the broker's PUBACK arrives. After a reconnect or a restart the unsent
// rest is sent again in order; the central service dedupes by eventId.
import { EventEmitter } from 'node:events';
import mqtt, { type MqttClient } from 'mqtt';
import type { Logger } from 'pino';
import { edgeTopics, type StatusMessage } from '@locker/common';
import type { AgentStore, JournalRow } from './store';

type JournalRowLike = Pick<JournalRow, 'eventId' | 'seq' | 'at' | 'type' | 'fields'>;

export interface EdgeLinkOptions {
  url: string;
  terminalId: string;
  secret: string;
  keepaliveSeconds: number;
  reconnectMs: number;
  connectTimeoutMs: number;
  /** no PUBACK for an event within this long: publish it again */
  publishTimeoutMs: number;
  store: AgentStore;
  log: Logger;
  /** builds the current online status (called on every publish of it) */
  status: () => StatusMessage;
  now?: () => Date;
}

export interface EdgeLinkEvents {
  connected: [];
  disconnected: [];
  message: [kind: 'codes' | 'commands', payload: Buffer];
  eventSent: [row: JournalRow];
}

export function eventPayload(terminalId: string, row: JournalRowLike): string {
  return JSON.stringify({ v: 1, eventId: row.eventId, seq: row.seq, terminalId, at: row.at, type: row.type, ...row.fields });
}

export class EdgeLink extends EventEmitter<EdgeLinkEvents> {
  private client: MqttClient | null = null;
  private running = false;
  private wake: (() => void) | null = null;
  private drainLoop: Promise<void> | null = null;
  private wasConnected = false;
  private readonly log: Logger;
  private readonly now: () => Date;
  /** events published and acknowledged since start */
  sentCount = 0;
  lastError: string | null = null;

  constructor(private readonly opts: EdgeLinkOptions) {
    super();
    this.log = opts.log.child({ ns: 'agent.mqtt' });
    this.now = opts.now ?? (() => new Date());
  }

  get connected(): boolean {
    return !!this.client?.connected;
  }

  /** The broker URL without credentials (for the diagnostics page). */
  get safeUrl(): string {
    try {
      const u = new URL(this.opts.url);
      u.username = '';
      u.password = '';
      return u.toString();
    } catch {
      return '(invalid url)';
    }
  }

  async start(): Promise<void> {
    if (this.running) return;
    this.running = true;
    const { terminalId } = this.opts;
    const client = mqtt.connect(this.opts.url, {
      clientId: terminalId,
      username: terminalId,
      password: this.opts.secret,
      clean: true,
      keepalive: this.opts.keepaliveSeconds,
      reconnectPeriod: this.opts.reconnectMs,
      connectTimeout: this.opts.connectTimeoutMs,
      queueQoSZero: false,
      will: {
        topic: edgeTopics.up(terminalId, 'status'),
        payload: Buffer.from(JSON.stringify({ v: 1, state: 'offline', terminalId, reason: 'connection-lost' })),
        qos: 1,
        retain: true,
      },
    });
    this.client = client;
    client.on('connect', () => void this.onConnect());
    client.on('close', () => {
      if (!this.wasConnected) return;
      this.wasConnected = false;
      this.log.info('disconnected from broker');
      this.emit('disconnected');
    });
    client.on('error', (err) => {
      this.lastError = err.message;
      this.log.warn({ err: err.message }, 'broker connection error');
    });
    client.on('message', (topic, payload) => {
      if (topic === edgeTopics.down(terminalId, 'codes')) this.emit('message', 'codes', payload);
      else if (topic === edgeTopics.down(terminalId, 'commands')) this.emit('message', 'commands', payload);
      else this.log.warn({ topic }, 'message on an unexpected topic dropped');
    });
    this.drainLoop = this.drain();
  }

  private async onConnect(): Promise<void> {
    const client = this.client;
    if (!client) return;
    this.lastError = null;
    this.wasConnected = true;
    this.log.info({ url: this.safeUrl }, 'connected to broker');
    try {
      const granted = await client.subscribeAsync(
        { [edgeTopics.down(this.opts.terminalId, 'codes')]: { qos: 1 }, [edgeTopics.down(this.opts.terminalId, 'commands')]: { qos: 1 } },
      );
      const refused = granted.filter((g) => g.qos === 128);
      if (refused.length) this.log.error({ topics: refused.map((g) => g.topic) }, 'subscription refused by the broker');
      await this.publishStatus();
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, 'subscribe / status after connect failed');
    }
    this.emit('connected');
    this.kick();
  }

  /** Wakes the journal drain (call after appending an event). */
  kick(): void {
    this.wake?.();
  }

  async publishStatus(): Promise<void> {
    if (!this.connected) return;
    await this.publish('status', JSON.stringify(this.opts.status()), true);
  }

  /** Publishes on one of the terminal's up/ topics (QoS 1). Rejects when not connected. */
  async publish(kind: 'status' | 'sync' | 'acks' | 'events', payload: string, retain = false): Promise<void> {
    const c = this.client;
    if (!c || !c.connected) throw Object.assign(new Error('not connected to the broker'), { code: 'NOT_CONNECTED' });
    await c.publishAsync(edgeTopics.up(this.opts.terminalId, kind), payload, { qos: 1, retain });
  }

  private waitForWake(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = setTimeout(done, ms);
      function done() {
        clearTimeout(t);
        resolve();
      }
      this.wake = () => {
        this.wake = null;
        done();
      };
    });
  }

  private async drain(): Promise<void> {
    while (this.running) {
      const client = this.client;
      if (!client || !client.connected) {
        await this.waitForWake(500);
        continue;
      }
      let row: JournalRow | null;
      try {
        row = this.opts.store.nextUnsent();
      } catch (err) {
        this.log.error({ err: (err as Error).message }, 'journal read failed');
        await this.waitForWake(1000);
        continue;
      }
      if (!row) {
        await this.waitForWake(5000);
        continue;
      }
      try {
        // resolves on PUBACK; if the connection drops meanwhile, mqtt.js re-sends it after the
        // reconnect and resolves then (still one in flight, so order holds)
        const acked = client.publishAsync(edgeTopics.up(this.opts.terminalId, 'events'), eventPayload(this.opts.terminalId, row), { qos: 1 });
        let timer: NodeJS.Timeout | undefined;
        const timedOut = new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error(`no PUBACK within ${this.opts.publishTimeoutMs} ms`)), this.opts.publishTimeoutMs);
        });
        try {
          // a PUBACK that never comes (a connection that died silently) must not stall the
          // journal: the same event is published again (the central service dedupes by eventId)
          await Promise.race([acked, timedOut]);
        } finally {
          clearTimeout(timer);
          acked.catch(() => undefined);
        }
        if (!this.running && !client.connected) return;
        this.opts.store.markSent(row.seq, this.now());
        this.sentCount++;
        this.log.debug({ seq: row.seq, type: row.type }, 'event delivered');
        this.emit('eventSent', row);
      } catch (err) {
        if (!this.running) return;
        this.log.warn({ seq: row.seq, err: (err as Error).message }, 'event publish failed; will retry');
        await this.waitForWake(this.opts.reconnectMs);
      }
    }
  }

  async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    this.wake?.();
    const c = this.client;
    this.client = null;
    if (c) {
      if (c.connected) {
        try {
          const payload = JSON.stringify({ v: 1, state: 'offline', terminalId: this.opts.terminalId, reason: 'shutdown', at: this.now().toISOString() });
          await Promise.race([c.publishAsync(edgeTopics.up(this.opts.terminalId, 'status'), payload, { qos: 1, retain: true }), new Promise((r) => setTimeout(r, 1000))]);
        } catch {
          /* going down anyway */
        }
      }
      await Promise.race([c.endAsync(true), new Promise((r) => setTimeout(r, 2000))]);
    }
    // the drain loop may be waiting on a publish that will never be acknowledged now
    await Promise.race([this.drainLoop, new Promise((r) => setTimeout(r, 100))]);
  }
}
