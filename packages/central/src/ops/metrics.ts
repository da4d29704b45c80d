// The operator metrics endpoint: Prometheus text format (0.0.4) on `GET /metrics`, rendered by
// prom-client, on a listener of its own (metrics.host:metrics.port), never on the tenant API's
// port. Off by default (metrics.enabled). docs/metrics.md lists every metric.
//
// Two kinds of metric:
// - event metrics (counters, histograms) live in one process-wide registry (metricsRegistry) and are
//   counted where things happen (a booking, a transition, a callback attempt, a terminal event).
//   They cost a few hundred nanoseconds each and are counted whether or not the endpoint is on; the
//   per-request histogram is only observed when metrics.enabled (app.ts).
// - state gauges, and totals kept elsewhere (registerScrapeMetric), are read fresh from their
//   source (the database, the pool) on every scrape, through the AppContext of the service whose
//   endpoint is scraped; nothing is kept between scrapes. A gauge whose read fails is left out of
//   that scrape (logged), the rest is served.
//
// No personal data in labels: routes are templates, never raw URLs; reasons are error codes; ids
// are pick up point uids and terminal ids.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { MetricsListener } from '@locker/common';
import type { AppContext, Worker } from '../context';
import type { Logger } from '../logger';
import { registerWorkerFactory } from '../workers';

/** The process-wide registry of the central service's event metrics (and Node's process metrics once an endpoint runs). */
export const metricsRegistry = new Registry();

const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

export const centralMetrics = {
  httpRequestDuration: new Histogram({
    name: 'locker_http_request_duration_seconds',
    help: 'Tenant API requests by method, route template (unmatched: no route) and outcome (success, or the envelope error code), and their duration',
    labelNames: ['method', 'route', 'outcome'] as const,
    buckets: LATENCY_BUCKETS,
    registers: [metricsRegistry],
  }),
  bookings: new Counter({
    name: 'locker_bookings_total',
    help: 'Shipments created with a locker booked (or chained onto a booked locker), by flow; counted once committed',
    labelNames: ['flow'] as const,
    registers: [metricsRegistry],
  }),
  bookingRefusals: new Counter({
    name: 'locker_booking_refusals_total',
    help: 'Shipment creations refused, by reason (the API error code, e.g. NoLockerAvailable)',
    labelNames: ['reason'] as const,
    registers: [metricsRegistry],
  }),
  transitions: new Counter({
    name: 'locker_shipment_transitions_total',
    help: 'Shipment state transitions, by cause (api, door, simulate, clock) and the state entered; counted once committed',
    labelNames: ['cause', 'to'] as const,
    registers: [metricsRegistry],
  }),
  callbackDeliveries: new Counter({
    name: 'locker_callback_deliveries_total',
    help: 'Callback delivery attempts, by outcome (delivered, failed, skipped)',
    labelNames: ['outcome'] as const,
    registers: [metricsRegistry],
  }),
  callbackFailures: new Counter({
    name: 'locker_callback_delivery_failures_total',
    help: 'Failed callback delivery attempts (retried later), by reason (http_4xx, http_5xx, redirect, refused, timeout, network)',
    labelNames: ['reason'] as const,
    registers: [metricsRegistry],
  }),
  edgeEvents: new Counter({
    name: 'locker_edge_events_ingested_total',
    help: 'Terminal events taken in over MQTT, by event type and outcome (stored, duplicate)',
    labelNames: ['type', 'outcome'] as const,
    registers: [metricsRegistry],
  }),
  edgeIrregular: new Counter({
    name: 'locker_edge_events_irregular_total',
    help: 'Terminal events out of the ordinary, by kind: gap_skipped (seqs given up on after edge.gapGiveUpSeconds: never came), late (applied out of seq order), reapplied (a refused door event applied after a late one), reapply_failed (that failed otherwise: it stays refused, the log names it)',
    labelNames: ['kind'] as const,
    registers: [metricsRegistry],
  }),
  codePushDuration: new Histogram({
    name: 'locker_code_push_duration_seconds',
    help: 'Code pushes to terminals, by kind (delta, snapshot): from the code change (a delta) or the start of the snapshot to the publish on the broker',
    labelNames: ['kind'] as const,
    buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [metricsRegistry],
  }),
};
// every kind exported from the start at 0: an alert on increase() sees the first one after a
// restart (a series that appears at 1 is its own baseline, and its first increase reads as 0)
for (const kind of ['gap_skipped', 'late', 'reapplied', 'reapply_failed']) centralMetrics.edgeIrregular.inc({ kind }, 0);

/** outcome label of a tenant API answer: success, or its envelope error code (bounded set) */
export function requestOutcome(status: number, errorCode: string | undefined): string {
  if (status < 400) return 'success';
  return errorCode ?? `http_${status}`;
}

export interface MetricSample {
  labels: Record<string, string>;
  value: number;
}

/** A gauge (or a counter: type) read from its source on every scrape. */
export interface ScrapeMetric {
  name: string;
  help: string;
  labelNames: readonly string[];
  /** 'counter': the values only grow (totals since the start, read at scrape time); named ..._total */
  type?: 'counter';
  collect(ctx: AppContext): Promise<MetricSample[]>;
}

const scrapeMetrics: ScrapeMetric[] = [];

export function registerScrapeMetric(g: ScrapeMetric): void {
  if (!scrapeMetrics.some((x) => x.name === g.name)) scrapeMetrics.push(g);
}

/** The names of every metric the central service exposes (event metrics and scrape gauges), for tests and the alert rules' check. */
export function centralMetricNames(): string[] {
  return [...metricsRegistry.getMetricsAsArray().map((m) => (m as unknown as { name: string }).name), ...scrapeMetrics.map((g) => g.name)];
}

let defaultMetricsOn = false;

/** The registry one endpoint serves: the process-wide event metrics plus this service's scrape gauges. */
export function serviceRegistry(ctx: AppContext, log: Logger): Registry {
  const own = new Registry();
  for (const g of scrapeMetrics) {
    const read = async (put: (s: MetricSample) => void) => {
      try {
        for (const s of await g.collect(ctx)) put(s);
      } catch (err) {
        log.warn({ metric: g.name, err: (err as Error).message }, 'reading a metric failed; left out of this scrape');
      }
    };
    const opts = { name: g.name, help: g.help, labelNames: g.labelNames, registers: [own] };
    if (g.type === 'counter') {
      // a total kept elsewhere (e.g. the checkpoint thread's stats), exposed as a counter
      new Counter({
        ...opts,
        async collect() {
          this.reset();
          await read((s) => this.inc(s.labels, s.value));
        },
      });
    } else {
      new Gauge({
        ...opts,
        async collect() {
          this.reset();
          await read((s) => this.set(s.labels, s.value));
        },
      });
    }
  }
  return Registry.merge([metricsRegistry, own]);
}

// ---- the service's own state gauges --------------------------------------------------------------

registerScrapeMetric({
  name: 'locker_callback_outbox_pending',
  help: 'Callback messages waiting to be delivered (the outbox backlog, every tenant)',
  labelNames: [],
  async collect(ctx) {
    const r = await ctx.db.kysely.selectFrom('callback_outbox').select((eb) => eb.fn.countAll<number | string>().as('n')).where('status', '=', 'pending').executeTakeFirst();
    return [{ labels: {}, value: Number(r?.n ?? 0) }];
  },
});

registerScrapeMetric({
  name: 'locker_callback_outbox_oldest_pending_age_seconds',
  help: 'Age of the oldest callback message not yet delivered (0 when none is pending)',
  labelNames: [],
  async collect(ctx) {
    const r = await ctx.db.kysely.selectFrom('callback_outbox').select((eb) => eb.fn.min('created_at').as('oldest')).where('status', '=', 'pending').executeTakeFirst();
    const oldest = r?.oldest ? Date.parse(String(r.oldest)) : NaN;
    return [{ labels: {}, value: Number.isNaN(oldest) ? 0 : Math.max(0, (ctx.clock.now().getTime() - oldest) / 1000) }];
  },
});

/** the last read of the unprocessed events, shared by the two gauges of one scrape */
const unprocessedRead = new WeakMap<AppContext, { at: number; read: Promise<{ n: number; oldest: number }> }>();

/**
 * The terminals' events stored but not yet applied: their count (the edge_events_pending index,
 * processed first) and the oldest one's receipt. One read per scrape: a read less than a second
 * old is shared. Its cost grows with the backlog (each unprocessed row is read for its time).
 */
function unprocessedEvents(ctx: AppContext): Promise<{ n: number; oldest: number }> {
  const now = Date.now();
  const last = unprocessedRead.get(ctx);
  if (last && now - last.at < 1000) return last.read;
  const read = ctx.db.kysely
    .selectFrom('edge_events')
    .select((eb) => [eb.fn.countAll<number | string>().as('n'), eb.fn.min('received_at').as('oldest')])
    .where('processed', '=', 0)
    .executeTakeFirst()
    .then((r) => ({ n: Number(r?.n ?? 0), oldest: r?.oldest ? Date.parse(String(r.oldest)) : NaN }));
  unprocessedRead.set(ctx, { at: now, read });
  read.catch(() => unprocessedRead.delete(ctx));
  return read;
}

registerScrapeMetric({
  name: 'locker_edge_events_unprocessed',
  help: "Terminal events stored but not yet applied: held behind a missing earlier seq or a new journal's seq 1, waiting for a busy terminal's turn, or retried after a failed apply",
  labelNames: [],
  async collect(ctx) {
    return [{ labels: {}, value: (await unprocessedEvents(ctx)).n }];
  },
});

registerScrapeMetric({
  name: 'locker_edge_events_oldest_unprocessed_age_seconds',
  help: 'Age of the oldest terminal event stored but not yet applied (0 when none), from its receipt',
  labelNames: [],
  async collect(ctx) {
    const { oldest } = await unprocessedEvents(ctx);
    return [{ labels: {}, value: Number.isNaN(oldest) ? 0 : Math.max(0, (ctx.clock.now().getTime() - oldest) / 1000) }];
  },
});

/** per terminal: provisioned terminals that never connected count as offline */
async function terminalRows(ctx: AppContext) {
  return ctx.db.kysely
    .selectFrom('terminals as t')
    .leftJoin('edge_terminals as e', 'e.terminal_id', 't.id')
    .select(['t.id', 't.pup_uid', 'e.online', 'e.last_status'])
    .orderBy('t.id')
    .execute();
}

registerScrapeMetric({
  name: 'locker_terminal_online',
  help: 'Whether a terminal is online (1) or offline (0) by its last status on the broker (a provisioned terminal never seen is 0)',
  labelNames: ['terminal', 'pup'],
  async collect(ctx) {
    return (await terminalRows(ctx)).map((r) => ({ labels: { terminal: r.id, pup: r.pup_uid }, value: Number(r.online ?? 0) === 1 ? 1 : 0 }));
  },
});

registerScrapeMetric({
  name: 'locker_terminals',
  help: 'Provisioned terminals by state (online, offline)',
  labelNames: ['state'],
  async collect(ctx) {
    const rows = await terminalRows(ctx);
    const online = rows.filter((r) => Number(r.online ?? 0) === 1).length;
    return [
      { labels: { state: 'online' }, value: online },
      { labels: { state: 'offline' }, value: rows.length - online },
    ];
  },
});

registerScrapeMetric({
  name: 'locker_terminal_journal_unsent',
  help: 'Events a terminal had journalled but not yet had acknowledged, by its last online status',
  labelNames: ['terminal'],
  async collect(ctx) {
    const out: MetricSample[] = [];
    for (const r of await terminalRows(ctx)) {
      if (!r.last_status) continue;
      try {
        const s = JSON.parse(r.last_status) as { state?: string; journal?: { unsent?: unknown } };
        if (s.state === 'online' && typeof s.journal?.unsent === 'number') out.push({ labels: { terminal: r.id }, value: s.journal.unsent });
      } catch {
        // a malformed stored status: no sample
      }
    }
    return out;
  },
});

registerScrapeMetric({
  name: 'locker_db_pool_connections',
  help: 'PostgreSQL pool connections by state (total, idle, waiting: queries waiting for a connection; max: the configured size). Absent on SQLite',
  labelNames: ['state'],
  async collect(ctx) {
    const p = ctx.db.pool;
    if (!p) return [];
    return [
      { labels: { state: 'total' }, value: p.totalCount },
      { labels: { state: 'idle' }, value: p.idleCount },
      { labels: { state: 'waiting' }, value: p.waitingCount },
      { labels: { state: 'max' }, value: ctx.config.database.poolSize },
    ];
  },
});

registerScrapeMetric({
  name: 'locker_db_pg_pipelined_reads_total',
  type: 'counter',
  help: 'PostgreSQL with database.pgReadPipelines > 0: small fixed reads pipelined on the connections of their own since the start, by outcome: answered (rows or the server\'s error); resent (the connection died before the answer: sent once more on a fresh one); connections opened (outcome connection_opened). Absent without pipelines',
  labelNames: ['outcome'],
  async collect(ctx) {
    const st = ctx.db.pgPipelines?.stats;
    if (!st) return [];
    return [
      { labels: { outcome: 'answered' }, value: st.reads },
      { labels: { outcome: 'resent' }, value: st.resent },
      { labels: { outcome: 'connection_opened' }, value: st.opened },
    ];
  },
});

registerScrapeMetric({
  name: 'locker_sqlite_checkpoint_thread_up',
  help: 'SQLite with database.sqliteCheckpoints background: 1 while the WAL checkpoint thread works, 0 once it failed (checkpoints run inside the commits again, on the event loop). Absent otherwise',
  // a label, so that the gauge has no sample at all without the thread (an unlabelled gauge reads 0)
  labelNames: ['mode'],
  async collect(ctx) {
    const c = ctx.db.walCheckpointer;
    return c ? [{ labels: { mode: 'background' }, value: c.alive ? 1 : 0 }] : [];
  },
});

registerScrapeMetric({
  name: 'locker_sqlite_wal_checkpoints_total',
  type: 'counter',
  help: 'WAL checkpoints of the checkpoint thread since the start, by outcome: done; overlapped (of those done, the main connection wrote meanwhile: the WAL did not restart); refused (SQLite refused it). Absent without the thread',
  labelNames: ['outcome'],
  async collect(ctx) {
    const st = ctx.db.walCheckpointer?.stats;
    if (!st) return [];
    return [
      { labels: { outcome: 'done' }, value: st.checkpoints },
      { labels: { outcome: 'overlapped' }, value: st.overlapped },
      { labels: { outcome: 'refused' }, value: st.errors },
    ];
  },
});

registerScrapeMetric({
  name: 'locker_sqlite_thread_reads_total',
  type: 'counter',
  help: 'SQLite with database.sqliteReadThreads > 0: reads (GetShipments pages, GetAccounts searches, the tenant API quick reads) sent to the read threads since the start, by outcome: done (answered by a thread); failed (the thread failed the read or died with it: read on the main connection instead); overflowed (the threads held as many reads as they take, or as many searches waited, or every thread ran a search for a read that does not wait behind one: read on the main connection). Absent without read threads',
  labelNames: ['outcome'],
  async collect(ctx) {
    const st = ctx.db.readPool?.stats;
    if (!st) return [];
    return [
      { labels: { outcome: 'done' }, value: st.reads },
      { labels: { outcome: 'failed' }, value: st.failed },
      { labels: { outcome: 'overflowed' }, value: st.overflowed },
    ];
  },
});

registerScrapeMetric({
  name: 'locker_sqlite_read_threads_lost_total',
  type: 'counter',
  help: 'SQLite read threads that died since the start (each is started again a second later; SQLITE_READ_THREAD_LOST in the log). Absent without read threads',
  labelNames: ['mode'],
  async collect(ctx) {
    const st = ctx.db.readPool?.stats;
    return st ? [{ labels: { mode: 'threads' }, value: st.threadsLost }] : [];
  },
});

registerScrapeMetric({
  name: 'locker_sqlite_wal_checkpoint_max_seconds',
  help: 'The longest WAL checkpoint of the checkpoint thread since the start (the writes waited that long; the event loop did not). Absent without the thread',
  labelNames: ['mode'],
  async collect(ctx) {
    const st = ctx.db.walCheckpointer?.stats;
    return st ? [{ labels: { mode: 'background' }, value: st.maxMs / 1000 }] : [];
  },
});

// ---- the listener ---------------------------------------------------------------------------------

export class MetricsServer implements Worker {
  readonly name = 'metrics';
  private readonly log: Logger;
  private registry: Registry | null = null;
  private listener: MetricsListener | null = null;

  constructor(private readonly ctx: AppContext) {
    this.log = ctx.log.child({ ns: 'central.metrics' });
  }

  async start(): Promise<void> {
    if (this.listener) return;
    const { host, port } = this.ctx.config.metrics;
    if (port !== 0 && port === this.ctx.config.http.port) throw new Error(`metrics.port ${port} is the tenant API's port (http.port): the metrics endpoint needs a listener of its own`);
    if (!defaultMetricsOn) {
      defaultMetricsOn = true;
      collectDefaultMetrics({ register: metricsRegistry });
    }
    this.registry = serviceRegistry(this.ctx, this.log);
    const listener = new MetricsListener({ host, port, log: this.log, collect: async () => ({ body: await this.metrics(), contentType: metricsRegistry.contentType }) });
    await listener.start();
    this.listener = listener;
  }

  /** The text a scrape gets. */
  async metrics(): Promise<string> {
    this.registry ??= serviceRegistry(this.ctx, this.log);
    return this.registry.metrics();
  }

  /** http://host:port of the listener (the real port when metrics.port is 0), or null before start. */
  address(): string | null {
    return this.listener?.address() ?? null;
  }

  async stop(): Promise<void> {
    const l = this.listener;
    this.listener = null;
    await l?.stop();
  }
}

registerWorkerFactory((ctx) => (ctx.config.metrics.enabled ? new MetricsServer(ctx) : null));
