// The fleet runner: N simulated terminals (terminal.ts) in one process against one broker, with
// paced connects, the agent's reconnect back-off, an event generator and the metrics an operator
// asks about: how many are connected and in sync, how long until all were (since the start or
// since a mark, e.g. a restart of the central service), code arrival latencies, events journalled,
// published, acknowledged (committed by the central service) and their rate.
import { EventEmitter } from 'node:events';
import { monitorEventLoopDelay, type IntervalHistogram } from 'node:perf_hooks';
import type { IClientOptions } from 'mqtt';
import type { CodeEntry } from '@locker/common';
import { SimTerminal, type TerminalCredentials, type TerminalObserver } from './terminal';

export interface FleetOptions {
  /** mqtt://host:port or mqtts://host:port */
  url: string;
  terminals: readonly TerminalCredentials[];
  /** first connects per second (paced, with jitter); 0: all at once */
  connectRate?: number;
  /** the agent's back-off (packages/agent/src/reconnect.ts): full jitter in [reconnectMs, ceiling), ceiling doubling up to reconnectMaxMs */
  reconnectMs?: number;
  reconnectMaxMs?: number;
  keepaliveSeconds?: number;
  connectTimeoutMs?: number;
  publishTimeoutMs?: number;
  syncRetryMs?: number;
  statusIntervalMs?: number;
  /** the agent's status debounce after a change (200 ms); 0: a status at once after every change */
  statusDebounceMs?: number;
  mqttOptions?: Partial<IClientOptions>;
  agentVersion?: string;
  /** every code that appears at a terminal: arrivedAt is Date.now() at arrival, pushedAt the message's `at` */
  onCode?: (terminalId: string, code: CodeEntry, arrivedAt: number, pushedAt: number, kind: 'snapshot' | 'delta') => void;
  random?: () => number;
}

export interface FleetMetrics {
  /** ms since the fleet started */
  t: number;
  terminals: number;
  connected: number;
  inSync: number;
  /** counted since the start or the last mark (see mark()) */
  connectedSinceMark: number;
  inSyncSinceMark: number;
  /** ms from the start / the mark until every terminal was connected, and in sync (null: not yet) */
  allConnectedMs: number | null;
  allInSyncMs: number | null;
  markedAtMs: number;
  attempts: number;
  connects: number;
  disconnects: number;
  /** failed attempts by CONNACK code ('timeout', 'ECONNREFUSED', 'closed', ...) */
  refused: Record<string, number>;
  /** terminals that have never connected and whose last attempt was refused (id and code; at most 20) */
  refusedTerminals: { id: string; code: number | string }[];
  neverConnected: number;
  syncRequests: number;
  droppedMessages: number;
  /** codes: messages received (snapshots, deltas) and codes that appeared */
  codes: { snapshots: number; deltas: number; arrived: number; fromDeltas: number; deltaLatencyMs: { n: number; p50: number | null; p99: number | null; max: number | null } };
  events: { journalled: number; published: number; resent: number; acked: number; backlog: number; ackedPerSecond: number };
  commands: { answered: number; ok: number; duplicates: number };
  /**
   * the simulator's own event-loop delay in the last second, max (ms): when it is long, the
   * simulator itself is the bottleneck (a CONNACK read late, after its connect timeout fired)
   */
  simLagMaxMs: number;
}

export function percentile(sorted: readonly number[], p: number): number | null {
  if (!sorted.length) return null;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

const LATENCY_SAMPLES = 100_000;

export class Fleet extends EventEmitter implements TerminalObserver {
  readonly terminals: SimTerminal[];
  private readonly byId = new Map<string, SimTerminal>();
  private readonly o: Required<Omit<FleetOptions, 'onCode' | 'mqttOptions'>> & Pick<FleetOptions, 'onCode' | 'mqttOptions'>;
  private started = 0;
  private markAt = 0;
  private connectedCount = 0;
  private inSyncCount = 0;
  private connectedSinceMark = 0;
  private inSyncSinceMark = 0;
  private allConnectedMs: number | null = null;
  private allInSyncMs: number | null = null;
  private attempts = 0;
  private connects = 0;
  private disconnects = 0;
  private refusals: Record<string, number> = {};
  private syncRequests = 0;
  private droppedMessages = 0;
  private codesArrivedN = 0;
  private codesFromDeltas = 0;
  private latencies: number[] = [];
  private latencySeen = 0;
  private ev = { published: 0, resent: 0, acked: 0 };
  private cmd = { answered: 0, ok: 0, duplicates: 0 };
  private ackWindow: { at: number; acked: number }[] = [];
  private ticker: NodeJS.Timeout | null = null;
  private pacer: NodeJS.Timeout | null = null;
  private generator: NodeJS.Timeout | null = null;
  private stopping = false;
  private lag: IntervalHistogram | null = null;
  private lagMaxMs = 0;

  constructor(opts: FleetOptions) {
    super();
    this.o = {
      connectRate: 500,
      reconnectMs: 2000,
      reconnectMaxMs: 60_000,
      keepaliveSeconds: 30,
      connectTimeoutMs: 10_000,
      publishTimeoutMs: 15_000,
      syncRetryMs: 10_000,
      statusIntervalMs: 60_000,
      statusDebounceMs: 200,
      agentVersion: 'locker-sim-fleet',
      random: Math.random,
      ...opts,
    };
    const topts = {
      url: this.o.url,
      keepaliveSeconds: this.o.keepaliveSeconds,
      connectTimeoutMs: this.o.connectTimeoutMs,
      publishTimeoutMs: this.o.publishTimeoutMs,
      syncRetryMs: this.o.syncRetryMs,
      statusIntervalMs: this.o.statusIntervalMs,
      statusDebounceMs: this.o.statusDebounceMs,
      mqttOptions: this.o.mqttOptions,
      agentVersion: this.o.agentVersion,
    };
    this.terminals = opts.terminals.map((c) => new SimTerminal(c, topts, this));
    for (const t of this.terminals) this.byId.set(t.id, t);
  }

  terminal(id: string): SimTerminal | undefined {
    return this.byId.get(id);
  }

  /** Connects every terminal, paced at connectRate per second with jitter. */
  start(): void {
    this.started = Date.now();
    this.lag = monitorEventLoopDelay({ resolution: 10 });
    this.lag.enable();
    this.markAt = this.started;
    const rate = this.o.connectRate;
    let next = 0;
    const due = (i: number) => (rate > 0 ? (i * 1000) / rate : 0);
    const step = () => {
      const elapsed = Date.now() - this.started;
      while (next < this.terminals.length && due(next) <= elapsed) {
        const t = this.terminals[next++]!;
        // jitter within one pacing step: a burst of a tick is spread, not sent at once
        const jitter = rate > 0 ? Math.floor(this.o.random() * Math.min(1000, 10_000 / rate)) : 0;
        if (jitter > 0) t.retryTimer = setTimeout(() => this.attempt(t), jitter);
        else this.attempt(t);
      }
      if (next >= this.terminals.length && this.pacer) {
        clearInterval(this.pacer);
        this.pacer = null;
      }
    };
    this.pacer = setInterval(step, 10);
    step();
    this.ticker = setInterval(() => {
      const now = Date.now();
      for (const t of this.terminals) t.tick(now);
      if (this.lag) {
        this.lagMaxMs = Math.round(this.lag.max / 1e6);
        this.lag.reset();
      }
      this.ackWindow.push({ at: now, acked: this.ev.acked });
      while (this.ackWindow.length > 6) this.ackWindow.shift();
      this.emit('tick', this.metrics());
    }, 1000);
  }

  private attempt(t: SimTerminal): void {
    t.retryTimer = null;
    if (this.stopping || t.stopped || t.connected) return;
    this.attempts++;
    t.connect();
  }

  /**
   * Starts counting again: allConnectedMs / allInSyncMs then measure from now. With
   * requireReconnect a terminal counts only after a new connection (use it right after the central
   * service or the broker was killed: terminals still connected to nothing do not count).
   */
  mark(requireReconnect = true): void {
    this.markAt = Date.now();
    this.connectedSinceMark = 0;
    this.inSyncSinceMark = 0;
    this.allConnectedMs = null;
    this.allInSyncMs = null;
    for (const t of this.terminals) {
      t.markConnections = requireReconnect ? t.connections : 0;
      t.countedConnected = !requireReconnect && t.connected;
      t.countedInSync = !requireReconnect && t.inSync;
      if (t.countedConnected) this.connectedSinceMark++;
      if (t.countedInSync) this.inSyncSinceMark++;
    }
    this.checkAll();
  }

  /**
   * Door events at `perSecond` in total over the terminals in sync (round robin), for durationMs
   * (null: until stopEvents). Each is journalled at its terminal and published as the window allows.
   */
  startEvents(perSecond: number, durationMs: number | null = null): void {
    this.stopEvents();
    const began = Date.now();
    let owed = 0;
    let last = began;
    let rr = 0;
    const n = this.terminals.length;
    this.generator = setInterval(() => {
      const now = Date.now();
      owed += ((now - last) / 1000) * perSecond;
      last = now;
      let scanned = 0;
      while (owed >= 1 && scanned < n) {
        const t = this.terminals[rr]!;
        rr = (rr + 1) % n;
        scanned++;
        if (!t.inSync) continue;
        t.doorEvent();
        owed--;
        scanned = 0;
      }
      if (owed > perSecond) owed = perSecond; // nobody in sync: do not pile up a burst
      if (durationMs !== null && now - began >= durationMs) {
        this.stopEvents();
        this.emit('eventsDone');
      }
    }, 10);
  }

  stopEvents(): void {
    if (this.generator) clearInterval(this.generator);
    this.generator = null;
  }

  /** One event journalled at one terminal (tests). */
  journalDoorEvent(id: string): number {
    const t = this.byId.get(id);
    if (!t) throw new Error(`no terminal ${id}`);
    return t.doorEvent();
  }

  metrics(): FleetMetrics {
    const now = Date.now();
    const sorted = [...this.latencies].sort((a, b) => a - b);
    let backlog = 0;
    let journalled = 0;
    let snapshots = 0;
    let deltas = 0;
    let neverConnected = 0;
    const refusedTerminals: { id: string; code: number | string }[] = [];
    for (const t of this.terminals) {
      backlog += t.unacked;
      journalled += t.seq;
      snapshots += t.snapshots;
      deltas += t.deltas;
      if (t.connections === 0) {
        neverConnected++;
        if (t.lastRefusal !== null && refusedTerminals.length < 20) refusedTerminals.push({ id: t.id, code: t.lastRefusal });
      }
    }
    const w0 = this.ackWindow[0];
    const ackedPerSecond = w0 && now > w0.at ? ((this.ev.acked - w0.acked) * 1000) / (now - w0.at) : 0;
    return {
      t: now - this.started,
      terminals: this.terminals.length,
      connected: this.connectedCount,
      inSync: this.inSyncCount,
      connectedSinceMark: this.connectedSinceMark,
      inSyncSinceMark: this.inSyncSinceMark,
      allConnectedMs: this.allConnectedMs,
      allInSyncMs: this.allInSyncMs,
      markedAtMs: this.markAt - this.started,
      attempts: this.attempts,
      connects: this.connects,
      disconnects: this.disconnects,
      refused: { ...this.refusals },
      refusedTerminals,
      neverConnected,
      syncRequests: this.syncRequests,
      droppedMessages: this.droppedMessages,
      codes: {
        snapshots,
        deltas,
        arrived: this.codesArrivedN,
        fromDeltas: this.codesFromDeltas,
        deltaLatencyMs: { n: sorted.length, p50: percentile(sorted, 50), p99: percentile(sorted, 99), max: sorted.length ? sorted[sorted.length - 1]! : null },
      },
      events: { ...this.ev, journalled, backlog, ackedPerSecond: Math.round(ackedPerSecond) },
      commands: { ...this.cmd },
      simLagMaxMs: this.lagMaxMs,
    };
  }

  /** Resolves once pred(metrics) holds (checked every 100 ms); rejects after timeoutMs. */
  async waitFor(pred: (m: FleetMetrics) => boolean, timeoutMs: number, what = 'fleet condition'): Promise<FleetMetrics> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const m = this.metrics();
      if (pred(m)) return m;
      if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}: ${JSON.stringify({ connected: m.connected, inSync: m.inSync, events: m.events, refused: m.refused })}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** Disconnects every terminal (an offline status first when `offline`). */
  async stop(offline = true): Promise<void> {
    this.stopping = true;
    this.stopEvents();
    if (this.pacer) clearInterval(this.pacer);
    if (this.ticker) clearInterval(this.ticker);
    this.lag?.disable();
    this.pacer = this.ticker = null;
    const all = this.terminals;
    for (let i = 0; i < all.length; i += 500) await Promise.all(all.slice(i, i + 500).map((t) => t.stop(offline)));
  }

  private checkAll(): void {
    const n = this.terminals.length;
    const now = Date.now();
    if (this.allConnectedMs === null && this.connectedSinceMark >= n) this.allConnectedMs = now - this.markAt;
    if (this.allInSyncMs === null && this.inSyncSinceMark >= n) {
      this.allInSyncMs = now - this.markAt;
      this.emit('allInSync', this.allInSyncMs);
    }
  }

  private backoff(failures: number): number {
    const floor = Math.max(50, this.o.reconnectMs);
    const max = Math.max(floor, this.o.reconnectMaxMs);
    const ceiling = Math.min(max, floor * 2 ** Math.min(Math.max(1, failures), 32));
    return Math.round(floor + this.o.random() * (ceiling - floor));
  }

  private scheduleRetry(t: SimTerminal): void {
    if (this.stopping || t.stopped || t.retryTimer) return;
    t.failures++;
    t.retryTimer = setTimeout(() => this.attempt(t), this.backoff(t.failures));
  }

  // TerminalObserver
  connected(t: SimTerminal): void {
    this.connects++;
    this.connectedCount++;
    if (!t.countedConnected && t.connections > t.markConnections) {
      t.countedConnected = true;
      this.connectedSinceMark++;
      this.checkAll();
    }
  }

  disconnected(t: SimTerminal, wasConnected: boolean): void {
    if (wasConnected) {
      this.connectedCount--;
      this.disconnects++;
      // a connection that stayed up resets the back-off (the agent: after reconnectMaxMs up)
      t.failures = 0;
    }
    this.scheduleRetry(t);
  }

  refused(t: SimTerminal, code: number | string): void {
    const k = String(code);
    this.refusals[k] = (this.refusals[k] ?? 0) + 1;
  }

  inSync(t: SimTerminal): void {
    this.inSyncCount++;
    if (!t.countedInSync && t.connections > t.markConnections) {
      t.countedInSync = true;
      this.inSyncSinceMark++;
      this.checkAll();
    }
  }

  outOfSync(): void {
    this.inSyncCount--;
  }

  codesArrived(t: SimTerminal, codes: readonly CodeEntry[], pushedAt: number, kind: 'snapshot' | 'delta'): void {
    const now = Date.now();
    this.codesArrivedN += codes.length;
    if (kind === 'delta') {
      this.codesFromDeltas += codes.length;
      const lat = Math.max(0, now - pushedAt);
      for (let i = 0; i < codes.length; i++) {
        this.latencySeen++;
        if (this.latencies.length < LATENCY_SAMPLES) this.latencies.push(lat);
        else {
          const j = Math.floor(this.o.random() * this.latencySeen);
          if (j < LATENCY_SAMPLES) this.latencies[j] = lat;
        }
      }
    }
    if (this.o.onCode) for (const c of codes) this.o.onCode(t.id, c, now, pushedAt, kind);
  }

  eventsAcked(_t: SimTerminal, n: number): void {
    this.ev.acked += n;
  }

  eventsPublished(_t: SimTerminal, n: number, resent: number): void {
    this.ev.published += n;
    this.ev.resent += resent;
  }

  commandAnswered(_t: SimTerminal, ok: boolean, duplicate: boolean): void {
    this.cmd.answered++;
    if (ok) this.cmd.ok++;
    if (duplicate) this.cmd.duplicates++;
  }

  syncRequested(): void {
    this.syncRequests++;
  }

  dropped(): void {
    this.droppedMessages++;
  }
}
