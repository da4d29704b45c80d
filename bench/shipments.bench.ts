// Shipments throughput over loopback HTTP (autocannon), on SQLite and on PostgreSQL:
//
// 1. Baseline: a bare fastify POST route that parses a JSON body and answers a small JSON object.
// 2. CreateLocalShipment: bearer auth, validation, user check, booking (conditional UPDATE of a
//    locker), shipment row, audit row, outbox row (callbacks registered: pending), 5 access codes,
//    one transaction per booking on PostgreSQL, group commit on SQLite (synchronous=FULL: a
//    booking is acknowledged only after the fsync'd COMMIT that contains it).
// 3. The booking's SQL floor in the same run, so the endpoint's distance to its own floor is a
//    ratio of one run. SQLite: bench/booking-floor-worker.mjs on the event-loop thread behind a
//    bare route, as booking-floor.bench.ts measures it. PostgreSQL: the statements of one real
//    booking, captured, replayed by pgbench on the same store (bench/pg-floor.ts).
// 4. GetShipments: one page of 100 (active, newest first) out of 100,000 stored shipments of the
//    tenant, with paging totals; and the same with `updatedSince` (active, sorted by activity,
//    oldest first: how integrations poll).
//
// Each figure is requests per second and a ratio to the baseline measured in the same run.
// After the booking run the store is checked for double-booked lockers (must be 0). Enough
// lockers are provisioned (many PUPs) that no booking is refused for lack of space.
import crypto from 'node:crypto';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { sql } from 'kysely';
import { CentralService } from '../packages/central/src/service';
import { loadConfig } from '../packages/central/src/config';
import { createLogger } from '../packages/central/src/logger';
import { applyProvisioning } from '../packages/central/src/provisioning/apply';
import { newUid, toDbTime } from '../packages/central/src/ids';
import { shipmentService } from '../packages/central/src/shipments/service';
import { SqliteGroupCommitRunner } from '../packages/central/src/shipments/tx';
import { pgTotalsStats } from '../packages/central/src/shipments/queries';
import type { Db } from '../packages/central/src/db/database';
import { bareBaseline, load as loadRun, reachable, type Load, type LoadRequest } from './support';
import { installPgRecorder, pgbenchAvailable, pgbenchReadScript, pgbenchScript, runPgbench, type Booking } from './pg-floor';

const PG_URL = process.env.LOCKER_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const DURATION_S = Number(process.env.BENCH_SHIPMENTS_SECONDS ?? 5);
const CONNECTIONS = 64;
// more lockers per PUP than connections: autocannon walks the request list in the same order on
// every connection, so up to CONNECTIONS bookings land on one PUP at once.
const PUPS = 500;
const LOCKERS_PER_PUP = 80;
const STORED = 100_000;
/** the updatedSince of the polling figure: about the newer 60 % of the filled rows and every booking */
const SINCE = '2025-01-01T09:00:00';

// BENCH_SHIPMENTS_ENGINES=sqlite measures one engine only (profiling runs).
// BENCH_SHIPMENTS_CHECKPOINTS=commit: SQLite's checkpoints in the COMMIT instead of their thread (database.sqliteCheckpoints).
const CHECKPOINTS = (process.env.BENCH_SHIPMENTS_CHECKPOINTS ?? 'background') as 'background' | 'commit';
const ENGINES = (process.env.BENCH_SHIPMENTS_ENGINES ?? 'sqlite,postgres').split(',');

const load = (url: string, requests: LoadRequest[], headers: Record<string, string>): Promise<Load> => loadRun({ url, connections: CONNECTIONS, duration: DURATION_S, headers, requests });
/**
 * A read's load after WARM_S seconds of the same load, not counted (JIT, the pool's connections and
 * their prepared statements: PostgreSQL plans a statement's first executions on each connection
 * apart), as the api bench does; the first second of a cold PostgreSQL GetShipments load had a p99
 * of 653 ms against 135-154 ms after it.
 */
const WARM_S = 1;
async function warmLoad(url: string, requests: LoadRequest[], headers: Record<string, string>): Promise<Load> {
  await loadRun({ url, connections: CONNECTIONS, duration: WARM_S, headers, requests });
  return load(url, requests, headers);
}

/**
 * The PUPs (the last of the provisioned ones) that only the bookings' warm-up books at: autocannon
 * starts every connection at the head of its request list, so a warm-up on the measured PUPs would
 * book the first of them CONNECTIONS times before the measured load books them CONNECTIONS times
 * again (more than LOCKERS_PER_PUP). The measured load walks the other PUPs: room for
 * (PUPS - WARM_PUPS) x CONNECTIONS / DURATION_S bookings per second (5,760/s).
 */
const WARM_PUPS = 50;
/** PostgreSQL's SQL floor (pgbench) books at random among these PUPs, which the endpoint's loads never reach below 2,560 bookings/s */
const PG_FLOOR_PUPS: [number, number] = [200, 449];
/** pgbench's bookings per connection: 16 x 250 = 4,000 at 250 PUPs, 16 a PUP on average, far from 80 (4-5 s on the slowest host seen) */
const PG_FLOOR_PER_CLIENT = 250;
/** pgbench's warm-up bookings per connection, not counted */
const PG_FLOOR_WARM = 20;
const POOL = 16;

export interface BookingLoads {
  /** WARM_S seconds of bookings at the warm-up PUPs, not counted */
  warm: LoadRequest[];
  /** the measured bookings, at the other PUPs */
  measured: LoadRequest[];
}

/** The shipments bench's CreateLocalShipment body for a PUP (the loads, the floors, the profiler). */
export const bookingBody = (user: string, pupUid: string): string =>
  JSON.stringify({ ToUserUid: user, PupUid: pupUid, Dimension: { width: 30, height: 8, length: 50 }, AllowLargerLockers: true, AllowOverflowLockers: false, ReferenceNo: 'bench' });

/** The shipments bench's bookings (one body per PUP), split between warm-up and measured PUPs. */
export function bookingLoads(pups: string[], user: string): BookingLoads {
  const reqs = pups.map((p) => ({ method: 'POST' as const, path: '/v1/Logistics/CreateLocalShipment', body: bookingBody(user, p) }));
  return { warm: reqs.slice(-WARM_PUPS), measured: reqs.slice(0, -WARM_PUPS) };
}

/**
 * The bookings' load after WARM_S seconds of bookings elsewhere, not counted, as every read's (and
 * as the floor's, so the ratio compares warm with warm): a cold booking load spent a quarter of the
 * server's CPU in its first seconds compiling (TurboFan's threads), against 5 % ten seconds later.
 */
export async function warmBookingLoad(url: string, loads: BookingLoads, headers: Record<string, string>): Promise<Load> {
  await loadRun({ url, connections: CONNECTIONS, duration: WARM_S, headers, requests: loads.warm });
  return load(url, loads.measured, headers);
}

async function baseline(): Promise<Load> {
  const body = JSON.stringify({ PupUid: 'p', Dimension: { width: 10, height: 10, length: 10 }, AllowLargerLockers: true, AllowOverflowLockers: false });
  return bareBaseline(body, { connections: CONNECTIONS, duration: DURATION_S });
}

async function chunked<T>(rows: T[], size: number, fn: (chunk: T[]) => Promise<unknown>) {
  for (let i = 0; i < rows.length; i += size) await fn(rows.slice(i, i + size));
}

/** PUPs with lockers, linked to the tenant; a user linked to the first PUP. */
export async function provision(db: Db, now: string, tenantUid: string): Promise<{ pups: string[]; user: string }> {
  const k = db.kysely;
  const pups = Array.from({ length: PUPS }, (_, i) => `bench${String(i).padStart(27, '0')}`);
  await k.transaction().execute(async (trx) => {
    await chunked(pups, 500, (c) => trx.insertInto('pups').values(c.map((uid, i) => ({ uid, name: `Bench ${i}`, time_zone: 'UTC', loc_street_name: 's', loc_mailbox: '', loc_city: 'c', loc_country_iso2: 'NL', loc_latitude: null, loc_longitude: null, delivery_address: null, parking_address: null, external_reference: null, overflow_pup_uid: null, created_at: now, updated_at: now }))).execute());
    await chunked(pups, 500, (c) => trx.insertInto('tenant_pups').values(c.map((pup_uid) => ({ tenant_uid: tenantUid, pup_uid }))).execute());
    const lockers = pups.flatMap((pup, p) =>
      Array.from({ length: LOCKERS_PER_PUP }, (_, i) => ({
        uid: crypto.createHash('md5').update(`${p}/${i}`).digest('hex'),
        pup_uid: pup,
        name: `L${i}`,
        width: 40,
        height: i % 3 === 0 ? 10 : i % 3 === 1 ? 20 : 40,
        length: 60,
        size_code: i % 3 === 0 ? 'S' : i % 3 === 1 ? 'M' : 'L',
        type_code: 'normal',
        bus: 'bus0',
        board_address: Math.floor(i / 16),
        lock_number: (i % 16) + 1,
        booked_shipment_uid: null,
        active: 1 as const,
        created_at: now,
        updated_at: now,
      })),
    );
    await chunked(lockers, 1000, (c) => trx.insertInto('lockers').values(c).execute());
  });
  const user = newUid();
  await k.insertInto('accounts').values({ uid: user, user_name: 'bench@example.test', user_name_key: 'bench@example.test', email_address: 'bench@example.test', email_key: 'bench@example.test', first_name: 'B', last_name: 'U', main_pup_uid: pups[0]!, created_at: now, updated_at: now }).execute();
  await k.insertInto('account_pups').values({ account_uid: user, pup_uid: pups[0]! }).execute();
  return { pups, user };
}

/** Fills the store up to STORED shipments of the tenant (synthetic rows, as the API would write them). */
export async function fill(db: Db, tenantUid: string, pups: string[], user: string): Promise<void> {
  const k = db.kysely;
  const have = Number((await k.selectFrom('shipments').select((eb) => eb.fn.countAll<number>().as('n')).where('tenant_uid', '=', tenantUid).executeTakeFirst())?.n ?? 0);
  const base = Date.parse('2025-01-01T00:00:00Z');
  const states = ['PickedUp', 'PickedUp', 'Cancelled', 'Expired', 'ReadyForPickup', 'ReadyForDropoff'];
  const rows = Array.from({ length: Math.max(0, STORED - have) }, (_, i) => {
    const st = states[i % states.length]!;
    const at = toDbTime(new Date(base + i * 1000));
    return {
      uid: newUid(),
      tenant_uid: tenantUid,
      type_code: i % 4 === 0 ? 'ReceivePupShipment' : 'LocalPupShipment',
      flow: 'local',
      state_code: st,
      active: (st === 'ReadyForPickup' || st === 'ReadyForDropoff' ? 1 : 0) as 0 | 1,
      state_start: at,
      created_at: at,
      updated_at: at,
      reference_no: `REF-${i}`,
      reference_case_no: null,
      description: null,
      from_user_uid: user,
      to_user_uid: null,
      from_address: null,
      to_address: null,
      receiver_delayed: 1 as const,
      keep_booked: 0 as const,
      pup_uid: pups[i % pups.length]!,
      locker_uid: null,
      width: 10,
      height: 10,
      length: 10,
      swaps_shipment_uid: null,
      prior_shipment_uid: null,
      waits_on_uid: null,
      wait_kind: null,
      drop_off_deadline: null,
      seq: 1,
    };
  });
  await k.transaction().execute(async (trx) => chunked(rows, 500, (c) => trx.insertInto('shipments').values(c).execute()));
  // PostgreSQL: as autovacuum would, index-only counts. SQLite: no ANALYZE, as in the service (the
  // service never analyzes its store and drops STAT4 samples when it opens it: dropStat4Samples in
  // db/database.ts); the measured shapes have the same plans with and without statistics
  if (db.engine === 'postgres') await db.pool!.query('VACUUM ANALYZE shipments');
}

interface EngineResult {
  engine: string;
  base: Load;
  book: Load;
  list: Load;
  since: Load;
  /** SQLite: the booking SQL floor (booking-floor-worker.mjs inline) in this run */
  floor?: Load;
  /** PostgreSQL: GetShipments' page statement by pgbench at the load's connections (listFloorRun) */
  listFloor?: Load;
  doubleBooked: number;
  note: string;
}

/** Two floor runs on either side of the endpoint's load as one: the mean rate, counts summed, the later run's latencies. */
function bracketed(before: Load, after: Load): Load {
  return { ...after, rps: (before.rps + after.rps) / 2, ok: before.ok + after.ok, non2xx: before.non2xx + after.non2xx, errors: before.errors + after.errors };
}

/** The booking SQL floor (booking-floor.bench.ts, event-loop variant) on a fresh store. */
async function floorRun(): Promise<Load> {
  const { template, variant } = await import('./booking-floor.bench');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-floor-'));
  try {
    const tpl = await template(dir);
    // the floor checkpoints as the endpoint does (database.sqliteCheckpoints): the ratio compares like with like
    return (await variant(tpl, dir, 'floor', [], 'inline', { checkpoints: CHECKPOINTS })).load;
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** One real booking through the API at `pupUid`, its statements captured for the PostgreSQL floor. */
async function captureBooking(recorder: ReturnType<typeof installPgRecorder>, svc: CentralService, db: Db, pupUid: string, user: string, headers: Record<string, string>): Promise<Booking> {
  const payload = bookingBody(user, pupUid);
  let answer: { shipmentUid?: string } = {};
  const book = async () => {
    const res = await svc.app.inject({ method: 'POST', url: '/v1/Logistics/CreateLocalShipment', payload, headers });
    answer = res.json();
    if (res.statusCode !== 200) throw new Error(`booking probe failed: ${res.statusCode} ${res.body.slice(0, 200)}`);
  };
  // the second booking is captured: the first loads what the service then holds (the tenant's principal)
  await book();
  const statements = await recorder.record(book);
  const row = await db.kysely.selectFrom('shipments').select(['uid', 'locker_uid']).where('uid', '=', answer.shipmentUid!).executeTakeFirstOrThrow();
  const existing = await sql<{ uid: string }>`SELECT uid FROM tenants UNION ALL SELECT uid FROM accounts`.execute(db.kysely);
  const codes = await db.kysely.selectFrom('access_codes').select((eb) => eb.fn.countAll<number>().as('n')).where('shipment_uid', '=', row.uid).executeTakeFirstOrThrow();
  return { statements, shipmentUid: row.uid, lockerUid: row.locker_uid!, pupUid, codes: Number(codes.n), fixed: new Set(existing.rows.map((r) => r.uid)) };
}

/** seconds of the listing floor's pgbench run (after LIST_FLOOR_WARM_S not counted) */
const LIST_FLOOR_S = 4;
const LIST_FLOOR_WARM_S = 1;

/**
 * PostgreSQL's GetShipments floor: the statements one warm GetShipments sends (the first page; its
 * total held under an unchanged snapshot), captured and replayed by pgbench at the load's 64
 * connections: what PostgreSQL itself answers on these two cores, with its own p50 / p99.
 */
async function listFloorRun(recorder: ReturnType<typeof installPgRecorder>, svc: CentralService, db: Db, schema: string, payload: string, headers: Record<string, string>): Promise<Load> {
  let statements: Awaited<ReturnType<typeof recorder.record>> = [];
  let page: typeof statements = [];
  // the requests the last load left in flight (the server answers them after the load generator
  // stopped) would be captured too: wait until no pooled connection is out for 100 ms, and capture
  // again should one still slip in
  for (let attempt = 0; attempt < 5 && page.length !== 1; attempt++) {
    for (let quiet = 0, waited = 0; quiet < 5 && waited < 10_000; waited += 20) {
      const pool = db.pool!;
      quiet = pool.totalCount === pool.idleCount && pool.waitingCount === 0 ? quiet + 1 : 0;
      await new Promise((r) => setTimeout(r, 20));
    }
    statements = await recorder.record(async () => {
      const res = await svc.app.inject({ method: 'POST', url: '/v1/Logistics/GetShipments', payload, headers });
      if (res.statusCode !== 200) throw new Error(`GetShipments capture failed: ${res.statusCode} ${res.body.slice(0, 200)}`);
    });
    page = statements.filter((st) => /\bFROM shipments s\b/.test(st.text));
  }
  if (page.length !== 1 || /^SELECT count/i.test(page[0]!.text)) throw new Error(`GetShipments capture: expected its one page statement, got ${statements.map((st) => st.text.slice(0, 60)).join(' | ')}`);
  const script = pgbenchReadScript(page);
  await runPgbench(PG_URL, schema, script, CONNECTIONS, { seconds: LIST_FLOOR_WARM_S });
  const r = await runPgbench(PG_URL, schema, script, CONNECTIONS, { seconds: LIST_FLOOR_S }, { latencies: true });
  return { rps: r.tps, ok: r.transactions, non2xx: r.failed, errors: 0, p50: Math.round(r.p50Ms!), p99: Math.round(r.p99Ms!), cpuUsPerReq: 0 };
}

/** PostgreSQL's booking floor: the captured statements by pgbench, warmed up, as a Load (p50: mean latency). */
async function pgFloorRun(db: Db, schema: string, b: Booking): Promise<Load> {
  const script = pgbenchScript(b, PG_FLOOR_PUPS, (p) => `('bench' || lpad(${p}::text, 27, '0'))`);
  // BENCH_PG_FLOOR_SCRIPT=file: the script kept, to replay by hand (PGOPTIONS='-c search_path=<schema>' pgbench -n -M prepared -f file)
  if (process.env.BENCH_PG_FLOOR_SCRIPT) fs.writeFileSync(process.env.BENCH_PG_FLOOR_SCRIPT, script);
  const rows = async () => (await sql<{ s: number; c: number; o: number; l: number }>`SELECT (SELECT COUNT(*) FROM shipments) AS s, (SELECT COUNT(*) FROM access_codes) AS c, (SELECT COUNT(*) FROM callback_outbox) AS o, (SELECT COUNT(*) FROM lockers WHERE booked_shipment_uid IS NOT NULL) AS l`.execute(db.kysely)).rows[0]!;
  const before = await rows();
  const warm = await runPgbench(PG_URL, schema, script, POOL, PG_FLOOR_WARM);
  const r = await runPgbench(PG_URL, schema, script, POOL, PG_FLOOR_PER_CLIENT);
  // the floor counts only if every transaction wrote what a booking writes: a locker, a shipment, its codes, its outbox row
  const after = await rows();
  const n = warm.transactions + r.transactions;
  const codes = b.codes;
  const got = { s: Number(after.s) - Number(before.s), c: Number(after.c) - Number(before.c), o: Number(after.o) - Number(before.o), l: Number(after.l) - Number(before.l) };
  // (a new PIN equal to a valid one of its PUP is skipped: the floor writes the codes with ON
  // CONFLICT, pg-floor.ts, where the service would run the booking again; a few in thousands)
  if (got.s !== n || got.o !== n || got.l !== n || got.c > n * codes || got.c < n * codes - Math.ceil(n / 500)) throw new Error(`the SQL floor's ${n} transactions wrote ${JSON.stringify(got)} (${codes} codes each expected)`);
  return { rps: r.tps, ok: r.transactions, non2xx: r.failed, errors: 0, p50: r.latencyMs, p99: NaN, cpuUsPerReq: 0 };
}

async function runEngine(engine: 'sqlite' | 'postgres'): Promise<EngineResult> {
  let dbUrl: string;
  let pgSchema: string | undefined;
  let cleanup: () => Promise<void>;
  if (engine === 'sqlite') {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-bench-'));
    dbUrl = path.join(dir, 'central.db');
    cleanup = async () => fs.rmSync(dir, { recursive: true, force: true });
  } else {
    dbUrl = PG_URL;
    pgSchema = `bench_${crypto.randomBytes(4).toString('hex')}`;
    cleanup = async () => {
      const c = new pg.Client({ connectionString: PG_URL });
      await c.connect();
      await c.query(`DROP SCHEMA IF EXISTS ${pgSchema} CASCADE`);
      await c.end();
    };
  }
  const config = loadConfig({
    env: {},
    overrides: { database: { url: dbUrl, poolSize: POOL, sqliteSynchronous: 'FULL', sqliteCheckpoints: CHECKPOINTS }, log: { level: 'silent' }, mqtt: { mode: 'off' }, environment: 'staging', http: { host: '127.0.0.1', port: 0, rateLimitPerMinute: 0, unauthenticatedRateLimitPerMinute: 0 } },
  });
  // PostgreSQL: installed before the service connects (pg-floor.ts), to capture one booking for the SQL floor
  const recorder = engine === 'postgres' && pgbenchAvailable() ? installPgRecorder() : undefined;
  const svc = new CentralService({ config, log: createLogger({ level: 'silent' }), pgSchema, startWorkers: false });
  const ctx = await svc.start();
  try {
    const now = toDbTime(new Date());
    await applyProvisioning(
      ctx.db.kysely,
      { pickupPoints: [], tenants: [{ clientId: 'bench', clientSecret: 'bench-secret-0123456789', name: 'Bench', mainAccount: { email: 'bench-dispatch@example.test', firstName: 'B', lastName: 'D' }, pickupPoints: [] }], terminals: [] },
      ctx.clock,
    );
    const tenant = await ctx.db.kysely.selectFrom('tenants').select('uid').where('client_id', '=', 'bench').executeTakeFirstOrThrow();
    const { pups, user } = await provision(ctx.db, now, tenant.uid);
    // Callbacks registered, so every booking queues a pending ShipmentStatusUpdate (delivery
    // workers are not started: the bench measures the API call, which never waits for delivery).
    await ctx.db.kysely.insertInto('callback_configs').values({ tenant_uid: tenant.uid, url: 'http://127.0.0.1:9/callbacks', auth_type: 'HMAC', auth_key: 'k'.repeat(64), created_at: now, updated_at: now }).execute();
    svc.app.principals.clear();
    const url = await svc.listen();
    const token = ctx.tokens.issue(tenant.uid).token;
    const headers = { 'content-type': 'application/json', authorization: `Bearer ${token}` };
    const sync = engine === 'sqlite' ? (['OFF', 'NORMAL', 'FULL', 'EXTRA'][Number(ctx.db.sqlite!.pragma('synchronous', { simple: true }))] ?? '?') : 'n/a (synchronous_commit default)';

    const base = await baseline();
    // SQLite: the floor both before and after the endpoint's bookings (each on a fresh store), the
    // ratio taken against their mean: with one floor run the floor alone moved by a fifth from run
    // to run (2,672-3,242 bookings/s in the twenty-eighth session's full benches)
    const floorBefore = engine === 'sqlite' ? await floorRun() : undefined;
    // PostgreSQL: one booking's statements, captured for the SQL floor (pgbench) run after the endpoint's
    const captured = recorder ? await captureBooking(recorder, svc, ctx.db, pups[PG_FLOOR_PUPS[0]]!, user, headers) : undefined;
    // the event loop's longest stalls while bookings run: a checkpoint inside a COMMIT stops it
    const loopDelay = monitorEventLoopDelay({ resolution: 5 });
    loopDelay.enable();
    const book = await warmBookingLoad(url, bookingLoads(pups, user), headers);
    loopDelay.disable();
    const stalls = `event loop delay during the bookings p99 / max ${(loopDelay.percentile(99) / 1e6).toFixed(0)} / ${(loopDelay.max / 1e6).toFixed(0)} ms`;
    const cp = ctx.db.walCheckpointer?.stats;
    const checkpoints = engine === 'sqlite' ? (cp ? `WAL checkpoints in their thread: ${cp.checkpoints} (max ${cp.maxFrames} frames, max ${cp.maxMs.toFixed(0)} ms, ${cp.overlapped} beside a write, ${cp.errors} refused)` : 'WAL checkpoints in the COMMIT') : '';
    // Requests the load generator gave up on at the end may still commit: let them land, then
    // read every count from one snapshot (one statement).
    await new Promise((r) => setTimeout(r, 1000));
    const dbl = await ctx.db.kysely
      .selectFrom('shipments')
      .select(['locker_uid', (eb) => eb.fn.countAll<number>().as('n')])
      .where('active', '=', 1)
      .where('locker_uid', 'is not', null)
      .groupBy('locker_uid')
      .having((eb) => eb.fn.countAll(), '>', 1)
      .execute();
    const counts = await sql<{ booked: number; stored: number }>`SELECT (SELECT COUNT(*) FROM lockers WHERE booked_shipment_uid IS NOT NULL) AS booked, (SELECT COUNT(*) FROM shipments) AS stored`.execute(ctx.db.kysely);
    const booked = Number(counts.rows[0]?.booked ?? 0);
    const stored = Number(counts.rows[0]?.stored ?? 0);
    const pendingOutbox = Number((await ctx.db.kysely.selectFrom('callback_outbox').select((eb) => eb.fn.countAll<number>().as('n')).where('status', '=', 'pending').executeTakeFirst())?.n ?? 0);
    // the floor right after the endpoint: SQLite on a fresh store provisioned the same way,
    // PostgreSQL on this store (at PUPs the endpoint's load did not reach)
    const floorAfter = engine === 'sqlite' ? await floorRun() : captured ? await pgFloorRun(ctx.db, pgSchema!, captured) : undefined;
    const floor = floorBefore && floorAfter ? bracketed(floorBefore, floorAfter) : floorAfter;
    const floorNote =
      engine === 'postgres'
        ? floor
          ? `; SQL floor: the captured booking's statements replayed by pgbench, ${POOL} connections, ${floor.ok} bookings after ${POOL * PG_FLOOR_WARM} of warm-up, average latency ${floor.p50.toFixed(1)} ms`
          : '; SQL floor: pgbench not installed'
        : floorBefore && floorAfter
          ? `; SQL floor ${Math.round(floorBefore.rps).toLocaleString('en')} bookings/s before the endpoint's bookings and ${Math.round(floorAfter.rps).toLocaleString('en')} after (the table: their mean), ${floorBefore.ok + floorAfter.ok} bookings`
          : '';
    const runner = shipmentService(ctx).tx.inner;
    const batching = runner instanceof SqliteGroupCommitRunner ? `, group commit: ${runner.stats.jobs} jobs in ${runner.stats.batches} transactions (mean ${(runner.stats.jobs / Math.max(1, runner.stats.batches)).toFixed(1)}, max ${runner.stats.maxBatch})` : '';

    await fill(ctx.db, tenant.uid, pups, user);
    const listBody = JSON.stringify({ pageNo: 1, pageSize: 100, activeShipments: true, sortBy: 'CreatedDesc' });
    const probe = await svc.app.inject({ method: 'POST', url: '/v1/Logistics/GetShipments', payload: listBody, headers });
    const pj = probe.json();
    if (probe.statusCode !== 200 || pj.items.length !== 100) throw new Error(`GetShipments probe failed: ${probe.statusCode} ${probe.body.slice(0, 200)}`);
    const list = await warmLoad(url, [{ method: 'POST', path: '/v1/Logistics/GetShipments', body: listBody }], headers);
    const sinceBody = JSON.stringify({ pageNo: 1, pageSize: 100, activeShipments: true, updatedSince: SINCE, sortBy: 'ActivityAsc' });
    const sprobe = await svc.app.inject({ method: 'POST', url: '/v1/Logistics/GetShipments', payload: sinceBody, headers });
    const sj = sprobe.json();
    if (sprobe.statusCode !== 200 || sj.items.length !== 100) throw new Error(`GetShipments updatedSince probe failed: ${sprobe.statusCode} ${sprobe.body.slice(0, 200)}`);
    const since = await warmLoad(url, [{ method: 'POST', path: '/v1/Logistics/GetShipments', body: sinceBody }], headers);
    const listFloor = recorder ? await listFloorRun(recorder, svc, ctx.db, pgSchema!, listBody, headers) : undefined;
    const ts = engine === 'postgres' ? pgTotalsStats(ctx.db) : undefined;
    // PostgreSQL: how many totals the page statement took from a held snapshot, how many it counted
    const totalsNote = ts ? `; totals: ${ts.counts} counted, ${ts.hits} held under an unchanged snapshot` : '';
    const note = `synchronous=${sync}; ${stalls}${checkpoints ? `; ${checkpoints}` : ''}; ${book.ok} bookings acknowledged, ${stored} shipments before fill, ${booked} lockers booked, ${pendingOutbox} callbacks queued${batching}${floorNote}; GetShipments over ${STORED.toLocaleString('en')} stored (${pj.totalItems.toLocaleString('en')} active match; with updatedSince ${SINCE}: ${sj.totalItems.toLocaleString('en')} match)${totalsNote}`;
    return { engine, base, book, list, since, ...(floor ? { floor } : {}), ...(listFloor ? { listFloor } : {}), doubleBooked: dbl.length, note };
  } finally {
    await svc.stop();
    await cleanup();
  }
}

export default async function (): Promise<{ title: string; markdown: string }> {
  const load0 = os.loadavg()[0]!.toFixed(1);
  const results: EngineResult[] = [];
  if (ENGINES.includes('sqlite')) results.push(await runEngine('sqlite'));
  const u = new URL(PG_URL);
  const pgOk = ENGINES.includes('postgres') && (await reachable(u.hostname, Number(u.port || 5432)));
  if (pgOk) results.push(await runEngine('postgres'));
  const f = (n: number) => Math.round(n).toLocaleString('en');
  const r = (a: number, b: number) => (a / b).toFixed(2);
  const lines = [
    `${DURATION_S} s per run, ${CONNECTIONS} connections, autocannon in a separate process (bench/load-child.mjs) over loopback, the bare route loaded the same way; ${PUPS} PUPs x ${LOCKERS_PER_PUP} lockers; load average ${load0} at start (${os.cpus().length} cores). Each GetShipments load follows ${WARM_S} s of the same load, not counted (JIT, pooled connections, plans), as in the api bench; the bookings follow ${WARM_S} s of bookings at ${WARM_PUPS} PUPs of their own, and so does the SQL floor. SQLite's SQL floor runs right before and right after the endpoint's bookings, each on a fresh store; its column is their mean (both in the notes).`,
    '',
    '| engine | bare route req/s | CreateLocalShipment req/s | ratio | p50 / p99 ms | SQL floor req/s | booking / floor | double-booked lockers | non-2xx |',
    '|---|---|---|---|---|---|---|---|---|',
    ...results.map(
      (x) =>
        `| ${x.engine} | ${f(x.base.rps)} | ${f(x.book.rps)} | ${r(x.book.rps, x.base.rps)} | ${x.book.p50} / ${x.book.p99} | ${x.floor ? f(x.floor.rps) : '-'} | ${x.floor ? `**${r(x.book.rps, x.floor.rps)}**` : '-'} | **${x.doubleBooked}** | ${x.book.non2xx + (x.floor?.non2xx ?? 0)} |`,
    ),
    '',
    '| engine | GetShipments (100 of 100k) req/s | ratio | p50 / p99 ms | with updatedSince req/s | ratio | p50 / p99 ms | non-2xx | page SQL floor req/s, p50 / p99 ms |',
    '|---|---|---|---|---|---|---|---|---|',
    ...results.map(
      (x) =>
        `| ${x.engine} | ${f(x.list.rps)} | ${r(x.list.rps, x.base.rps)} | ${x.list.p50} / ${x.list.p99} | ${f(x.since.rps)} | ${r(x.since.rps, x.base.rps)} | ${x.since.p50} / ${x.since.p99} | ${x.list.non2xx + x.since.non2xx} | ${x.listFloor ? `${f(x.listFloor.rps)}, ${x.listFloor.p50} / ${x.listFloor.p99}` : '-'} |`,
    ),
    '',
    ...results.map((x) => `- ${x.engine}: ${x.note}`),
    ...(pgOk || !ENGINES.includes('postgres') ? [] : ['- postgres: SKIPPED (not reachable)']),
    '',
    `Page SQL floor (PostgreSQL): the statement a warm GetShipments (no updatedSince) sends, captured and replayed by pgbench with ${CONNECTIONS} connections for ${LIST_FLOOR_S} s after ${LIST_FLOOR_WARM_S} s not counted; its p50 / p99 from pgbench's per-transaction log. The page as PostgreSQL itself serves it on this machine, no Node and no HTTP.`,
    '',
    'Goals (issue 15): booking on SQLite at >= 0.90 of its own SQL floor in the same run and >= 0.05 of the bare route on PostgreSQL, every acknowledged booking durable, no locker booked twice; GetShipments with and without updatedSince at >= 0.05 of the bare route with p99 <= 50 ms.',
  ];
  return { title: 'Shipments: booking and listing throughput', markdown: lines.join('\n') };
}
