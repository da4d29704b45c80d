// One lightweight simulated terminal of the fleet simulator (docs/edge-protocol.md): one mqtt.js
// client and a few fields of state, so that 10,000 of them fit in one process. It speaks the edge
// protocol the way the terminal agent (packages/agent) does as far as the central service can tell:
//
// - logs in with client id = username = its terminal id and its secret; subscribes to its four
//   down/ topics, then publishes a retained online status (codes and lockers held, journal
//   backlog); the last will is the retained offline status;
// - holds the codes of its pick up point from down/codes snapshots and deltas with the agent's rules
//   (packages/agent/src/codes.ts): a snapshot of the held epoch with a lower version is ignored, a
//   delta of another epoch or after a gap asks for a snapshot on up/sync (one request outstanding,
//   repeated after syncRetryMs), an old delta is ignored; it announces the new version in a status;
// - keeps only the epoch and version of down/lockers (and one locker to report door events on);
// - journals events with a journal id and seq 1, 2, 3, ... and publishes them in seq order at most
//   32 ahead of the central's acknowledgement (down/eventAcks `upTo`, `resendFrom`); everything not
//   acknowledged goes again on every new connection and after publishTimeoutMs without an ack;
// - answers remote unlocks on up/acks at most once per command id (a repeat gets the stored outcome
//   with duplicate: true; an expired command EXPIRED), and journals the `unlockSent` event.
// Everything it does not need (bus health, sessions, the codes' locker map) it does not keep.
import crypto from 'node:crypto';
import mqtt, { type IClientOptions, type MqttClient } from 'mqtt';
import {
  AckMessage,
  CodesMessage,
  CommandMessage,
  EventAck,
  LockersMessage,
  edgeTopics,
  mqttNoDelay,
  parseMessage,
  type CodeEntry,
  type EdgeEventType,
} from '@locker/common';

/** How many events may be published beyond the last acknowledgement (as the agent). */
export const EVENT_WINDOW = 32;

export interface TerminalCredentials {
  id: string;
  secret: string;
  /** the pick up point the terminal serves (informational) */
  pupUid?: string;
}

export interface TerminalOptions {
  url: string;
  keepaliveSeconds: number;
  connectTimeoutMs: number;
  publishTimeoutMs: number;
  syncRetryMs: number;
  /** a status every this long while connected (the agent's mqtt.statusIntervalSeconds); 0: none */
  statusIntervalMs: number;
  /** a status after a change waits this long, so that changes close together share one (the agent: 200 ms) */
  statusDebounceMs: number;
  /** extra mqtt.js options (TLS: ca, rejectUnauthorized) */
  mqttOptions?: Partial<IClientOptions>;
  agentVersion: string;
}

/** What a terminal reports to its fleet (one object shared by all terminals: no closure per terminal). */
export interface TerminalObserver {
  connected(t: SimTerminal): void;
  disconnected(t: SimTerminal, wasConnected: boolean): void;
  /** a failed attempt: CONNACK code (number), 'timeout' or another error code */
  refused(t: SimTerminal, code: number | string): void;
  inSync(t: SimTerminal): void;
  outOfSync(t: SimTerminal): void;
  /** codes that appeared at the terminal (a snapshot's new ones or a delta's upserts); pushedAt: the message's `at` */
  codesArrived(t: SimTerminal, codes: readonly CodeEntry[], pushedAt: number, kind: 'snapshot' | 'delta'): void;
  eventsAcked(t: SimTerminal, n: number): void;
  eventsPublished(t: SimTerminal, n: number, resent: number): void;
  commandAnswered(t: SimTerminal, ok: boolean, duplicate: boolean): void;
  syncRequested(t: SimTerminal, reason: string): void;
  dropped(t: SimTerminal, kind: string): void;
}

interface JournalEntry {
  seq: number;
  payload: string;
  /** highest connection number it was published on (0: never) */
  sentOn: number;
}

export class SimTerminal {
  client: MqttClient | null = null;
  connected = false;
  /** connections made so far (1 after the first CONNACK) */
  connections = 0;
  /** consecutive failed attempts / lost connections (the back-off's exponent) */
  failures = 0;
  lastRefusal: number | string | null = null;
  /** the status of this connection was acknowledged by the broker */
  statusAcked = false;
  codes = new Map<string, string>(); // code id -> hash
  epoch: string | null = null;
  version = 0;
  lockersEpoch: string | null = null;
  lockersVersion = 0;
  /** a locker of the PUP to report door events on (from down/lockers) */
  locker: { uid: string; bus: string; board: number; lock: number } | null = null;
  syncAskedAt = 0;
  readonly journalId = crypto.randomUUID();
  seq = 0;
  acked = 0;
  /** next seq to publish on this connection */
  private cursor = 1;
  private journal: JournalEntry[] = [];
  private lastProgressAt = 0;
  private commands: Map<string, string> | null = null;
  private doorOpen = false;
  /** subscribed and status sent on this connection: events may go */
  private linkReady = false;
  private syncReason: 'gap' | 'epoch' | 'empty' | 'manual' = 'manual';
  readonly startedAt = new Date().toISOString();
  /** test hook: acknowledgements are not honoured while set (the events stay unsent) */
  ignoreAcks = false;
  retryTimer: NodeJS.Timeout | null = null;
  stopped = false;
  /** the in-sync state last reported to the observer */
  reportedInSync = false;
  /** the fleet's bookkeeping: connections at its last mark, and whether counted since */
  markConnections = 0;
  countedConnected = false;
  countedInSync = false;
  lastStatusAt = 0;
  private statusTimer: NodeJS.Timeout | null = null;
  snapshots = 0;
  deltas = 0;

  constructor(
    readonly cred: TerminalCredentials,
    private readonly opts: TerminalOptions,
    private readonly obs: TerminalObserver,
  ) {}

  get id(): string {
    return this.cred.id;
  }

  /** connected, its status delivered, a code set held and no snapshot asked for */
  get inSync(): boolean {
    return this.connected && this.statusAcked && this.epoch !== null && this.syncAskedAt === 0;
  }

  /** events journalled and not yet acknowledged by the central service */
  get unacked(): number {
    return this.seq - this.acked;
  }

  connect(): void {
    if (this.stopped) return;
    if (this.client) {
      if (this.client.connected || this.client.reconnecting) return;
      this.client.reconnect();
      return;
    }
    const id = this.cred.id;
    const c = mqtt.connect(this.opts.url, {
      ...this.opts.mqttOptions,
      clientId: id,
      username: id,
      password: this.cred.secret,
      clean: true,
      keepalive: this.opts.keepaliveSeconds,
      connectTimeout: this.opts.connectTimeoutMs,
      reconnectPeriod: 0,
      resubscribe: false,
      queueQoSZero: false,
      will: { topic: edgeTopics.up(id, 'status'), payload: Buffer.from(JSON.stringify({ v: 1, state: 'offline', terminalId: id, reason: 'connection-lost' })), qos: 1, retain: true },
    });
    // as the agent (packages/agent/src/edge-link.ts): Nagle off
    mqttNoDelay(c);
    this.client = c;
    c.on('connect', () => this.onConnect());
    c.on('close', () => this.onClose());
    c.on('error', (err: Error & { code?: unknown }) => {
      if (this.connected) return;
      const code = typeof err.code === 'number' ? err.code : /connack timeout/i.test(err.message) ? 'timeout' : typeof err.code === 'string' ? err.code : 'error';
      this.lastRefusal = code;
    });
    c.on('message', (topic, payload) => this.onMessage(topic, payload));
  }

  /** Ends the connection; with `offline` the agent's clean shutdown (an offline status first). */
  async stop(offline = true): Promise<void> {
    this.stopped = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = null;
    if (this.statusTimer) clearTimeout(this.statusTimer);
    this.statusTimer = null;
    const c = this.client;
    if (!c) return;
    if (offline && c.connected) {
      const id = this.cred.id;
      await Promise.race([
        c.publishAsync(edgeTopics.up(id, 'status'), JSON.stringify({ v: 1, state: 'offline', terminalId: id, reason: 'shutdown', at: new Date().toISOString() }), { qos: 1, retain: true }).catch(() => undefined),
        new Promise((r) => setTimeout(r, 2000)),
      ]);
    }
    await new Promise<void>((r) => c.end(true, {}, () => r()));
  }

  /** Drops the connection as a network failure would (no DISCONNECT, the last will fires). */
  dropConnection(): void {
    this.client?.stream?.destroy();
  }

  private onConnect(): void {
    this.connected = true;
    this.connections++;
    this.statusAcked = false;
    this.lastRefusal = null;
    this.obs.connected(this);
    const c = this.client!;
    const id = this.cred.id;
    const conn = this.connections;
    c.subscribe(
      { [edgeTopics.down(id, 'codes')]: { qos: 1 }, [edgeTopics.down(id, 'commands')]: { qos: 1 }, [edgeTopics.down(id, 'eventAcks')]: { qos: 1 }, [edgeTopics.down(id, 'lockers')]: { qos: 1 } },
      (err) => {
        if (err || conn !== this.connections || !this.connected) return;
        this.publishStatus();
        this.linkReady = true;
        if (this.syncAskedAt !== 0) {
          this.syncAskedAt = 0;
          this.askSync(this.syncReason);
        }
        // what was published on the last connection and not acknowledged goes again, in order
        this.cursor = this.acked + 1;
        this.lastProgressAt = Date.now();
        this.pump();
      },
    );
  }

  private onClose(): void {
    const was = this.connected;
    this.connected = false;
    this.linkReady = false;
    if (this.statusTimer) clearTimeout(this.statusTimer);
    this.statusTimer = null;
    this.statusAcked = false;
    this.checkSync();
    this.obs.disconnected(this, was);
    if (!was && this.lastRefusal !== null) this.obs.refused(this, this.lastRefusal);
    else if (!was) this.obs.refused(this, 'closed');
  }

  /** A status soon (the agent's statusSoon: changes within 200 ms share one status; statusDebounceMs 0: at once). */
  statusSoon(): void {
    if (this.opts.statusDebounceMs <= 0) return this.publishStatus();
    if (this.statusTimer || !this.connected) return;
    this.statusTimer = setTimeout(() => {
      this.statusTimer = null;
      this.publishStatus();
    }, this.opts.statusDebounceMs);
  }

  /** The status the agent publishes: codes and lockers held, the journal's backlog. */
  publishStatus(): void {
    const c = this.client;
    if (!c || !this.connected) return;
    const id = this.cred.id;
    const now = new Date().toISOString();
    const status = {
      v: 1,
      state: 'online',
      terminalId: id,
      agentVersion: this.opts.agentVersion,
      startedAt: this.startedAt,
      at: now,
      codes: { epoch: this.epoch, version: this.version, count: this.codes.size },
      lockers: { epoch: this.lockersEpoch, version: this.lockersVersion },
      journal: { unsent: this.seq - this.acked, lastSeq: this.seq, id: this.journalId },
      buses: [],
    };
    const conn = this.connections;
    this.lastStatusAt = Date.now();
    c.publish(edgeTopics.up(id, 'status'), JSON.stringify(status), { qos: 1, retain: true }, (err) => {
      if (err || conn !== this.connections) return;
      this.statusAcked = true;
      this.checkSync();
    });
  }

  private checkSync(): void {
    const now = this.inSync;
    if (now && !this.reportedInSync) {
      this.reportedInSync = true;
      this.obs.inSync(this);
    } else if (!now && this.reportedInSync) {
      this.reportedInSync = false;
      this.obs.outOfSync(this);
    }
  }

  private onMessage(topic: string, payload: Buffer): void {
    const kind = topic.slice(topic.lastIndexOf('/') + 1);
    switch (kind) {
      case 'codes':
        return this.onCodes(payload);
      case 'eventAcks':
        return this.onEventAck(payload);
      case 'commands':
        return this.onCommand(payload);
      case 'lockers':
        return this.onLockers(payload);
      default:
        this.obs.dropped(this, kind);
    }
  }

  private onCodes(payload: Buffer): void {
    const m = parseMessage(CodesMessage, payload);
    if (!m) return this.obs.dropped(this, 'codes');
    const at = Date.parse(m.at);
    if (m.type === 'snapshot') {
      if (m.epoch === this.epoch && m.version < this.version) return; // late or redelivered
      const fresh: CodeEntry[] = [];
      const next = new Map<string, string>();
      for (const e of m.codes) {
        if (!this.codes.has(e.id)) fresh.push(e);
        next.set(e.id, e.hash);
      }
      this.codes = next;
      const changed = m.epoch !== this.epoch || m.version !== this.version;
      this.epoch = m.epoch;
      this.version = m.version;
      this.syncAskedAt = 0;
      this.snapshots++;
      if (fresh.length) this.obs.codesArrived(this, fresh, at, 'snapshot');
      if (changed) this.statusSoon();
      this.checkSync();
      return;
    }
    if (this.epoch === null) return this.askSync('empty');
    if (m.epoch !== this.epoch) return this.askSync('epoch');
    if (m.version <= this.version) return; // already applied
    if (m.baseVersion !== this.version) return this.askSync('gap');
    const fresh: CodeEntry[] = [];
    for (const e of m.upserts) {
      if (!this.codes.has(e.id)) fresh.push(e);
      this.codes.set(e.id, e.hash);
    }
    for (const id of m.revoke) this.codes.delete(id);
    this.version = m.version;
    this.deltas++;
    if (fresh.length) this.obs.codesArrived(this, fresh, at, 'delta');
    this.statusSoon();
  }

  /** up/sync: at most one request outstanding (repeated by retrySync after syncRetryMs). */
  askSync(reason: 'gap' | 'epoch' | 'empty' | 'manual'): void {
    if (this.syncAskedAt !== 0 && Date.now() - this.syncAskedAt < this.opts.syncRetryMs) return;
    this.syncAskedAt = Date.now();
    this.syncReason = reason;
    this.checkSync();
    this.obs.syncRequested(this, reason);
    const c = this.client;
    if (!c || !this.connected) return;
    const msg = { v: 1, requestId: crypto.randomUUID(), want: 'snapshot', reason, have: this.epoch === null ? null : { epoch: this.epoch, version: this.version } };
    c.publish(edgeTopics.up(this.cred.id, 'sync'), JSON.stringify(msg), { qos: 1 });
  }

  private onLockers(payload: Buffer): void {
    const m = parseMessage(LockersMessage, payload);
    if (!m) return this.obs.dropped(this, 'lockers');
    if (m.epoch === this.lockersEpoch && m.version <= this.lockersVersion) return;
    this.lockersEpoch = m.epoch;
    this.lockersVersion = m.version;
    const l = m.lockers[0];
    this.locker = l ? { uid: l.uid, bus: l.bus, board: l.board, lock: l.lock } : null;
    this.statusSoon();
  }

  private onCommand(payload: Buffer): void {
    const m = parseMessage(CommandMessage, payload);
    if (!m) {
      // the agent answers BAD_COMMAND when it can read the id
      let commandId: unknown;
      try {
        commandId = (JSON.parse(payload.toString('utf8')) as { commandId?: unknown }).commandId;
      } catch {
        /* not JSON */
      }
      if (typeof commandId === 'string' && commandId) this.answer({ v: 1, commandId, ok: false, error: 'BAD_COMMAND', message: 'the command does not fit the protocol', at: new Date().toISOString() }, false);
      else this.obs.dropped(this, 'commands');
      return;
    }
    this.commands ??= new Map();
    const done = this.commands.get(m.commandId);
    if (done !== undefined) {
      this.answer({ ...(JSON.parse(done) as AckMessage), duplicate: true, at: new Date().toISOString() }, true);
      return;
    }
    let ack: AckMessage;
    if (Date.parse(m.expiresAt) < Date.now()) ack = { v: 1, commandId: m.commandId, ok: false, error: 'EXPIRED', message: 'the command arrived after it expired', at: new Date().toISOString() };
    else {
      ack = { v: 1, commandId: m.commandId, ok: true, at: new Date().toISOString() };
      this.journalEvent('unlockSent', { bus: m.bus, board: m.board, lock: m.lock, lockerUid: m.lockerUid, cause: 'command', commandId: m.commandId, sessionId: null, alreadyOpen: false });
    }
    this.commands.set(m.commandId, JSON.stringify(ack));
    if (this.commands.size > 1000) this.commands.delete(this.commands.keys().next().value!);
    this.answer(ack, false);
  }

  private answer(ack: AckMessage, duplicate: boolean): void {
    this.client?.publish(edgeTopics.up(this.cred.id, 'acks'), JSON.stringify(ack), { qos: 1 });
    this.obs.commandAnswered(this, ack.ok, duplicate);
  }

  private onEventAck(payload: Buffer): void {
    const ack = parseMessage(EventAck, payload);
    if (!ack) return this.obs.dropped(this, 'eventAcks');
    if (ack.journalId !== this.journalId || this.ignoreAcks) return;
    const upTo = Math.min(ack.upTo, this.seq);
    if (upTo > this.acked) {
      const n = upTo - this.acked;
      this.acked = upTo;
      let drop = 0;
      while (drop < this.journal.length && this.journal[drop]!.seq <= upTo) drop++;
      this.journal.splice(0, drop);
      if (this.cursor <= upTo) this.cursor = upTo + 1;
      this.lastProgressAt = Date.now();
      this.obs.eventsAcked(this, n);
    }
    if (ack.resendFrom !== undefined && ack.resendFrom < this.cursor && ack.resendFrom > this.acked) this.cursor = ack.resendFrom;
    this.pump();
  }

  /** Writes an event to the journal (before publishing it, as the agent) and publishes what the window allows. */
  journalEvent(type: EdgeEventType, fields: Record<string, unknown>): number {
    const seq = ++this.seq;
    const ev = { v: 1, eventId: crypto.randomUUID(), seq, terminalId: this.cred.id, journalId: this.journalId, at: new Date().toISOString(), type, ...fields };
    this.journal.push({ seq, payload: JSON.stringify(ev), sentOn: 0 });
    if (this.journal.length === 1) this.lastProgressAt = Date.now();
    this.pump();
    return seq;
  }

  /** A door cycle step on the terminal's locker: doorOpened, then doorClosed on the next call. */
  doorEvent(): number {
    const l = this.locker ?? { uid: undefined, bus: 'bus0', board: 0, lock: 1 };
    const base = { bus: l.bus, board: l.board, lock: l.lock, ...(l.uid ? { lockerUid: l.uid } : {}), item: false, sessionId: null };
    this.doorOpen = !this.doorOpen;
    return this.journalEvent(this.doorOpen ? 'doorOpened' : 'doorClosed', this.doorOpen ? { ...base, commanded: false } : base);
  }

  /** Publishes journal entries from the cursor, at most EVENT_WINDOW beyond the acknowledgement. */
  pump(): void {
    const c = this.client;
    if (!c || !this.linkReady) return;
    const limit = Math.min(this.seq, this.acked + EVENT_WINDOW);
    let n = 0;
    let resent = 0;
    const conn = this.connections;
    while (this.cursor <= limit) {
      const e = this.journal[this.cursor - this.acked - 1];
      if (!e) break;
      if (e.sentOn !== 0) resent++;
      e.sentOn = conn;
      c.publish(edgeTopics.up(this.cred.id, 'events'), e.payload, { qos: 1 });
      this.cursor++;
      n++;
    }
    if (n) this.obs.eventsPublished(this, n, resent);
  }

  /** Called about every second by the fleet: the publish timeout and the sync retry. */
  tick(now: number): void {
    if (!this.connected) return;
    if (this.opts.statusIntervalMs > 0 && this.linkReady && now - this.lastStatusAt >= this.opts.statusIntervalMs) this.publishStatus();
    if (this.journal.length && this.cursor > this.acked + 1 && now - this.lastProgressAt >= this.opts.publishTimeoutMs) {
      this.cursor = this.acked + 1;
      this.lastProgressAt = now;
      this.pump();
    }
    if (this.syncAskedAt !== 0 && now - this.syncAskedAt >= this.opts.syncRetryMs) {
      this.syncAskedAt = 0;
      this.askSync(this.syncReason);
    }
  }
}
