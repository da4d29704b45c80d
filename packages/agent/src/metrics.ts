// The agent's Prometheus metrics (prom-client), served on a listener of its own
// (metrics.host:metrics.port, off by default; docs/metrics.md). One registry per agent: counters
// are counted from the lock bus's events (transactions, door events, jams); gauges are read from
// the agent's state on every scrape (journal backlog, broker link, code cache, boards, ports).
// Labels are bus names, board addresses and event types: no codes, no shipment ids.
import type { Logger } from 'pino';
import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import { MetricsListener } from '@locker/common';
import type { TransactionEvent } from '@locker/lockbus';

/** What the scrape-time gauges read (the Agent implements it). */
export interface AgentMetricsSource {
  journalUnsent(): number;
  mqttConnected(): boolean;
  codesHeld(): number;
  /** seconds since the code cache was last known current (0 while the broker link is up) */
  codesAgeSeconds(): number;
  boards(): { bus: string; portOpen: boolean; boards: { address: number; online: boolean | null }[] }[];
}

const DOOR_EVENTS = new Set(['doorOpened', 'doorClosed', 'itemPlaced', 'itemRemoved', 'forcedOpen', 'doorLeftOpen', 'unlockUnobserved']);

export class AgentMetrics {
  readonly registry = new Registry();
  private readonly transactions: Counter<'bus' | 'board' | 'outcome'>;
  private readonly doorEvents: Counter<'bus' | 'board' | 'type'>;
  private readonly jams: Counter<'bus' | 'board'>;
  /** locks whose door was reported left open and has not closed since (`bus/board/lock` -> bus) */
  private readonly leftOpen = new Map<string, string>();

  constructor(source: AgentMetricsSource, opts: { defaultMetrics?: boolean } = {}) {
    const registers = [this.registry];
    this.transactions = new Counter({
      name: 'locker_agent_bus_transactions_total',
      help: 'Requests on the lock bus, by bus, board (scan: the whole bus) and outcome (ok, NO_REPLY: a timeout, BAD_CHECKSUM, GARBLED_REPLY, WRITE_FAILED, NOT_SENT, ...)',
      labelNames: ['bus', 'board', 'outcome'],
      registers,
    });
    this.doorEvents = new Counter({
      name: 'locker_agent_door_events_total',
      help: 'Door and item events of the locks, by bus, board and type (doorOpened, doorClosed, itemPlaced, itemRemoved, forcedOpen, doorLeftOpen, unlockUnobserved)',
      labelNames: ['bus', 'board', 'type'],
      registers,
    });
    this.jams = new Counter({ name: 'locker_agent_jams_total', help: 'Jams reported by the lock bus (a door that did not open, or did not stay shut), by bus and board', labelNames: ['bus', 'board'], registers });
    const leftOpen = this.leftOpen;
    new Gauge({
      name: 'locker_agent_doors_left_open',
      help: 'Doors reported left open (open longer than doorLeftOpenMs) that have not closed since, by bus',
      labelNames: ['bus'],
      registers,
      collect() {
        this.reset();
        const per = new Map<string, number>();
        for (const bus of leftOpen.values()) per.set(bus, (per.get(bus) ?? 0) + 1);
        for (const b of source.boards()) this.set({ bus: b.bus }, per.get(b.bus) ?? 0);
      },
    });
    new Gauge({
      name: 'locker_agent_journal_unsent',
      help: 'Journalled events not yet acknowledged by the central service (the backlog)',
      registers,
      collect() {
        this.set(source.journalUnsent());
      },
    });
    new Gauge({
      name: 'locker_agent_mqtt_connected',
      help: '1 while the agent is connected to the MQTT broker, else 0',
      registers,
      collect() {
        this.set(source.mqttConnected() ? 1 : 0);
      },
    });
    new Gauge({
      name: 'locker_agent_codes_held',
      help: 'Access codes in the offline cache',
      registers,
      collect() {
        this.set(source.codesHeld());
      },
    });
    new Gauge({
      name: 'locker_agent_codes_age_seconds',
      help: 'Seconds since the code cache was last known current (the last sync with the central service; 0 while the broker link is up)',
      registers,
      collect() {
        this.set(source.codesAgeSeconds());
      },
    });
    new Gauge({
      name: 'locker_agent_board_online',
      help: 'Whether a lock board answers its polls (1) or not (0), by bus and board; absent until its first poll',
      labelNames: ['bus', 'board'],
      registers,
      collect() {
        this.reset();
        for (const b of source.boards()) for (const bd of b.boards) if (bd.online !== null) this.set({ bus: b.bus, board: String(bd.address) }, bd.online ? 1 : 0);
      },
    });
    new Gauge({
      name: 'locker_agent_bus_port_open',
      help: 'Whether the serial port (or TCP gateway) of a bus is open (1) or not (0)',
      labelNames: ['bus'],
      registers,
      collect() {
        this.reset();
        for (const b of source.boards()) this.set({ bus: b.bus }, b.portOpen ? 1 : 0);
      },
    });
    if (opts.defaultMetrics) collectDefaultMetrics({ register: this.registry });
  }

  /** A lock-bus transaction ended (LockBus `transaction` event). */
  transaction(e: TransactionEvent): void {
    this.transactions.inc({ bus: e.bus, board: e.board === null ? 'scan' : String(e.board), outcome: e.outcome });
  }

  /** A lock-bus event (the agent's BUS_EVENTS). */
  busEvent(type: string, e: { bus: string; board?: number; lock?: number }): void {
    const board = e.board === undefined ? '' : String(e.board);
    if (type === 'jam') this.jams.inc({ bus: e.bus, board });
    if (!DOOR_EVENTS.has(type)) return;
    this.doorEvents.inc({ bus: e.bus, board, type });
    const key = `${e.bus}/${board}/${e.lock ?? ''}`;
    if (type === 'doorLeftOpen') this.leftOpen.set(key, e.bus);
    else if (type === 'doorClosed' || type === 'unlockUnobserved') this.leftOpen.delete(key);
  }

  /** Every metric name this registry exposes (tests, the alert rules' check). */
  names(): string[] {
    return this.registry.getMetricsAsArray().map((m) => (m as unknown as { name: string }).name);
  }
}

/** GET /metrics on a listener of its own (metrics.host:metrics.port): @locker/common's MetricsListener. */
export class AgentMetricsServer extends MetricsListener {
  constructor(metrics: AgentMetrics, opts: { host: string; port: number; log: Logger }) {
    super({ ...opts, collect: async () => ({ body: await metrics.registry.metrics(), contentType: metrics.registry.contentType }) });
  }
}
