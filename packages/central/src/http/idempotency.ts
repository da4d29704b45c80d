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
//
// A job the handler runs through the shipments' TxRunner marks the reservation `committed` in the
// job's own transaction (markIdempotentRun): the key row then says, atomically with the booking,
// that the call took effect. A process that dies after that COMMIT but before the answer is stored
// leaves `committed`, never `pending`, so a repeat after lockSeconds is refused with
// IdempotencyKeyOutcomeUnknown instead of taking the key over and booking a second time. The
// mark checks the reservation's lock (locked_until, unique per holder): a request that ran past
// lockSeconds and was taken over by a repeat is rolled back instead of committing a second run.
//
// Storing the answer (after the handler committed) is retried (STORE_RETRIES_MS). If it still
// fails, a repeat must not run the call again, as the outcome is known only to this process:
//  - the key is marked `unknown` in the store (when that write works): a repeat on any instance
//    gets 400 IdempotencyKeyOutcomeUnknown, never a second run and never a take-over;
//  - this process keeps the answer in memory and replays it to a repeat, and keeps trying to store
//    it in the background (STORE_BACKGROUND_MS) until it is stored or the key expires.
import { AsyncLocalStorage } from 'node:async_hooks';
import crypto from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { sql, type Transaction } from 'kysely';
import type { AppContext, Worker } from '../context';
import type { Database } from '../db/schema';
import { ApiError } from '../errors';
import { toDbTime } from '../ids';

export const IDEMPOTENCY_HEADER = 'idempotency-key';
export const REPLAYED_HEADER = 'idempotent-replayed';
const KEY_RE = /^[\x20-\x7e]{1,255}$/;
const WAIT_STEP_MS = 25;
/** delays before the second, third ... attempt to store an answer (in the request) */
const STORE_RETRIES_MS = [10, 50, 200];
/** delay between background attempts to store an answer that could not be stored in the request */
export const STORE_BACKGROUND_MS = 1000;

interface Answer {
  status: number;
  body: string;
  type: string;
}

/** Counters a test can watch (a repeat that found the key pending and waits for the first answer). */
export const idempotencyStats = { waits: 0 };

export interface Reservation {
  tenantUid: string;
  key: string;
  /** the lock this request holds (locked_until as it set it): a take-over sets a later one */
  lockedUntil: string;
  /** the answer was written to the store or the reservation released */
  settled: boolean;
}

/** The reservation of the request whose handler is running (v1Post runs handlers inside it). */
export const idempotencyScope = new AsyncLocalStorage<Reservation>();

/** The running request's reservation, if it has one; capture it where a job is queued. */
export function currentReservation(): Reservation | undefined {
  return idempotencyScope.getStore();
}

/**
 * Marks the reservation `committed` in the transaction of a job of its request (see the header).
 * Throws IdempotencyKeyInProgress (the job rolls back) when the request no longer holds the key.
 */
export async function markIdempotentRun(trx: Transaction<Database>, r: Reservation): Promise<void> {
  const res = await trx
    .updateTable('idempotency_keys')
    .set({ status: 'committed' })
    .where('tenant_uid', '=', r.tenantUid)
    .where('idem_key', '=', r.key)
    .where('locked_until', '=', r.lockedUntil)
    .where('status', 'in', ['pending', 'committed'])
    .executeTakeFirst();
  if (Number(res.numUpdatedRows) !== 1) {
    throw new ApiError('IdempotencyKeyInProgress', 'this request ran longer than idempotency.lockSeconds and a repeat with its Idempotency-Key took the key over: it was not carried out; retry later', 400, { 'retry-after': '1' });
  }
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
  // answers this process could not store yet (tenant \n key): replayed from here, stored in the background
  const unstored = new Map<string, { answer: Answer; hash: string; expiresAt: number; timer: NodeJS.Timeout | null }>();
  const mapKey = (tenantUid: string, key: string) => `${tenantUid}\n${key}`;
  app.addHook('onClose', async () => {
    for (const u of unstored.values()) if (u.timer) clearTimeout(u.timer);
    unstored.clear();
  });

  const replay = (reply: FastifyReply, row: { response_status: number | null; response_body: string | null; response_type: string | null }) =>
    reply
      .code(row.response_status ?? 200)
      .header('content-type', row.response_type ?? 'application/json; charset=utf-8')
      .header(REPLAYED_HEADER, 'true')
      .send(row.response_body ?? '');

  // Calls without an Idempotency-Key (or on a route that takes none) pass without a promise.
  app.addHook('preHandler', (req: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void) => {
    if (req.headers[IDEMPOTENCY_HEADER] === undefined || req.routeOptions.config?.idempotent !== true) return done();
    return reserveKey(req, reply);
  });
  const reserveKey = async (req: FastifyRequest, reply: FastifyReply) => {
    const raw = req.headers[IDEMPOTENCY_HEADER];
    if (typeof raw !== 'string' || !KEY_RE.test(raw) || raw.trim() === '') {
      throw new ApiError('InvalidRequest', 'Idempotency-Key header: must be one value of 1 to 255 printable ASCII characters', 400);
    }
    if (!req.tenant) return;
    const key = raw;
    const tenantUid = req.tenant.uid;
    const hash = requestHash(req.method, req.routeOptions.url ?? req.url, req.body);
    const waitUntil = Date.now() + cfg().waitMs;
    const mem = unstored.get(mapKey(tenantUid, key));
    if (mem && mem.expiresAt > ctx.clock.now().getTime()) {
      if (mem.hash !== hash) throw new ApiError('IdempotencyKeyReused', 'Idempotency-Key was already used with a different request (body or endpoint); use a new key for a new request', 400);
      log.debug({ tenantUid, route: req.routeOptions.url }, 'idempotent replay of an answer not stored yet');
      return replay(reply, { response_status: mem.answer.status, response_body: mem.answer.body, response_type: mem.answer.type });
    }

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
        req.idempotency = { tenantUid, key, lockedUntil, settled: false };
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
      // committed, and its holder's lock ran out without the answer being stored: the holder died
      // between its COMMIT and storing the answer
      if (row.status === 'unknown' || (row.status === 'committed' && row.locked_until <= nowS)) {
        throw new ApiError(
          'IdempotencyKeyOutcomeUnknown',
          'the first request with this Idempotency-Key ran, but its answer could not be stored: it is not run again; read the outcome (e.g. GetShipments by referenceNo) before sending a new key',
          400,
        );
      }
      // Pending: the first request still runs, or its process died before anything committed (take
      // over after the lock). Committed within the lock: its answer is about to be stored (wait).
      if (row.status === 'pending' && row.locked_until <= nowS) {
        const took = await db
          .updateTable('idempotency_keys')
          .set({ locked_until: lockedUntil })
          .where('tenant_uid', '=', tenantUid)
          .where('idem_key', '=', key)
          .where('status', '=', 'pending')
          .where('locked_until', '=', row.locked_until)
          .executeTakeFirst();
        if (Number(took.numUpdatedRows) === 1) {
          req.idempotency = { tenantUid, key, lockedUntil, settled: false };
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
  };

  /** this request's row: the key, still under the lock this request holds */
  const held = <Q extends { where: (...a: any[]) => Q }>(q: Q, r: Reservation): Q => q.where('tenant_uid', '=', r.tenantUid).where('idem_key', '=', r.key).where('locked_until', '=', r.lockedUntil);

  /**
   * No answer to keep (a server fault, an aborted request): a reservation on which nothing
   * committed is released (a retry runs the call); one on which a job committed is marked
   * `unknown` (a retry must not run it again).
   */
  const release = async (r: Reservation) => {
    r.settled = true;
    await held(db.deleteFrom('idempotency_keys'), r).where('status', '=', 'pending').execute();
    await held(db.updateTable('idempotency_keys'), r).set({ status: 'unknown', locked_until: sql`expires_at` }).where('status', '=', 'committed').execute();
  };

  // only while this request holds the key: a request that lost it to a take-over stores nothing
  const storeAnswer = (r: Reservation, a: Answer) => held(db.updateTable('idempotency_keys'), r).set({ status: 'done', response_status: a.status, response_body: a.body, response_type: a.type }).execute();

  /** Stores the answer, retrying; false when every attempt failed. */
  const storeWithRetries = async (r: Reservation, a: Answer): Promise<boolean> => {
    for (let i = 0; ; i++) {
      try {
        await storeAnswer(r, a);
        return true;
      } catch (err) {
        log.warn({ attempt: i + 1, err: { message: (err as Error).message } }, 'could not store the idempotent answer; retrying');
        if (i >= STORE_RETRIES_MS.length) return false;
        await sleep(STORE_RETRIES_MS[i]!);
      }
    }
  };

  /** The answer could not be stored: no repeat may run the call again (see the header). */
  const outcomeUnknown = async (r: Reservation, a: Answer, hash: string) => {
    const expiresAt = ctx.clock.now().getTime() + cfg().ttlHours * 3_600_000;
    const k = mapKey(r.tenantUid, r.key);
    const entry = { answer: a, hash, expiresAt, timer: null as NodeJS.Timeout | null };
    unstored.set(k, entry);
    const lockedForLife = toDbTime(new Date(expiresAt));
    try {
      // never taken over: locked as long as the key lives
      await db
        .updateTable('idempotency_keys')
        .set({ status: 'unknown', locked_until: lockedForLife })
        .where('tenant_uid', '=', r.tenantUid)
        .where('idem_key', '=', r.key)
        .where('locked_until', '=', r.lockedUntil)
        .where('status', 'in', ['pending', 'committed'])
        .execute();
      r.lockedUntil = lockedForLife; // the background store below writes under the new lock
    } catch (err) {
      log.error({ err: { message: (err as Error).message } }, 'could not mark the idempotency key as outcome unknown');
    }
    const again = () => {
      entry.timer = setTimeout(() => {
        entry.timer = null;
        if (unstored.get(k) !== entry) return;
        if (ctx.clock.now().getTime() >= expiresAt) {
          unstored.delete(k);
          return;
        }
        storeAnswer(r, a).then(
          () => {
            unstored.delete(k);
            log.info({ tenantUid: r.tenantUid }, 'idempotent answer stored after all');
          },
          () => again(),
        );
      }, STORE_BACKGROUND_MS);
      entry.timer.unref();
    };
    again();
  };

  app.addHook('onSend', (req, reply, payload, done) => {
    const r = req.idempotency;
    if (!r || r.settled) return done(null, payload);
    return settleAnswer(req, reply, payload, r);
  });
  const settleAnswer = async (req: FastifyRequest, reply: FastifyReply, payload: unknown, r: NonNullable<FastifyRequest['idempotency']>) => {
    const status = reply.statusCode;
    const body = typeof payload === 'string' ? payload : Buffer.isBuffer(payload) ? payload.toString('utf8') : null;
    if (status >= 500 || body == null) {
      try {
        await release(r);
      } catch (err) {
        // still pending: taken over after lockSeconds (the handler's transaction rolled back)
        log.error({ err: { message: (err as Error).message } }, 'could not release the idempotency key');
      }
      return payload;
    }
    r.settled = true;
    const type = reply.getHeader('content-type');
    const answer: Answer = { status, body, type: typeof type === 'string' ? type : 'application/json; charset=utf-8' };
    if (!(await storeWithRetries(r, answer))) {
      log.error({ tenantUid: r.tenantUid, route: req.routeOptions.url }, 'could not store the idempotent answer: a repeat gets IdempotencyKeyOutcomeUnknown');
      await outcomeUnknown(r, answer, requestHash(req.method, req.routeOptions.url ?? req.url, req.body));
    }
    return payload;
  };

  // A request that ended without passing onSend (aborted) must not hold its key.
  app.addHook('onResponse', (req, _reply, done) => {
    const r = req.idempotency;
    if (!r || r.settled) return done();
    return release(r).catch(() => undefined);
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
