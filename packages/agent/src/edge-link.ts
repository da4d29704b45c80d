// The agent's MQTT link to the central service (docs/edge-protocol.md). It connects as the
// terminal (client id = username = terminal id, password = terminal secret) with a retained
// "offline" last will, announces its status on every connect, takes code updates and commands
// from down/, and drains the event journal: oldest unsent first, one event in flight at a time,
// marked sent only when the broker's PUBACK arrives. After a reconnect or a restart the unsent
// rest is sent again in order; the central service dedupes by eventId.
import { EventEmitter } from 'node:events';
import mqtt, { type MqttClient } from 'mqtt';
import type { Logger } from 'pino';
import { EventAck, edgeTopics, mqttNoDelay, parseMessage, type StatusMessage } from '@locker/common';
import type { AgentStore, JournalRow } from './store';
import { backoffDelay, describeFailure, type Refusal } from './reconnect';

type JournalRowLike = Pick<JournalRow, 'eventId' | 'seq' | 'at' | 'type' | 'fields'>;

export interface EdgeLinkOptions {
  url: string;
  terminalId: string;
  secret: string;
  keepaliveSeconds: number;
  /** the first retry waits at least this long (src/reconnect.ts) */
  reconnectMs: number;
  /** the retry delay's upper bound (default 60 s); a connection up this long resets the back-off */
  reconnectMaxMs?: number;
  connectTimeoutMs: number;
  /** no PUBACK for an event within this long: publish it again */
  publishTimeoutMs: number;
  store: AgentStore;
  log: Logger;
  /** builds the current online status (called on every publish of it) */
  status: () => StatusMessage;
  now?: () => Date;
  /** the back-off's jitter source (tests) */
  random?: () => number;
}

/** The link as the diagnostics page, Agent.state().mqtt and the systemd STATUS= line show it. */
export interface LinkState {
  connected: boolean;
  /** since when the link is down (the start, when it never came up); null while connected */
  downSince: string | null;
  lastConnectedAt: string | null;
  /** failed connection attempts since the last successful one (refused CONNACK, timeout, socket error) */
  refusals: number;
  /** the last failed attempt: its reason (CONNACK code name, CONNECT_TIMEOUT, ECONNREFUSED, ...), never the secret */
  lastRefusal: Refusal | null;
  /** when the next attempt is due (null while connected or while an attempt is under way) */
  nextRetryAt: string | null;
}

export interface EdgeLinkEvents {
  connected: [];
  disconnected: [];
  /** the link state changed (connected, lost, refused, retry scheduled) */
  linkState: [state: LinkState];
  message: [kind: 'codes' | 'commands' | 'lockers', payload: Buffer];
  /** the central service acknowledged the journal up to this seq (down/eventAcks): those are marked sent */
  eventsAcknowledged: [upTo: number];
}

export function eventPayload(terminalId: string, row: JournalRowLike, journalId?: string): string {
  return JSON.stringify({ ...row.fields, v: 1, eventId: row.eventId, seq: row.seq, terminalId, ...(journalId ? { journalId } : {}), at: row.at, type: row.type });
}

/** Events published and not yet acknowledged by the central service at most (then the drain waits). */
export const EVENT_WINDOW = 32;

export class EdgeLink extends EventEmitter<EdgeLinkEvents> {
  private client: MqttClient | null = null;
  private running = false;
  private wake: (() => void) | null = null;
  private drainLoop: Promise<void> | null = null;
  private wasConnected = false;
  /** the highest seq published on this connection (acknowledged or not) */
  private cursor = 0;
  /** bumped whenever the cursor is set back (resendFrom): a publish in flight then must not move it forward again */
  private rewinds = 0;
  /** the highest seq this process has handed to the broker (any connection): acknowledgements mark no further */
  private publishedThrough = 0;
  /** when the central service last acknowledged events / an event was last published (ms) */
  private lastAckAt = 0;
  private lastPublishAt = 0;
  // connection bookkeeping (reconnects are driven here, not by mqtt.js: see start())
  private retryTimer: NodeJS.Timeout | null = null;
  /** a connection attempt is under way (its close or CONNACK has not come yet) */
  private attempting = false;
  /** the error of the attempt under way, if any */
  private attemptError: Error | null = null;
  /** consecutive failures feeding the back-off (reset by a connection that stayed up) */
  private failures = 0;
  private refusals = 0;
  private lastRefusal: Refusal | null = null;
  private downSince: Date | null = null;
  private connectedAt: Date | null = null;
  private lastConnectedAt: Date | null = null;
  private nextRetryAt: Date | null = null;
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

  /** The highest journal seq published on the current connection (acknowledged by the central service or not). */
  get publishedUpTo(): number {
    return this.cursor;
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

  /** The link's state: connected or since when down, refusals, the last one's reason, the next retry. */
  linkState(): LinkState {
    const iso = (d: Date | null) => (d ? d.toISOString() : null);
    return {
      connected: this.connected,
      downSince: this.connected ? null : iso(this.downSince),
      lastConnectedAt: iso(this.lastConnectedAt),
      refusals: this.refusals,
      lastRefusal: this.lastRefusal,
      nextRetryAt: iso(this.nextRetryAt),
    };
  }

  /** How long the link has been down (0 while connected or before start). */
  downForMs(): number {
    if (this.connected || !this.downSince) return 0;
    return Math.max(0, this.now().getTime() - this.downSince.getTime());
  }

  /** Down for longer than `minutes` (null: never counts). */
  downLongerThan(minutes: number | null): boolean {
    return minutes !== null && this.downForMs() > minutes * 60_000;
  }

  private get reconnectMaxMs(): number {
    return Math.max(this.opts.reconnectMs, this.opts.reconnectMaxMs ?? 60_000);
  }

  private emitLinkState(): void {
    this.emit('linkState', this.linkState());
  }

  /**
   * mqtt.js reconnects by itself only after a lost connection, not after a refused CONNACK (unless
   * reconnectOnConnackError), and always after the same fixed period. So mqtt.js does not reconnect
   * at all here (reconnectPeriod 0): every close, whether of a connection or of a failed attempt,
   * schedules one retry with jittered exponential back-off (src/reconnect.ts). One client, one
   * attempt at a time: a retry starts only after the previous connection closed.
   */
  async start(): Promise<void> {
    if (this.running) return;
    this.running = true;
    const { terminalId } = this.opts;
    this.downSince = this.now();
    this.attempting = true;
    this.attemptError = null;
    const client = mqtt.connect(this.opts.url, {
      clientId: terminalId,
      username: terminalId,
      password: this.opts.secret,
      clean: true,
      keepalive: this.opts.keepaliveSeconds,
      reconnectPeriod: 0,
      connectTimeout: this.opts.connectTimeoutMs,
      queueQoSZero: false,
      will: {
        topic: edgeTopics.up(terminalId, 'status'),
        payload: Buffer.from(JSON.stringify({ v: 1, state: 'offline', terminalId, reason: 'connection-lost' })),
        qos: 1,
        retain: true,
      },
    });
    // Nagle off: an event or an ack never waits behind an earlier unanswered packet (packages/common/src/mqtt-socket.ts)
    mqttNoDelay(client);
    this.client = client;
    client.on('connect', () => {
      this.noteConnected();
      void this.onConnect();
    });
    client.on('close', () => this.onClose());
    client.on('error', (err) => {
      const failure = describeFailure(err, this.now(), this.opts.secret);
      this.lastError = failure.message;
      if (this.attempting && !this.wasConnected) this.attemptError = err;
      else this.log.warn({ err: failure.message, reason: failure.reason }, 'broker connection error');
    });
    client.on('message', (topic, payload) => {
      if (topic === edgeTopics.down(terminalId, 'codes')) this.emit('message', 'codes', payload);
      else if (topic === edgeTopics.down(terminalId, 'commands')) this.emit('message', 'commands', payload);
      else if (topic === edgeTopics.down(terminalId, 'lockers')) this.emit('message', 'lockers', payload);
      else if (topic === edgeTopics.down(terminalId, 'eventAcks')) this.onEventAck(payload);
      else this.log.warn({ topic }, 'message on an unexpected topic dropped');
    });
    this.drainLoop = this.drain();
  }

  private noteConnected(): void {
    const now = this.now();
    if (this.refusals) this.log.info({ refusals: this.refusals, downMs: this.downSince ? now.getTime() - this.downSince.getTime() : null }, 'broker accepted the connection after refusals');
    this.attempting = false;
    this.attemptError = null;
    this.refusals = 0;
    // (down until its subscriptions are granted: onConnect)
    this.nextRetryAt = null;
    this.connectedAt = now;
    this.lastConnectedAt = now;
    this.emitLinkState();
  }

  /** Every close (a lost connection or a failed attempt) schedules exactly one retry. */
  private onClose(): void {
    const now = this.now();
    if (this.wasConnected) {
      this.wasConnected = false;
      // (still down since earlier when this connection never got its subscriptions)
      this.downSince ??= now;
      const upMs = now.getTime() - (this.connectedAt ?? now).getTime();
      // a connection that stayed up resets the back-off; one dropped right away does not
      if (upMs >= this.reconnectMaxMs) this.failures = 0;
      this.connectedAt = null;
      this.log.info({ upMs }, 'disconnected from broker');
      this.emit('disconnected');
    } else if (this.attempting) {
      this.refusals++;
      this.lastRefusal = describeFailure(this.attemptError, now, this.opts.secret);
    }
    this.attempting = false;
    this.attemptError = null;
    if (!this.running) return;
    this.failures++;
    this.scheduleRetry();
  }

  private scheduleRetry(): void {
    if (this.retryTimer || !this.running) return;
    const delay = backoffDelay(this.failures, { initialMs: this.opts.reconnectMs, maxMs: this.reconnectMaxMs }, this.opts.random);
    this.nextRetryAt = new Date(this.now().getTime() + delay);
    const refusal = this.lastRefusal && this.refusals ? { reason: this.lastRefusal.reason, refusals: this.refusals } : {};
    this.log.warn({ ...refusal, failures: this.failures, retryInMs: delay }, this.refusals ? 'broker connection failed; retrying' : 'broker connection lost; reconnecting');
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      this.nextRetryAt = null;
      this.retry();
    }, delay);
    this.emitLinkState();
  }

  private retry(): void {
    const c = this.client;
    if (!this.running || !c || c.connected || this.attempting) return;
    this.attempting = true;
    this.attemptError = null;
    // the same stores: a QoS 1 message in flight is sent again on the new connection
    c.reconnect({ incomingStore: c.incomingStore, outgoingStore: c.outgoingStore });
  }

  private async onConnect(): Promise<void> {
    const client = this.client;
    if (!client) return;
    this.lastError = null;
    this.wasConnected = true;
    this.log.info({ url: this.safeUrl }, 'connected to broker');
    let refused: string[];
    let failed: string | null = null;
    try {
      const granted = await client.subscribeAsync(
        {
          [edgeTopics.down(this.opts.terminalId, 'codes')]: { qos: 1 },
          [edgeTopics.down(this.opts.terminalId, 'commands')]: { qos: 1 },
          [edgeTopics.down(this.opts.terminalId, 'eventAcks')]: { qos: 1 },
          [edgeTopics.down(this.opts.terminalId, 'lockers')]: { qos: 1 },
        },
      );
      refused = granted.filter((g) => g.qos === 128).map((g) => g.topic);
    } catch (err) {
      // no SUBACK (the connection dropped meanwhile): the same, without blaming the broker's rules
      failed = (err as Error).message;
      refused = [];
    }
    if (refused.length || failed !== null) {
      // Without its subscriptions the connection is no link: no acknowledgement comes (the
      // journal stops 32 events on and sends those again for ever on a healthy connection), no
      // code, no command. It is dropped and tried again with back-off, as a refused connection,
      // and the link counts as down from the first such connection (mqtt.unhealthyAfterMinutes).
      if (failed !== null) {
        this.lastError = `subscribing failed: ${failed}`;
        this.log.warn({ err: failed }, 'subscribing failed: reconnecting');
      } else {
        this.lastError = `the broker refused the subscriptions ${refused.join(', ')}`;
        this.log.error({ topics: refused, errorCode: 'SUBSCRIBE_REFUSED' }, 'subscriptions refused by the broker: reconnecting');
      }
      client.stream?.destroy();
      return;
    }
    this.downSince = null;
    this.emitLinkState();
    try {
      await this.publishStatus();
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, 'status after connect failed');
    }
    // what was published on the last connection and not acknowledged goes again, in order
    this.cursor = 0;
    this.rewinds++;
    this.emit('connected');
    this.kick();
  }

  /**
   * down/eventAcks: the central service committed every event up to `upTo` of this journal: they
   * are marked sent (only now: a broker's PUBACK is not a commit, a broker can crash with what it
   * acknowledged). `resendFrom`: it misses that event: the drain goes back there.
   */
  private onEventAck(payload: Buffer): void {
    const ack = parseMessage(EventAck, payload);
    if (!ack) {
      this.log.warn({ bytes: payload.length }, 'malformed event acknowledgement dropped');
      return;
    }
    if (ack.journalId !== this.opts.store.journalId()) {
      this.log.debug({ upTo: ack.upTo }, 'acknowledgement of another journal ignored');
      return;
    }
    // Only what this process has handed to the broker can have been committed: an
    // acknowledgement past it (a central service counting another store's seqs, a store restored
    // from an older copy) marks no more, or events that never left the terminal would count as
    // sent and never be published. After a restart the drain publishes the unsent ones again and
    // the central service acknowledges them again.
    const upTo = Math.min(ack.upTo, this.publishedThrough);
    if (ack.upTo > this.opts.store.lastSeq()) this.log.error({ upTo: ack.upTo, lastSeq: this.opts.store.lastSeq(), errorCode: 'ACK_BEYOND_JOURNAL' }, 'the central service acknowledges seqs this journal never wrote; only what was published is marked sent');
    try {
      const n = this.opts.store.markSentUpTo(upTo, this.now());
      if (n) {
        this.sentCount += n;
        this.lastAckAt = Date.now();
        this.log.debug({ upTo, marked: n }, 'events committed by the central service');
        this.emit('eventsAcknowledged', upTo);
      }
    } catch (err) {
      this.log.error({ err: (err as Error).message }, 'marking events sent failed');
    }
    if (ack.resendFrom !== undefined && ack.resendFrom - 1 < this.cursor) {
      this.log.warn({ from: ack.resendFrom }, 'the central service misses an event: sending again from there');
      this.cursor = ack.resendFrom - 1;
      this.rewinds++;
    }
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

  /**
   * Sends the journal: oldest unsent first, in seq order, up to EVENT_WINDOW published ahead of the
   * central service's acknowledgement. An event is marked sent only by down/eventAcks (onEventAck),
   * never by the broker's PUBACK. No acknowledgement within publishTimeoutMs while events wait for
   * one, or a new connection: everything unacknowledged is published again (the central service
   * dedupes by eventId and applies in seq order).
   */
  private async drain(): Promise<void> {
    while (this.running) {
      const client = this.client;
      if (!client || !client.connected) {
        await this.waitForWake(500);
        continue;
      }
      let row: JournalRow | null;
      let oldest: JournalRow | null;
      try {
        oldest = this.opts.store.nextUnsent();
        row = this.opts.store.nextUnsent(this.cursor);
      } catch (err) {
        this.log.error({ err: (err as Error).message }, 'journal read failed');
        await this.waitForWake(1000);
        continue;
      }
      const waiting = oldest !== null && oldest.seq <= this.cursor;
      if (waiting) {
        const since = Math.max(this.lastAckAt, this.lastPublishAt);
        if (Date.now() - since >= this.opts.publishTimeoutMs) {
          this.log.warn({ from: oldest!.seq, upTo: this.cursor }, `no acknowledgement from the central service within ${this.opts.publishTimeoutMs} ms: sending again`);
          this.cursor = oldest!.seq - 1;
          this.lastPublishAt = Date.now();
          continue;
        }
      }
      if (!row || (waiting && this.cursor - oldest!.seq + 1 >= EVENT_WINDOW)) {
        await this.waitForWake(waiting ? Math.min(1000, this.opts.publishTimeoutMs) : 5000);
        continue;
      }
      const rewinds = this.rewinds;
      // from here the central service may receive it (onEventAck marks no further)
      this.publishedThrough = Math.max(this.publishedThrough, row.seq);
      try {
        // resolves on PUBACK (flow control only); if the connection drops meanwhile, mqtt.js
        // re-sends it on the next connection
        const acked = client.publishAsync(edgeTopics.up(this.opts.terminalId, 'events'), eventPayload(this.opts.terminalId, row, this.opts.store.journalId()), { qos: 1 });
        let timer: NodeJS.Timeout | undefined;
        const timedOut = new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error(`no PUBACK within ${this.opts.publishTimeoutMs} ms`)), this.opts.publishTimeoutMs);
        });
        try {
          await Promise.race([acked, timedOut]);
        } finally {
          clearTimeout(timer);
          acked.catch(() => undefined);
        }
        if (!this.running && !client.connected) return;
        // a resendFrom that came while this publish waited for its PUBACK set the cursor back:
        // it stays there, so the drain sends again from the seq the central service misses
        if (this.rewinds === rewinds) this.cursor = Math.max(this.cursor, row.seq);
        this.lastPublishAt = Date.now();
        this.log.debug({ seq: row.seq, type: row.type }, 'event published');
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
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = null;
    this.nextRetryAt = null;
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
