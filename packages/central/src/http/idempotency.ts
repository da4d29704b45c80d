// Idempotency-Key support for create and cancel calls (owned by the callbacks/idempotency area).
// Registered by app.ts; routes opt in with `idempotent: true` (route config `idempotent`).
//
// A request with `Idempotency-Key: <1..255 printable ASCII>` to such a route:
//  - first time (per tenant and key): the key is reserved (a row with a unique (tenant, key)),
//    the handler runs, and its final answer (status and body) is stored for config
//    idempotency.ttlHours (24 h);
//  - again with the same body (sha256 of method, route and the normalized JSON body): the stored
//    answer is returned (same status, same body, header `Idempotent-Replayed: true`) and the
//    handler does not run;
//  - again with a different body or on another route: 400 IdempotencyKeyReused;
//  - again while the first is still running: waits up to idempotency.waitMs for it to finish and
//    then replays its answer, else 400 IdempotencyKeyInProgress with Retry-After: 1 (retry later;
//    every failed command is a 400, product.md).
// Answers with status >= 500 are not stored (the key is released, a retry runs the call again):
// the handler's transaction rolled back, so running it again is safe.
import crypto from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { AppContext, Worker } from '../context';
import { ApiError } from '../errors';
import { toDbTime } from '../ids';

export const IDEMPOTENCY_HEADER = 'idempotency-key';
export const REPLAYED_HEADER = 'idempotent-replayed';
const KEY_RE = /^[\x20-\x7e]{1,255}$/;
const WAIT_STEP_MS = 25;

/** Counters a test can watch (a repeat that found the key pending and waits for the first answer). */
export const idempotencyStats = { waits: 0 };

interface Reservation {
  tenantUid: string;
  key: string;
  /** the answer was written to the store or the reservation released */
  settled: boolean;
}

declare module 'fastify' {
  interface FastifyRequest {
    idempotency?: Reservation | null;
  }
}

/** JSON with object keys sorted at every level: equal documents give equal text. */
export function canonicalJson(v: unknown): string {
  if (v === null || typeof v !== 'object') return JSON.stringify(v) ?? 'null';
  if (Array.isArray(v)) return `[${v.map((x) => (x === undefined ? 'null' : canonicalJson(x))).join(',')}]`;
  const entries = Object.entries(v as Record<string, unknown>)
    .filter(([, x]) => x !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, x]) => `${JSON.stringify(k)}:${canonicalJson(x)}`).join(',')}}`;
}

export function requestHash(method: string, route: string, body: unknown): string {
  return crypto.createHash('sha256').update(`${method} ${route}\n${canonicalJson(body ?? null)}`).digest('hex');
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function idempotencyPlugin(app: FastifyInstance, ctx: AppContext): Promise<void> {
  const db = ctx.db.kysely;
  const log = ctx.log.child({ ns: 'central.idempotency' });
  const cfg = () => ctx.config.idempotency ?? { ttlHours: 24, waitMs: 5000, lockSeconds: 60 };
  app.decorateRequest('idempotency', null);

  const replay = (reply: FastifyReply, row: { response_status: number | null; response_body: string | null; response_type: string | null }) =>
    reply
      .code(row.response_status ?? 200)
      .header('content-type', row.response_type ?? 'application/json; charset=utf-8')
      .header(REPLAYED_HEADER, 'true')
      .send(row.response_body ?? '');

  app.addHook('preHandler', async (req: FastifyRequest, reply: FastifyReply) => {
    if (req.routeOptions.config?.idempotent !== true) return;
    const raw = req.headers[IDEMPOTENCY_HEADER];
    if (raw === undefined) return;
    if (typeof raw !== 'string' || !KEY_RE.test(raw) || raw.trim() === '') {
      throw new ApiError('InvalidRequest', 'Idempotency-Key header: must be one value of 1 to 255 printable ASCII characters', 400);
    }
    if (!req.tenant) return;
    const key = raw;
    const tenantUid = req.tenant.uid;
    const hash = requestHash(req.method, req.routeOptions.url ?? req.url, req.body);
    const waitUntil = Date.now() + cfg().waitMs;

    for (let round = 0; ; round++) {
      const now = ctx.clock.now();
      const nowS = toDbTime(now);
      const lockedUntil = toDbTime(new Date(now.getTime() + cfg().lockSeconds * 1000));
      const ins = await db
        .insertInto('idempotency_keys')
        .values({
          tenant_uid: tenantUid,
          idem_key: key,
          request_hash: hash,
          status: 'pending',
          locked_until: lockedUntil,
          response_status: null,
          response_body: null,
          response_type: null,
          created_at: nowS,
          expires_at: toDbTime(new Date(now.getTime() + cfg().ttlHours * 3_600_000)),
        })
        .onConflict((oc) => oc.columns(['tenant_uid', 'idem_key']).doNothing())
        .executeTakeFirst();
      if (Number(ins.numInsertedOrUpdatedRows ?? 0) === 1) {
        req.idempotency = { tenantUid, key, settled: false };
        return;
      }
      const row = await db.selectFrom('idempotency_keys').selectAll().where('tenant_uid', '=', tenantUid).where('idem_key', '=', key).executeTakeFirst();
      if (!row) continue; // released or swept in between: reserve again
      if (row.expires_at <= nowS) {
        await db.deleteFrom('idempotency_keys').where('tenant_uid', '=', tenantUid).where('idem_key', '=', key).where('expires_at', '<=', nowS).execute();
        continue;
      }
      if (row.request_hash !== hash) {
        throw new ApiError('IdempotencyKeyReused', 'Idempotency-Key was already used with a different request (body or endpoint); use a new key for a new request', 400);
      }
      if (row.status === 'done') {
        log.debug({ tenantUid, route: req.routeOptions.url }, 'idempotent replay');
        return replay(reply, row);
      }
      // Pending: the first request still runs, or its process died (take over after the lock).
      if (row.locked_until <= nowS) {
        const took = await db
          .updateTable('idempotency_keys')
          .set({ locked_until: lockedUntil })
          .where('tenant_uid', '=', tenantUid)
          .where('idem_key', '=', key)
          .where('status', '=', 'pending')
          .where('locked_until', '=', row.locked_until)
          .executeTakeFirst();
        if (Number(took.numUpdatedRows) === 1) {
          req.idempotency = { tenantUid, key, settled: false };
          return;
        }
        continue;
      }
      if (Date.now() >= waitUntil) {
        throw new ApiError('IdempotencyKeyInProgress', 'a request with this Idempotency-Key is still being processed; retry later', 400, { 'retry-after': '1' });
      }
      idempotencyStats.waits++;
      await sleep(WAIT_STEP_MS);
      void round;
    }
  });

  const release = async (r: Reservation) => {
    r.settled = true;
    await db.deleteFrom('idempotency_keys').where('tenant_uid', '=', r.tenantUid).where('idem_key', '=', r.key).where('status', '=', 'pending').execute();
  };

  app.addHook('onSend', async (req, reply, payload) => {
    const r = req.idempotency;
    if (!r || r.settled) return payload;
    const status = reply.statusCode;
    const body = typeof payload === 'string' ? payload : Buffer.isBuffer(payload) ? payload.toString('utf8') : null;
    try {
      if (status >= 500 || body == null) {
        await release(r);
      } else {
        r.settled = true;
        const type = reply.getHeader('content-type');
        await db
          .updateTable('idempotency_keys')
          .set({ status: 'done', response_status: status, response_body: body, response_type: typeof type === 'string' ? type : 'application/json; charset=utf-8' })
          .where('tenant_uid', '=', r.tenantUid)
          .where('idem_key', '=', r.key)
          .execute();
      }
    } catch (err) {
      log.error({ err: { message: (err as Error).message } }, 'could not store the idempotent answer');
    }
    return payload;
  });

  // A request that ended without passing onSend (aborted) must not hold its key.
  app.addHook('onResponse', async (req) => {
    const r = req.idempotency;
    if (r && !r.settled) await release(r).catch(() => undefined);
  });
}

/** Deletes expired Idempotency-Keys now and then (they are also replaced lazily on reuse). */
export class IdempotencySweeper implements Worker {
  readonly name = 'idempotency.sweep';
  private timer: NodeJS.Timeout | null = null;
  constructor(
    private readonly ctx: AppContext,
    private readonly everyMs = 10 * 60_000,
  ) {}

  /** Deletes the keys that expired; returns how many. */
  async sweep(): Promise<number> {
    const res = await this.ctx.db.kysely.deleteFrom('idempotency_keys').where('expires_at', '<=', toDbTime(this.ctx.clock.now())).executeTakeFirst();
    return Number(res.numDeletedRows);
  }

  async start(): Promise<void> {
    const run = () => {
      this.sweep().catch((err) => this.ctx.log.warn({ ns: 'central.idempotency', err: { message: (err as Error).message } }, 'idempotency sweep failed'));
    };
    await this.sweep().catch(() => undefined);
    this.timer = setInterval(run, this.everyMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }
}
