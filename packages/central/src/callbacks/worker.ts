// Delivery of the callback outbox: at least once, per shipment in sequence order, different
// shipments in parallel, exponential back-off with jitter on failure, durable across restarts
// (the rows are in the database). Several central instances may share one database: a row is
// claimed with a lease (a conditional UPDATE that only one instance wins) before it is sent.
//
// Ordering: only the head of a shipment's queue (its lowest pending sequence) is ever sent, so
// sequence n+1 is not sent before n got a 2xx. A failing shipment only delays itself.
//
// Poll cost: a message queued behind an undelivered one of its shipment is "parked" when a poll
// sees it (its next_attempt_at is moved ahead by its age, at least PARK_MIN_MS, at most
// PARK_MAX_MS), and moved back to now, in the transaction that records its predecessor delivered
// or skipped. So while a receiver is down, the messages behind its failing heads are not due, and a
// poll (due pending rows by next_attempt_at: index callback_outbox_due, LIMIT) reads only heads,
// newly queued rows and the few parked ones whose park ran out; however large the backlog. The park
// is a safety net in time (it runs out after PARK_MAX_MS at most); on PostgreSQL a park and the
// un-park of the predecessor's recording are serialized by a row lock (parkBehind).
//
// Targets: every request goes through a guarded undici dispatcher (net/dispatcher.ts) that checks
// the address each new connection actually connects to, after resolution, against the target
// policy (public addresses only, unless callbacks.allowPrivateNetworks), so a name that now
// resolves to an internal address (DNS rebinding) is refused; redirects are never followed (a 3xx
// is a failed attempt). A refused attempt is a failure like any other (back-off, retried), its
// reason in last_error.
import type { Kysely, Transaction } from 'kysely';
import { sql } from 'kysely';
import { fetch, type Agent } from 'undici';
import type { AppContext, Worker } from '../context';
import type { Database } from '../db/schema';
import type { CallbackOutboxTable } from '../db/schema-callbacks';
import type { Logger } from '../logger';
import { newUid, toDbTime } from '../ids';
import { onOutboxEnqueued } from './outbox';
import { CALLBACK_RESOLVE_TIMEOUT_MS, callbackUrlProblem, loadCallbackRegistration, loggableOrigin } from './registration';
import { createGuardedAgent } from '../net/dispatcher';
import { resolverFor, type Resolver } from '../net/resolve';
import { authHeaders } from './signing';
import { backoffMs } from './backoff';
import { centralMetrics } from '../ops/metrics';

export const CALLBACK_WORKER_NAME = 'callbacks.delivery';
const LEASE_MARGIN_MS = 60_000;
/** how far a message waiting behind an undelivered predecessor is moved ahead (see above) */
export const PARK_MIN_MS = 60_000;
export const PARK_MAX_MS = 60 * 60_000;
/** a poll reads at most max(2 x free delivery slots, POLL_BATCH) candidate rows */
const POLL_BATCH = 256;
const USER_AGENT = 'locker-central-callbacks/1';

type OutboxRow = CallbackOutboxTable;

export interface CallbackWorkerOptions {
  /** random source for the back-off jitter (tests may fix it) */
  random?: () => number;
  /** the resolver for callback hosts (default: the service's, net/resolve.ts resolverFor) */
  resolver?: Resolver;
}

interface InFlight {
  eventId: string;
  abort: AbortController;
  done: Promise<void>;
}

export class CallbackDeliveryWorker implements Worker {
  readonly name = CALLBACK_WORKER_NAME;
  /** identifies this worker's leases in the database */
  readonly owner = newUid();
  private running = false;
  private timer: NodeJS.Timeout | null = null;
  private timerAt = 0;
  private ticking: Promise<void> | null = null;
  private again = false;
  private readonly inflight = new Map<string, InFlight>();
  private unsubscribe: (() => void) | null = null;
  private log!: Logger;
  private agentInstance: Agent | null = null;
  /** counts since start (for operators and tests) */
  readonly stats = { delivered: 0, failed: 0, polls: 0, examined: 0, parked: 0 };

  constructor(
    private readonly ctx: AppContext,
    private readonly opts: CallbackWorkerOptions = {},
  ) {}

  private get db(): Kysely<Database> {
    return this.ctx.db.kysely;
  }

  async start(): Promise<void> {
    if (this.running) return;
    this.log = this.ctx.log.child({ ns: 'central.callbacks' });
    this.running = true;
    this.unsubscribe = onOutboxEnqueued(() => {
      // The row becomes visible when the enqueuing transaction commits: look shortly after, and
      // once more a little later in case that commit was slow.
      this.wake(10);
      setTimeout(() => this.wake(0), 150).unref();
    });
    this.wake(0);
  }

  async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    this.unsubscribe?.();
    this.unsubscribe = null;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.ticking?.catch(() => undefined);
    for (const f of this.inflight.values()) f.abort.abort(new StopSignal());
    await Promise.allSettled([...this.inflight.values()].map((f) => f.done));
    const agent = this.agentInstance;
    this.agentInstance = null;
    await agent?.close().catch(() => undefined);
  }

  /** The guarded dispatcher every delivery goes through (made on first use; closed by stop). */
  private get agent(): Agent {
    if (!this.agentInstance) {
      const cfg = this.ctx.config.callbacks;
      this.agentInstance = createGuardedAgent({
        policy: { allowPrivateNetworks: cfg.allowPrivateNetworks },
        resolver: () => this.opts.resolver ?? resolverFor(this.ctx),
        resolveTimeoutMs: Math.min(CALLBACK_RESOLVE_TIMEOUT_MS, cfg.requestTimeoutMs),
        connectTimeoutMs: cfg.requestTimeoutMs,
      });
    }
    return this.agentInstance;
  }

  /** Look for due messages after `ms` (earlier wake-ups win). */
  wake(ms = 0): void {
    if (!this.running) return;
    const at = Date.now() + ms;
    if (this.timer && this.timerAt <= at) return;
    if (this.timer) clearTimeout(this.timer);
    this.timerAt = at;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.tick();
    }, ms);
  }

  /** Number of deliveries this worker has on the wire right now. */
  get inFlightCount(): number {
    return this.inflight.size;
  }

  private tick(): void {
    if (this.ticking) {
      this.again = true;
      return;
    }
    this.ticking = this.fill()
      .catch((err) => {
        if (this.running) this.log.error({ err: { message: (err as Error).message, code: (err as { code?: string }).code } }, 'callback outbox poll failed');
      })
      .finally(() => {
        this.ticking = null;
        const again = this.again;
        this.again = false;
        this.wake(again ? 0 : this.ctx.config.callbacks.pollIntervalMs);
      });
  }

  /**
   * Claims due queue heads up to the free delivery slots and starts sending them; parks the
   * candidates that are queued behind a pending message of their shipment. One bounded read per
   * poll: when it was cut by the limit, the next poll follows at once (a backlog queued before
   * this version is parked batch by batch, the event loop free in between).
   */
  private async fill(): Promise<void> {
    const cfg = this.ctx.config.callbacks;
    let free = cfg.concurrency - this.inflight.size;
    if (free <= 0 || !this.running) return;
    try {
      const now = toDbTime(this.ctx.clock.now());
      const limit = Math.max(free * 2, POLL_BATCH);
      const candidates = await candidateQuery(this.db, now, limit, [...this.inflight.keys()]).execute();
      this.stats.examined += candidates.length;
      const behind = candidates.filter((r) => isTrue(r.behind));
      if (behind.length) await this.park(behind);
      this.stats.parked += behind.length;
      for (const { behind: isBehind, ...row } of candidates) {
        if (isTrue(isBehind)) continue;
        if (free <= 0 || !this.running) break;
        if (this.inflight.has(row.shipment_uid)) continue;
        if (!(await this.claim(row, now))) continue;
        free--;
        this.start1(row);
      }
      if (candidates.length === limit && behind.length > 0 && free > 0) this.again = true; // (parking made progress)
    } finally {
      this.stats.polls++;
    }
  }

  private start1(row: OutboxRow): void {
    const abort = new AbortController();
    const entry: InFlight = { eventId: row.event_id, abort, done: Promise.resolve() };
    this.inflight.set(row.shipment_uid, entry);
    entry.done = this.deliver(row, abort.signal)
      .catch((err) => {
        this.log.error({ eventId: row.event_id, err: { message: (err as Error).message } }, 'callback delivery bookkeeping failed');
      })
      .finally(() => {
        this.inflight.delete(row.shipment_uid);
        this.wake(0);
      });
  }

  /** Moves messages still queued behind a pending one of their shipment ahead (see above). */
  private async park(rows: OutboxRow[]): Promise<void> {
    await parkBehind(this.db, this.ctx.db.engine, rows, this.ctx.clock.now().getTime());
  }

  /** Takes the row for this worker; false when another worker has it or it is no longer a due head. */
  private async claim(row: OutboxRow, now: string): Promise<boolean> {
    const leaseUntil = toDbTime(new Date(this.ctx.clock.now().getTime() + this.ctx.config.callbacks.requestTimeoutMs + LEASE_MARGIN_MS));
    const res = await this.db
      .updateTable('callback_outbox')
      .set({ lease_until: leaseUntil, lease_owner: this.owner })
      .where('event_id', '=', row.event_id)
      .where('status', '=', 'pending')
      .where((eb) => eb.or([eb('lease_until', 'is', null), eb('lease_until', '<', now)]))
      .where(
        sql<boolean>`not exists (select 1 from callback_outbox p where p.shipment_uid = ${row.shipment_uid} and p.status = 'pending' and p.sequence < ${row.sequence})`,
      )
      .executeTakeFirst();
    return Number(res.numUpdatedRows) === 1;
  }

  /**
   * Records a message's final outcome (delivered or skipped) and makes the next message of its
   * shipment due now (it may have been parked behind this one), in one transaction.
   */
  private async finish(row: OutboxRow, set: Partial<OutboxRow>): Promise<void> {
    const now = toDbTime(this.ctx.clock.now());
    await this.db.transaction().execute((trx) => recordFinal(trx, row, set, this.owner, now));
  }

  private async deliver(row: OutboxRow, stopSignal: AbortSignal): Promise<void> {
    const cfg = this.ctx.config.callbacks;
    const reg = await loadCallbackRegistration(this.db, row.tenant_uid);
    const mine = (eb: any) => eb.and([eb('event_id', '=', row.event_id), eb('lease_owner', '=', this.owner)]);
    if (!reg?.url) {
      // Callbacks were disabled after the message was queued: it is not delivered.
      await this.finish(row, { status: 'skipped', lease_until: null, lease_owner: null, last_error: 'no callback URL configured' });
      centralMetrics.callbackDeliveries.inc({ outcome: 'skipped' });
      this.log.info({ eventId: row.event_id, shipmentUid: row.shipment_uid, tenantUid: row.tenant_uid }, 'callback skipped: callbacks disabled');
      return;
    }
    const timestamp = Math.floor(this.ctx.clock.now().getTime() / 1000);
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      'user-agent': USER_AGENT,
      'x-event-id': row.event_id,
      'x-event-sequence': String(row.sequence),
      'x-message-type': row.message_type,
      ...authHeaders({ authType: reg.authType, authKey: reg.authKey, shipmentUid: row.shipment_uid, body: row.payload, timestamp }),
    };
    let status: number | null = null;
    let error: string | null = null;
    let refused = false;
    // A URL stored before these rules (or by provisioning) that is malformed is not even tried.
    const problem = callbackUrlProblem(reg.url);
    try {
      if (problem) {
        refused = true;
        error = `target refused: callback URL ${problem}`;
      } else {
        const res = await fetch(reg.url, {
          method: 'POST',
          headers,
          body: row.payload,
          redirect: 'manual',
          dispatcher: this.agent,
          signal: AbortSignal.any([stopSignal, AbortSignal.timeout(cfg.requestTimeoutMs)]),
        });
        status = res.status;
        await res.body?.cancel().catch(() => undefined);
        if (status >= 300 && status <= 399) error = `HTTP ${status} (redirects are not followed)`;
        else if (status < 200 || status > 299) error = `HTTP ${status}`;
      }
    } catch (err) {
      if (stopSignal.aborted) {
        // Shutting down: give the row back untouched; it is sent again after the restart.
        await this.db.updateTable('callback_outbox').set({ lease_until: null, lease_owner: null }).where(mine).execute();
        return;
      }
      const refusal = targetRefusal(err);
      if (refusal) {
        refused = true;
        error = `target refused: ${refusal.message}${refusal.verdict?.cls === 'private' && !cfg.allowPrivateNetworks ? ' (callbacks.allowPrivateNetworks is off)' : ''}`;
      } else error = describeFetchError(err, cfg.requestTimeoutMs);
    }
    const done = this.ctx.clock.now();
    const attempts = row.attempts + 1;
    const where = { eventId: row.event_id, shipmentUid: row.shipment_uid, sequence: row.sequence, tenantUid: row.tenant_uid, attempts, to: loggableOrigin(reg.url) };
    if (error == null) {
      await this.finish(row, { status: 'delivered', attempts, delivered_at: toDbTime(done), last_status: status, last_error: null, lease_until: null, lease_owner: null });
      this.stats.delivered++;
      centralMetrics.callbackDeliveries.inc({ outcome: 'delivered' });
      this.log.debug({ ...where, status }, 'callback delivered');
      return;
    }
    const delay = backoffMs(attempts, cfg.initialBackoffMs, cfg.maxBackoffMs, this.opts.random);
    const next = toDbTime(new Date(done.getTime() + delay));
    await this.db
      .updateTable('callback_outbox')
      .set({ attempts, next_attempt_at: next, last_status: status, last_error: error.slice(0, 500), lease_until: null, lease_owner: null })
      .where(mine)
      .execute();
    this.stats.failed++;
    centralMetrics.callbackDeliveries.inc({ outcome: 'failed' });
    centralMetrics.callbackFailures.inc({ reason: failureReason(status, refused, error) });
    this.log.warn({ ...where, status, error, retryInMs: delay, ...(refused ? { refused: true } : {}) }, refused ? 'callback delivery refused: target not allowed; will retry' : 'callback delivery failed; will retry');
  }
}

/**
 * The poll's candidate query: due pending messages without a live lease, the earliest first (the
 * order of the index callback_outbox_due (status, next_attempt_at), so it stops after `limit`
 * rows), each with whether an earlier message of its shipment is still pending (`behind`: one
 * lookup in the unique (shipment_uid, sequence) index). Exported for tests (EXPLAIN).
 */
export function candidateQuery(db: Kysely<Database>, now: string, limit: number, busyShipments: string[] = []) {
  let q = db
    .selectFrom('callback_outbox as o')
    .selectAll('o')
    .select(
      sql<number | boolean>`exists (select 1 from callback_outbox p where p.shipment_uid = o.shipment_uid and p.status = 'pending' and p.sequence < o.sequence)`.as(
        'behind',
      ),
    )
    .where('o.status', '=', 'pending')
    .where('o.next_attempt_at', '<=', now)
    .where((eb) => eb.or([eb('o.lease_until', 'is', null), eb('o.lease_until', '<', now)]));
  if (busyShipments.length) q = q.where('o.shipment_uid', 'not in', busyShipments);
  return q.orderBy('o.next_attempt_at').limit(limit);
}

const isTrue = (v: unknown) => v === true || Number(v) === 1;

/**
 * Parks `rows` (see the header) while an earlier message of their shipment is still pending.
 * PostgreSQL, several instances: the predecessor found pending is share-locked (FOR SHARE), so
 * the park and the transaction that records that predecessor delivered (recordFinal, which
 * updates it) are serialized. Without the lock a park whose snapshot still saw the predecessor
 * pending could commit after that transaction had looked for parked successors and found none:
 * the successor then waited for its park to run out (up to PARK_MAX_MS) instead of being due at
 * once. With it, either the park goes first (the recording waits for it and then un-parks the
 * successor) or the recording goes first (the park waits, re-reads the predecessor, now no longer
 * pending, and parks nothing). SQLite has one writer: the two never interleave.
 */
export async function parkBehind(db: Kysely<Database> | Transaction<Database>, engine: 'sqlite' | 'postgres', rows: OutboxRow[], nowMs: number): Promise<void> {
  const until = (r: OutboxRow) => toDbTime(new Date(nowMs + Math.min(PARK_MAX_MS, Math.max(PARK_MIN_MS, nowMs - new Date(r.created_at).getTime()))));
  const cases = sql.join(rows.map((r) => sql`when ${r.event_id} then ${until(r)}`), sql` `);
  const lock = engine === 'postgres' ? sql` for share of p` : sql``;
  await db
    .updateTable('callback_outbox')
    .set({ next_attempt_at: sql<string>`case event_id ${cases} end` })
    .where(
      'event_id',
      'in',
      rows.map((r) => r.event_id),
    )
    // only the primary key selects the rows (a status/next_attempt_at condition here made SQLite
    // pick the due index and read the whole due backlog); a row that is behind is pending
    .where(
      sql<boolean>`exists (select 1 from callback_outbox p where p.shipment_uid = callback_outbox.shipment_uid and p.status = 'pending' and p.sequence < callback_outbox.sequence${lock})`,
    )
    .execute();
}

/**
 * Records a message's final outcome (`set`: delivered or skipped) if `owner` still holds its lease,
 * and makes the next pending message of its shipment due at `now` (it may be parked behind this
 * one). Run in one transaction (see parkBehind for how it and a park are ordered).
 */
export async function recordFinal(trx: Transaction<Database>, row: OutboxRow, set: Partial<OutboxRow>, owner: string, now: string): Promise<void> {
  const res = await trx.updateTable('callback_outbox').set(set).where('event_id', '=', row.event_id).where('lease_owner', '=', owner).executeTakeFirst();
  if (Number(res.numUpdatedRows) !== 1) return;
  await trx
    .updateTable('callback_outbox')
    .set({ next_attempt_at: now })
    .where('shipment_uid', '=', row.shipment_uid)
    .where('status', '=', 'pending')
    .where('next_attempt_at', '>', now)
    .where('attempts', '=', 0)
    .where(sql<boolean>`sequence = (select min(p.sequence) from callback_outbox p where p.shipment_uid = ${row.shipment_uid} and p.status = 'pending')`)
    .execute();
}

class StopSignal extends Error {
  constructor() {
    super('callback worker stopping');
  }
}

/** The reason label of a failed attempt (bounded: never the URL or the message). */
export function failureReason(status: number | null, refused: boolean, error: string): string {
  if (refused) return 'refused';
  if (status !== null) return status >= 300 && status <= 399 ? 'redirect' : status >= 500 ? 'http_5xx' : status >= 400 ? 'http_4xx' : 'http_other';
  return /timed? ?out|timeout/i.test(error) ? 'timeout' : 'network';
}

/** The TargetRefusedError (net/resolve.ts) behind a failed fetch, if that is why it failed. */
function targetRefusal(err: unknown): { message: string; verdict?: { cls: string } } | null {
  for (let e = err as { code?: string; message?: string; cause?: unknown; verdict?: { cls: string } } | undefined, i = 0; e && i < 5; e = e.cause as typeof e, i++) {
    if (e.code === 'ETARGETREFUSED') return { message: String(e.message), verdict: e.verdict };
  }
  return null;
}

function describeFetchError(err: unknown, timeoutMs: number): string {
  const e = err as { name?: string; message?: string; cause?: { code?: string; message?: string } };
  if (e?.name === 'TimeoutError') return `timeout after ${timeoutMs} ms`;
  const code = e?.cause?.code;
  return code ? `${code}` : (e?.cause?.message ?? e?.message ?? 'request failed');
}
