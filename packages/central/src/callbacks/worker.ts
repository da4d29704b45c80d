// Delivery of the callback outbox: at least once, per shipment in sequence order, different
// shipments in parallel, exponential back-off with jitter on failure, durable across restarts
// (the rows are in the database). Several central instances may share one database: a row is
// claimed with a lease (a conditional UPDATE that only one instance wins) before it is sent.
//
// Ordering: only the head of a shipment's queue (its lowest pending sequence) is ever a candidate,
// so sequence n+1 is not sent before n got a 2xx. A failing shipment only delays itself.
import type { Kysely } from 'kysely';
import { sql } from 'kysely';
import type { AppContext, Worker } from '../context';
import type { Database } from '../db/schema';
import type { CallbackOutboxTable } from '../db/schema-callbacks';
import type { Logger } from '../logger';
import { newUid, toDbTime } from '../ids';
import { onOutboxEnqueued } from './outbox';
import { loadCallbackRegistration, loggableOrigin } from './registration';
import { authHeaders } from './signing';
import { backoffMs } from './backoff';

export const CALLBACK_WORKER_NAME = 'callbacks.delivery';
const LEASE_MARGIN_MS = 60_000;
const USER_AGENT = 'locker-central-callbacks/1';

type OutboxRow = CallbackOutboxTable;

export interface CallbackWorkerOptions {
  /** random source for the back-off jitter (tests may fix it) */
  random?: () => number;
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
  /** counts since start (for operators and tests) */
  readonly stats = { delivered: 0, failed: 0 };

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

  /** Claims due queue heads up to the free delivery slots and starts sending them. */
  private async fill(): Promise<void> {
    const cfg = this.ctx.config.callbacks;
    let free = cfg.concurrency - this.inflight.size;
    if (free <= 0 || !this.running) return;
    const now = toDbTime(this.ctx.clock.now());
    const busy = [...this.inflight.keys()];
    let q = this.db
      .selectFrom('callback_outbox as o')
      .selectAll('o')
      .where('o.status', '=', 'pending')
      .where('o.next_attempt_at', '<=', now)
      .where((eb) => eb.or([eb('o.lease_until', 'is', null), eb('o.lease_until', '<', now)]))
      .where((eb) =>
        eb.not(
          eb.exists(
            eb
              .selectFrom('callback_outbox as p')
              .select('p.event_id')
              .whereRef('p.shipment_uid', '=', 'o.shipment_uid')
              .where('p.status', '=', 'pending')
              .whereRef('p.sequence', '<', 'o.sequence'),
          ),
        ),
      );
    if (busy.length) q = q.where('o.shipment_uid', 'not in', busy);
    const candidates = await q.orderBy('o.next_attempt_at').orderBy('o.created_at').limit(free * 2).execute();
    for (const row of candidates) {
      if (free <= 0 || !this.running) break;
      if (this.inflight.has(row.shipment_uid)) continue;
      if (!(await this.claim(row, now))) continue;
      free--;
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

  private async deliver(row: OutboxRow, stopSignal: AbortSignal): Promise<void> {
    const cfg = this.ctx.config.callbacks;
    const reg = await loadCallbackRegistration(this.db, row.tenant_uid);
    const mine = (eb: any) => eb.and([eb('event_id', '=', row.event_id), eb('lease_owner', '=', this.owner)]);
    if (!reg?.url) {
      // Callbacks were disabled after the message was queued: it is not delivered.
      await this.db
        .updateTable('callback_outbox')
        .set({ status: 'skipped', lease_until: null, lease_owner: null, last_error: 'no callback URL configured' })
        .where(mine)
        .execute();
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
    try {
      const res = await fetch(reg.url, {
        method: 'POST',
        headers,
        body: row.payload,
        redirect: 'manual',
        signal: AbortSignal.any([stopSignal, AbortSignal.timeout(cfg.requestTimeoutMs)]),
      });
      status = res.status;
      await res.body?.cancel().catch(() => undefined);
      if (status < 200 || status > 299) error = `HTTP ${status}`;
    } catch (err) {
      if (stopSignal.aborted) {
        // Shutting down: give the row back untouched; it is sent again after the restart.
        await this.db.updateTable('callback_outbox').set({ lease_until: null, lease_owner: null }).where(mine).execute();
        return;
      }
      error = describeFetchError(err, cfg.requestTimeoutMs);
    }
    const done = this.ctx.clock.now();
    const attempts = row.attempts + 1;
    const where = { eventId: row.event_id, shipmentUid: row.shipment_uid, sequence: row.sequence, tenantUid: row.tenant_uid, attempts, to: loggableOrigin(reg.url) };
    if (error == null) {
      await this.db
        .updateTable('callback_outbox')
        .set({ status: 'delivered', attempts, delivered_at: toDbTime(done), last_status: status, last_error: null, lease_until: null, lease_owner: null })
        .where(mine)
        .execute();
      this.stats.delivered++;
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
    this.log.warn({ ...where, status, error, retryInMs: delay }, 'callback delivery failed; will retry');
  }
}

class StopSignal extends Error {
  constructor() {
    super('callback worker stopping');
  }
}

function describeFetchError(err: unknown, timeoutMs: number): string {
  const e = err as { name?: string; message?: string; cause?: { code?: string; message?: string } };
  if (e?.name === 'TimeoutError') return `timeout after ${timeoutMs} ms`;
  const code = e?.cause?.code;
  return code ? `${code}` : (e?.cause?.message ?? e?.message ?? 'request failed');
}
