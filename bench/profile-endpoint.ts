// A CPU profile of a real tenant API endpoint under load (autocannon in a separate process, the
// server in this one), to see where a request's time goes. Not part of `npm run bench` (it
// measures no ratio). Wrap it in `flock /tmp/bench.lock` on shared machines.
//
//   npx tsx --conditions=@locker/source bench/profile-endpoint.ts GetPickUpPoints       # a preset (list: --help)
//   npx tsx --conditions=@locker/source bench/profile-endpoint.ts booking               # CreateLocalShipment, as bench/shipments.bench.ts loads it
//   npx tsx --conditions=@locker/source bench/profile-endpoint.ts floor                 # the booking's SQL floor (booking-floor.bench.ts, event-loop variant), loaded as booking is
//   npx tsx --conditions=@locker/source bench/profile-endpoint.ts shipments             # GetShipments, 100 of 100,000, as bench/shipments.bench.ts loads it
//   npx tsx --conditions=@locker/source bench/profile-endpoint.ts bare                  # the bare fastify route every ratio is taken against
//   npx tsx --conditions=@locker/source bench/profile-endpoint.ts /v1/PickupPoints/GetLockers '{"pageNo":1,"pageSize":50,"pupUid":"{pupUid}"}'
//   BENCH_PROFILE_ENGINE=postgres BENCH_PROFILE_SECONDS=10 BENCH_PROFILE_OUT=/tmp/x.cpuprofile npx tsx ... GetAccount
//   BENCH_PROFILE_ENGINE=postgres BENCH_PROFILE_PG_PIPELINES=0 npx tsx ... GetAccount   # every read from the pool (database.pgReadPipelines 0; default 2)
//   BENCH_PROFILE_ENGINE=postgres BENCH_PROFILE_POOL=16 npx tsx ... booking   # database.poolSize (default 10; the shipments bench uses 16)
//   BENCH_PROFILE_CHECKPOINTS=commit npx tsx ... booking   # database.sqliteCheckpoints (default background: in a thread between batches)
//   BENCH_PROFILE_PERF=1 BENCH_PROFILE_GC=1 npx tsx ... shipments   # V8's GC pauses and the event loop's delay during the load
//   NODE_OPTIONS=--perf-basic-prof BENCH_PROFILE_PERF=1 npx tsx ... GetLockers   # no V8 profile: attach `perf record -g -p <pid>` (printed) for on-CPU time with the kernel's
//
// The read presets are bench/api.bench.ts's ENDPOINTS on the demo site (16 connections, as there);
// a path with a body runs against the demo site too, `{pupUid}` and `{mainAccountUid}` in the body
// are replaced by the demo tenant's. `booking` provisions the shipments bench's 500 PUPs x 80
// lockers (SQLite synchronous=FULL, 64 connections, callbacks registered). `floor` serves the
// booking's raw statements (bench/booking-floor-worker.mjs) on a store provisioned the same way,
// in this process beside an idle central service, so the two profile alike: run both with
// BENCH_PROFILE_SQL=1 for the same statements' cost per call, or with perf for the main thread's
// time per booking (docs/benchmarks.md, "The thirty-first session's runs").
//
// It prints the self time by area (a library, or the central service's own folder) and the top
// functions by self time. The .cpuprofile (BENCH_PROFILE_OUT) opens in Chrome DevTools
// (Performance) or speedscope. `run` and `all` are better-sqlite3's native statement calls (a
// COMMIT is a `run`); `(idle)` is the event loop waiting for the load generator; `(program)` and
// `(garbage collector)` are V8's own.
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import { AsyncLocalStorage } from 'node:async_hooks';
import inspector from 'node:inspector/promises';
import { monitorEventLoopDelay, PerformanceObserver, type PerformanceEntry } from 'node:perf_hooks';
import os from 'node:os';
import path from 'node:path';
import Fastify from 'fastify';
import { countPgQueries, summariseProfile, dropPgSchema, type Profile } from './cpu-profile';
import { CentralService } from '../packages/central/src/service';
import { loadConfig } from '../packages/central/src/config';
import { createLogger } from '../packages/central/src/logger';
import { applyProvisioning } from '../packages/central/src/provisioning/apply';
import { toDbTime } from '../packages/central/src/ids';
import type { AppContext } from '../packages/central/src/context';
import { bookingBody, fill, provision } from './shipments.bench';
import { serveFloor, template } from './booking-floor.bench';
import { pgTotalsStats } from '../packages/central/src/shipments/queries';
import { ENDPOINTS } from './api.bench';
import { demoTenant, load, type LoadRequest } from './support';

interface Target {
  url: string;
  connections: number;
  headers: Record<string, string>;
  requests: LoadRequest[];
}

const PG_URL = process.env.LOCKER_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const seconds = Number(process.env.BENCH_PROFILE_SECONDS ?? 5);
const engine = (process.env.BENCH_PROFILE_ENGINE ?? 'sqlite') as 'sqlite' | 'postgres';
const [what, bodyArg] = process.argv.slice(2);

if (!what || what === '--help' || what === '-h') {
  console.log(`usage: profile-endpoint.ts <preset | /v1/path [json body]>\npresets: bare, booking, floor, shipments, ${ENDPOINTS.map((e) => e.name).join(', ')}`);
  process.exit(what ? 0 : 1);
}

/** The shipments bench's tenant with its 500 PUPs x 80 lockers (shipments.bench.ts provision). */
async function benchTenant(ctx: AppContext) {
  const now = toDbTime(new Date());
  const site = { pickupPoints: [], terminals: [], tenants: [{ clientId: 'bench', clientSecret: 'bench-secret-0123456789', name: 'Bench', mainAccount: { email: 'bench-dispatch@example.test', firstName: 'B', lastName: 'D' }, pickupPoints: [] }] };
  await applyProvisioning(ctx.db.kysely, site, ctx.clock);
  const tenant = await ctx.db.kysely.selectFrom('tenants').select('uid').where('client_id', '=', 'bench').executeTakeFirstOrThrow();
  return { now, tenant, ...(await provision(ctx.db, now, tenant.uid)) };
}

/** The shipments bench's booking: 500 PUPs x 80 lockers, callbacks registered, one body per PUP. */
async function bookingTarget(svc: CentralService, ctx: AppContext): Promise<Target> {
  const { now, tenant, pups, user } = await benchTenant(ctx);
  // callbacks registered: every booking queues a pending outbox row, as in the shipments bench
  await ctx.db.kysely.insertInto('callback_configs').values({ tenant_uid: tenant.uid, url: 'http://127.0.0.1:9/callbacks', auth_type: 'HMAC', auth_key: 'k'.repeat(64), created_at: now, updated_at: now }).execute();
  const url = await svc.listen();
  return {
    url,
    connections: 64,
    headers: { 'content-type': 'application/json', authorization: `Bearer ${ctx.tokens.issue(tenant.uid).token}` },
    requests: pups.map((p) => ({ method: 'POST' as const, path: '/v1/Logistics/CreateLocalShipment', body: bookingBody(user, p) })),
  };
}

let floorClose: (() => Promise<void>) | undefined;

/** The booking's SQL floor (booking-floor.bench.ts, event-loop variant), loaded as `booking` is. */
async function floorTarget(): Promise<Target> {
  const tpl = await template(dir);
  const floor = await serveFloor(tpl, dir, 'floor', [], 'inline');
  floorClose = floor.close;
  return { url: floor.url, connections: 64, headers: { 'content-type': 'application/json' }, requests: tpl.pups.map((p) => ({ method: 'POST' as const, path: '/v1/Logistics/CreateLocalShipment', body: bookingBody(tpl.user, p) })) };
}

/** The shipments bench's GetShipments: a page of 100 (active, newest first) out of 100,000 stored, 64 connections. */
async function shipmentsTarget(svc: CentralService, ctx: AppContext): Promise<Target> {
  const { tenant, pups, user } = await benchTenant(ctx);
  await fill(ctx.db, tenant.uid, pups, user);
  const url = await svc.listen();
  const body = process.env.BENCH_PROFILE_SINCE ? { pageNo: 1, pageSize: 100, activeShipments: true, updatedSince: '2025-01-01T09:00:00', sortBy: 'ActivityAsc' } : { pageNo: 1, pageSize: 100, activeShipments: true, sortBy: 'CreatedDesc' };
  return { url, connections: 64, headers: { 'content-type': 'application/json', authorization: `Bearer ${ctx.tokens.issue(tenant.uid).token}` }, requests: [{ method: 'POST', path: '/v1/Logistics/GetShipments', body: JSON.stringify(body) }] };
}

/** A read preset of bench/api.bench.ts, or any path with a body, on the demo site. */
async function demoTarget(svc: CentralService, ctx: AppContext): Promise<Target> {
  const { base, token, pupUid, mainAccountUid } = await demoTenant(svc, ctx);
  const preset = ENDPOINTS.find((e) => e.name.toLowerCase() === what!.toLowerCase());
  let reqPath: string;
  let body: string;
  if (preset) {
    reqPath = preset.path;
    body = JSON.stringify(preset.body({ pupUid, mainAccountUid }));
  } else if (what!.startsWith('/')) {
    reqPath = what!;
    body = (bodyArg ?? '{}').replaceAll('{pupUid}', pupUid).replaceAll('{mainAccountUid}', mainAccountUid);
  } else {
    throw new Error(`unknown preset ${what}: booking, ${ENDPOINTS.map((e) => e.name).join(', ')} or a /v1/ path`);
  }
  return { url: base, connections: 16, headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` }, requests: [{ method: 'POST', path: reqPath, body }] };
}

/** The area of a profiled function: a library by its package name, else the central service's folder. */
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-profile-'));
const pgSchema = engine === 'postgres' ? `profile_${crypto.randomBytes(5).toString('hex')}` : undefined;
const config = loadConfig({
  env: {},
  overrides: {
    database: { url: engine === 'postgres' ? PG_URL : path.join(dir, 'central.db'), sqliteSynchronous: 'FULL', ...(process.env.BENCH_PROFILE_POOL ? { poolSize: Number(process.env.BENCH_PROFILE_POOL) } : {}), sqliteReadThreads: Number(process.env.BENCH_PROFILE_READ_THREADS ?? 1), ...(process.env.BENCH_PROFILE_CHECKPOINTS ? { sqliteCheckpoints: process.env.BENCH_PROFILE_CHECKPOINTS as 'background' | 'commit' } : {}), pgReadPipelines: Number(process.env.BENCH_PROFILE_PG_PIPELINES ?? 2) },
    log: { level: 'silent' },
    mqtt: { mode: 'off' },
    environment: 'staging',
    http: { host: '127.0.0.1', port: 0, rateLimitPerMinute: 0, unauthenticatedRateLimitPerMinute: 0 },
  },
});
/** the bare route of bench/support.ts (bareBaseline), profiled the same way: the floor every ratio is taken against */
let bareApp: ReturnType<typeof Fastify> | undefined;
async function bareTarget(): Promise<Target> {
  const app = (bareApp = Fastify({ logger: false }));
  app.post('/v1/Bare', async (req) => ({ success: true, error: null, message: null, echo: (req.body as { pageNo?: unknown })?.pageNo ?? null }));
  const url = await app.listen({ host: '127.0.0.1', port: 0 });
  return { url, connections: 16, headers: { 'content-type': 'application/json' }, requests: [{ method: 'POST', path: '/v1/Bare', body: JSON.stringify({ pageNo: 1, pageSize: 50, includeDetails: true }) }] };
}

// BENCH_PROFILE_GC=1 also times every request inside the server: from the 'request' event (its
// head parsed) to the response's 'finish' (written to the socket), to set against the load
// generator's latency (which adds the wait before the server reads the request and after it wrote)
const serverMs: number[] = [];
/** per request inside the server: head parsed -> the read called, the read, read -> res.end(), res.end() -> written */
const phases = { before: [] as number[], read: [] as number[], after: [] as number[], flush: [] as number[] };
const requestTimes = new AsyncLocalStorage<{ t0: number; readAt?: number; readDone?: number; endAt?: number }>();
let timeRequests = false;
if (process.env.BENCH_PROFILE_GC) {
  const emit = http.Server.prototype.emit;
  http.Server.prototype.emit = function (this: http.Server, event: string | symbol, ...args: unknown[]) {
    if (event === 'request' && timeRequests) {
      const times = { t0: performance.now() } as { t0: number; readAt?: number; readDone?: number; endAt?: number };
      const res = args[1] as http.ServerResponse;
      const end = res.end;
      res.end = function (this: http.ServerResponse, ...a: unknown[]) {
        times.endAt = performance.now();
        return (end as (...x: unknown[]) => http.ServerResponse).apply(this, a);
      } as typeof res.end;
      res.once('finish', () => {
        const t = performance.now();
        serverMs.push(t - times.t0);
        if (times.readAt !== undefined && times.readDone !== undefined && times.endAt !== undefined) {
          phases.before.push(times.readAt - times.t0);
          phases.read.push(times.readDone - times.readAt);
          phases.after.push(times.endAt - times.readDone);
          phases.flush.push(t - times.endAt);
        }
      });
      return requestTimes.run(times, () => (emit as (...x: unknown[]) => boolean).apply(this, [event, ...args]));
    }
    return (emit as (...x: unknown[]) => boolean).apply(this, [event, ...args]);
  } as typeof emit;
}

const svc = new CentralService({ config, log: createLogger({ level: 'silent' }), pgSchema, startWorkers: false });
const ctx = await svc.start();
try {
  const target = what === 'booking' ? await bookingTarget(svc, ctx) : what === 'shipments' ? await shipmentsTarget(svc, ctx) : what === 'bare' ? await bareTarget() : what === 'floor' ? await floorTarget() : await demoTarget(svc, ctx);
  const url = target.url;
  const probe = await fetch(`${url}${target.requests[0]!.path}`, { method: 'POST', headers: target.headers, body: target.requests[0]!.body });
  console.log(`probe: ${probe.status} ${(await probe.text()).slice(0, 300)}`);

  // BENCH_PROFILE_SQL=1 (SQLite): every statement run during the load, with its calls and time
  const sqlTimes = new Map<string, { n: number; ms: number }>();
  if (process.env.BENCH_PROFILE_SQL && ctx.db.sqlite) {
    const proto = Object.getPrototypeOf(ctx.db.sqlite.prepare('select 1')) as Record<'all' | 'get' | 'run', (...a: unknown[]) => unknown> & { source: string };
    for (const m of ['all', 'get', 'run'] as const) {
      const orig = proto[m];
      proto[m] = function (this: { source: string }, ...a: unknown[]) {
        const t0 = performance.now();
        try {
          return orig.apply(this, a);
        } finally {
          const e = sqlTimes.get(this.source) ?? { n: 0, ms: 0 };
          e.n++;
          e.ms += performance.now() - t0;
          sqlTimes.set(this.source, e);
        }
      };
    }
  }

  // BENCH_PROFILE_SQL=1 (PostgreSQL): every query sent during the load (pg's Client.query), with its calls
  const pgQueries = process.env.BENCH_PROFILE_SQL && engine === 'postgres' ? countPgQueries().counts : new Map<string, number>();

  // BENCH_PROFILE_PERF=1: no V8 profile, only the load (attach `perf record -g -p <pid>` to the
  // pid printed here, with NODE_OPTIONS=--perf-basic-prof): on-CPU time including the kernel's
  const perf = Boolean(process.env.BENCH_PROFILE_PERF);
  if (perf) console.log(`pid ${process.pid}: load for ${seconds} s`);
  const session = perf ? undefined : new inspector.Session();
  if (session) {
    session.connect();
    await session.post('Profiler.enable');
    await session.post('Profiler.setSamplingInterval', { interval: 100 });
    await session.post('Profiler.start');
  }
  // BENCH_PROFILE_RUNS=n (with BENCH_PROFILE_PERF=1): n loads one after another, each printed, to
  // compare old and new code by CPU per request (the first includes the warm-up)
  const runs = perf ? Math.max(1, Number(process.env.BENCH_PROFILE_RUNS ?? 1)) : 1;
  for (let i = 1; i < runs; i++) {
    const w = await load({ url, connections: target.connections, duration: seconds, headers: target.headers, requests: target.requests });
    console.log(`${engine} ${what} run ${i}: ${Math.round(w.rps)} req/s, ${w.cpuUsPerReq.toFixed(1)} us CPU per request (non-2xx ${w.non2xx}, p99 ${w.p99} ms)`);
  }
  // BENCH_PROFILE_GC=1: V8's pauses during the measured load (count, total and longest per kind)
  // and the event loop's delay (how long a ready socket may wait for the loop): what a tail
  // latency far above the median is made of
  const gcs: PerformanceEntry[] = [];
  const gcObserver = process.env.BENCH_PROFILE_GC ? new PerformanceObserver((l) => gcs.push(...l.getEntries())) : undefined;
  gcObserver?.observe({ entryTypes: ['gc'] });
  const loopDelay = gcObserver ? monitorEventLoopDelay({ resolution: 1 }) : undefined;
  loopDelay?.enable();
  timeRequests = Boolean(gcObserver);
  const totals0 = gcObserver && engine === 'postgres' ? { ...pgTotalsStats(ctx.db) } : undefined;
  const acquireMs: number[] = [];
  if (gcObserver && ctx.db.pgRead) {
    const orig = ctx.db.pgRead;
    Object.defineProperty(ctx.db, 'pgRead', {
      value: async (...a: Parameters<typeof orig>) => {
        const times = requestTimes.getStore();
        if (times && times.readAt === undefined) times.readAt = performance.now();
        try {
          return await orig(...a);
        } finally {
          if (times) times.readDone = performance.now();
        }
      },
    });
  }
  if (gcObserver && ctx.db.readPool) {
    // SQLite: the page read in its thread (db/read-pool.ts), timed as the PostgreSQL reads are
    const rp = ctx.db.readPool;
    const page = rp.page.bind(rp);
    rp.page = (req) => {
      const times = requestTimes.getStore();
      if (times && times.readAt === undefined) times.readAt = performance.now();
      const r = page(req);
      if (!r) {
        if (times) times.readDone = performance.now();
        return r;
      }
      return r.finally(() => {
        if (times) times.readDone = performance.now();
      });
    };
  }
  if (gcObserver && ctx.db.pool) {
    const pool = ctx.db.pool;
    const connect = pool.connect.bind(pool);
    (pool as unknown as { connect: unknown }).connect = (cb?: (...x: unknown[]) => void) => {
      const t0 = performance.now();
      if (cb) return connect((...x: unknown[]) => { acquireMs.push(performance.now() - t0); cb(...x); });
      return connect().then((c) => { acquireMs.push(performance.now() - t0); return c; });
    };
  }
  const r = await load({ url, connections: target.connections, duration: seconds, headers: target.headers, requests: target.requests });
  gcObserver?.disconnect();
  loopDelay?.disable();
  timeRequests = false;
  if (gcObserver) {
    const KINDS: Record<number, string> = { 1: 'scavenge', 2: 'mark-compact', 4: 'incremental marking', 8: 'weak callbacks', 16: 'minor mark-sweep' };
    const byKind = new Map<string, number[]>();
    for (const e of gcs) {
      const kind = KINDS[((e as PerformanceEntry & { detail?: { kind?: number } }).detail)?.kind ?? 0] ?? 'other';
      byKind.set(kind, [...(byKind.get(kind) ?? []), e.duration]);
    }
    for (const [kind, d] of byKind) console.log(`gc ${kind}: ${d.length} pauses, ${d.reduce((a, b) => a + b, 0).toFixed(0)} ms in all (${((100 * d.reduce((a, b) => a + b, 0)) / (seconds * 1000)).toFixed(1)} % of the load), longest ${Math.max(...d).toFixed(1)} ms`);
    const ms = (ns: number) => (ns / 1e6).toFixed(1);
    serverMs.sort((a, b) => a - b);
    const at = (q: number) => (serverMs[Math.min(serverMs.length - 1, Math.floor(q * serverMs.length))] ?? 0).toFixed(1);
    console.log(`inside the server (request head parsed -> answer written), ${serverMs.length} requests: p50 ${at(0.5)} ms, p90 ${at(0.9)} ms, p99 ${at(0.99)} ms, max ${at(1)} ms`);
    for (const [name, arr] of [['head parsed -> read called', phases.before], ['the reads (pool wait, statements, rows)', phases.read], ['read done -> res.end()', phases.after], ['res.end() -> written', phases.flush], ['pool.connect wait', acquireMs]] as const) {
      if (!arr.length) continue;
      arr.sort((a, b) => a - b);
      const q = (x: number) => (arr[Math.min(arr.length - 1, Math.floor(x * arr.length))] ?? 0).toFixed(1);
      console.log(`${name}, ${arr.length}: p50 ${q(0.5)} ms, p90 ${q(0.9)} ms, p99 ${q(0.99)} ms, max ${q(1)} ms`);
    }
    if (totals0) {
      const t = pgTotalsStats(ctx.db);
      console.log(`GetShipments totals (PostgreSQL): ${t.counts - totals0.counts} counted, ${t.hits - totals0.hits} held under an unchanged snapshot`);
    }
    console.log(`event loop delay: p50 ${ms(loopDelay!.percentile(50))} ms, p99 ${ms(loopDelay!.percentile(99))} ms, max ${ms(loopDelay!.max)} ms`);
  }
  const profile = session ? ((await session.post('Profiler.stop')) as unknown as { profile: Profile }).profile : undefined;
  session?.disconnect();
  console.log(`${engine} ${what}${runs > 1 ? ` run ${runs}` : ''}: ${Math.round(r.rps)} req/s, ${r.cpuUsPerReq.toFixed(perf ? 1 : 0)} us CPU per request (non-2xx ${r.non2xx}, p50 ${r.p50} ms, p99 ${r.p99} ms) while profiling`);
  if (r.non2xx > 0) {
    // what a refused request was told: the requests once more, the first answer that is not 2xx
    for (const q of target.requests) {
      const res = await fetch(`${url}${q.path}`, { method: 'POST', headers: target.headers, body: q.body });
      if (res.status >= 300) {
        console.log(`a refused request: ${res.status} ${(await res.text()).slice(0, 300)}`);
        break;
      }
    }
  }
  if (pgQueries.size) {
    const answered = r.ok + r.non2xx;
    console.log('\nqueries per request   SQL');
    for (const [text, n] of [...pgQueries].sort((a, b) => b[1] - a[1]).slice(0, 15)) console.log(`${(n / answered).toFixed(2).padStart(6)}   ${text.slice(0, 150)}`);
  }
  if (sqlTimes.size) {
    const answered = r.ok + r.non2xx;
    console.log('\nstatements per request, us per call   SQL');
    for (const [text, e] of [...sqlTimes].sort((a, b) => b[1].ms - a[1].ms).slice(0, 15)) console.log(`${(e.n / answered).toFixed(2).padStart(6)} ${((e.ms * 1000) / e.n).toFixed(1).padStart(8)}   ${text.slice(0, 150)}`);
  }
  if (profile) {
    if (process.env.BENCH_PROFILE_OUT) fs.writeFileSync(process.env.BENCH_PROFILE_OUT, JSON.stringify(profile));
    summariseProfile(profile, (l) => console.log(l));
  }
} finally {
  await bareApp?.close();
  await floorClose?.();
  await svc.stop();
  // BENCH_PROFILE_KEEP_SCHEMA=1: the store stays (SQLite: its folder; PostgreSQL: its schema), for EXPLAIN by hand
  if (process.env.BENCH_PROFILE_KEEP_SCHEMA && !pgSchema) console.log(`store ${dir} kept`);
  else fs.rmSync(dir, { recursive: true, force: true });
  if (pgSchema && process.env.BENCH_PROFILE_KEEP_SCHEMA) console.log(`schema ${pgSchema} kept`);
  else if (pgSchema) {
    await dropPgSchema(PG_URL, pgSchema);
  }
}
process.exit(0);
