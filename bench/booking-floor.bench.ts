// How fast can SQLite book at all on this machine? The booking's own SQL, with nothing around it,
// behind a bare fastify route (no auth, no validation, no logging), loaded exactly like the
// shipments bench (autocannon in a separate process, 64 connections, 500 PUPs x 80 lockers).
//
// 1. the bare route alone (baseline of every ratio);
// 2. the raw booking statements (bench/booking-floor-worker.mjs) on the event-loop thread, group
//    commit with synchronous=FULL;
// 3. the same statements in a writer thread that owns the connection (the route posts a message
//    and awaits the answer), so SQLite's work runs beside the HTTP work;
// 4.-6. the statements inline with indexes removed: the nine listing/filter indexes of shipments,
//    the two secondary indexes of access_codes, then both; what the data model's indexes cost;
// 7. both at once: writer thread and no secondary indexes;
// 8.-9. a lower bound for a row-based design: the locker taken plus one row per booking that
//    holds all of it as JSON (no codes table, no outbox table, no index), inline and threaded;
// 10.-11. lower still, a log design: free lockers held in memory, a booking is one appended row.
//
// 4.-11. run only with BENCH_FLOOR_ALL=1: npm run bench runs 1.-3. (and stays under 10 minutes).
//
// This is the ceiling the real endpoint (shipments.bench.ts) can approach; it is not the product.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import Fastify from 'fastify';
import { openDatabase } from '../packages/central/src/db/database';
import { applyProvisioning } from '../packages/central/src/provisioning/apply';
import { ManualClock } from '../packages/central/src/clock';
import { toDbTime } from '../packages/central/src/ids';
import { bookingBody, bookingLoads, provision, warmBookingLoad } from './shipments.bench';
import { bareBaseline, type Load } from './support';

const DIR = path.dirname(fileURLToPath(import.meta.url));
const WORKER = path.join(DIR, 'booking-floor-worker.mjs');
const DURATION_S = Number(process.env.BENCH_SHIPMENTS_SECONDS ?? 5);
const CONNECTIONS = 64;
const LISTING_INDEXES = ['shipments_t_active_created', 'shipments_t_active_updated', 'shipments_t_type_active_created', 'shipments_t_type_active_updated', 'shipments_t_state_created', 'shipments_t_pup_created', 'shipments_t_from', 'shipments_t_to', 'shipments_deadline'];
const CODE_INDEXES = ['access_codes_shipment', 'access_codes_pup_valid_value'];

interface BookRequest {
  tenantUid: string;
  pupUid: string;
  fromUserUid: string;
  toUserUid: string;
  referenceNo: string;
  dimension: { width: number; height: number; length: number };
}
interface Booker {
  book(m: BookRequest): Promise<unknown>;
  close(): void;
  stats: { batches: number; jobs: number };
}

/** A provisioned store (schema from the real migrations), copied for every variant. */
export async function template(dir: string): Promise<{ file: string; tenantUid: string; mainUid: string; user: string; pups: string[] }> {
  const file = path.join(dir, 'template.db');
  const db = await openDatabase({ url: file });
  await db.migrate();
  const clock = new ManualClock(new Date());
  await applyProvisioning(db.kysely, { pickupPoints: [], tenants: [{ clientId: 'floor', clientSecret: 'floor-secret-0123456789', name: 'Floor', mainAccount: { email: 'floor@example.test', firstName: 'F', lastName: 'L' }, pickupPoints: [] }], terminals: [] }, clock);
  const t = await db.kysely.selectFrom('tenants').select(['uid', 'main_account_uid']).where('client_id', '=', 'floor').executeTakeFirstOrThrow();
  const { pups, user } = await provision(db, toDbTime(clock.now()), t.uid);
  db.sqlite!.pragma('wal_checkpoint(TRUNCATE)');
  await db.close();
  return { file, tenantUid: t.uid, mainUid: t.main_account_uid, user, pups };
}

/**
 * The booking's SQL behind a bare fastify route (no auth, no validation, no logging) on a copy of
 * the template: on the event-loop thread ('inline') or in a writer thread. Also served by
 * bench/profile-endpoint.ts's `floor` preset, to profile the floor as the endpoint is profiled.
 */
export async function serveFloor(tpl: Awaited<ReturnType<typeof template>>, dir: string, name: string, drop: string[], mode: 'inline' | 'thread', design: { minimal?: boolean; appendOnly?: boolean; checkpoints?: 'background' | 'commit' } = {}): Promise<{ url: string; batch: () => string; close: () => Promise<void> }> {
  const file = path.join(dir, `${name.replace(/\W+/g, '-')}.db`);
  fs.copyFileSync(tpl.file, file);
  if (drop.length) {
    const db = await openDatabase({ url: file });
    for (const ix of drop) db.sqlite!.exec(`DROP INDEX ${ix}`);
    await db.close();
  }
  let booker: Booker | null = null;
  let worker: Worker | null = null;
  const waiting = new Map<number, (v: unknown) => void>();
  let seq = 0;
  if (mode === 'inline') {
    const mod = (await import(pathToFileURL(WORKER).href)) as { makeBooker(file: string, opts?: { minimal?: boolean; appendOnly?: boolean; checkpoints?: 'background' | 'commit' }): Booker };
    booker = mod.makeBooker(file, design);
  } else {
    worker = new Worker(WORKER, { workerData: { file, ...design } });
    worker.on('message', ([id, answer]: [number, unknown]) => {
      waiting.get(id)?.(answer);
      waiting.delete(id);
    });
  }
  const app = Fastify({ logger: false });
  app.post('/v1/Logistics/CreateLocalShipment', async (req) => {
    const b = req.body as { PupUid: string; ToUserUid: string; ReferenceNo: string; Dimension: BookRequest['dimension'] };
    const m: BookRequest = { tenantUid: tpl.tenantUid, pupUid: b.PupUid, fromUserUid: tpl.mainUid, toUserUid: b.ToUserUid, referenceNo: b.ReferenceNo, dimension: b.Dimension };
    if (booker) return booker.book(m);
    const id = ++seq;
    return new Promise((resolve) => {
      waiting.set(id, resolve);
      worker!.postMessage([id, m]);
    });
  });
  const url = await app.listen({ host: '127.0.0.1', port: 0 });
  return {
    url,
    batch: () => (booker ? `${(booker.stats.jobs / Math.max(1, booker.stats.batches)).toFixed(1)}` : 'n/a'),
    close: async () => {
      await app.close();
      booker?.close();
      await worker?.terminate();
    },
  };
}

export async function variant(tpl: Awaited<ReturnType<typeof template>>, dir: string, name: string, drop: string[], mode: 'inline' | 'thread', design: { minimal?: boolean; appendOnly?: boolean; checkpoints?: 'background' | 'commit' } = {}): Promise<{ name: string; load: Load; batch: string }> {
  const floor = await serveFloor(tpl, dir, name, drop, mode, design);
  try {
    // warmed up as the endpoint is (shipments.bench.ts warmBookingLoad)
    const l = await warmBookingLoad(floor.url, bookingLoads(tpl.pups, tpl.user), { 'content-type': 'application/json' });
    return { name, load: l, batch: floor.batch() };
  } finally {
    await floor.close();
  }
}

export default async function (): Promise<{ title: string; markdown: string }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-floor-'));
  try {
    const load0 = os.loadavg()[0]!.toFixed(1);
    const tpl = await template(dir);
    const body = bookingBody(tpl.user, tpl.pups[0]!);
    const base = await bareBaseline(body, { connections: CONNECTIONS, duration: DURATION_S });
    // the variants without indexes (what the data model's indexes cost) and the lower bounds of
    // other designs only with BENCH_FLOOR_ALL=1: they answer design questions measured before
    // (docs/benchmarks.md, "Booking floor with every variant"), and keep npm run bench under 10
    // minutes on the slowest host seen
    const all = process.env.BENCH_FLOOR_ALL === '1';
    const rows = [
      await variant(tpl, dir, 'booking SQL on the event-loop thread', [], 'inline'),
      await variant(tpl, dir, 'booking SQL in a writer thread', [], 'thread'),
      ...(all
        ? [
            await variant(tpl, dir, 'on the event-loop thread, without the 9 shipment listing indexes', LISTING_INDEXES, 'inline'),
            await variant(tpl, dir, 'on the event-loop thread, without the 2 access-code indexes', CODE_INDEXES, 'inline'),
            await variant(tpl, dir, 'on the event-loop thread, without both', [...LISTING_INDEXES, ...CODE_INDEXES], 'inline'),
            await variant(tpl, dir, 'in a writer thread, without both', [...LISTING_INDEXES, ...CODE_INDEXES], 'thread'),
          ]
        : []),
      ...(all
        ? [
            await variant(tpl, dir, 'lower bound of a row-based design: the locker taken + one JSON row per booking, event-loop thread', [], 'inline', { minimal: true }),
            await variant(tpl, dir, 'lower bound of a row-based design, in a writer thread', [], 'thread', { minimal: true }),
            await variant(tpl, dir, 'lower bound of a log design: lockers allocated in memory, one JSON row appended per booking, event-loop thread', [], 'inline', { appendOnly: true }),
            await variant(tpl, dir, 'lower bound of a log design, in a writer thread', [], 'thread', { appendOnly: true }),
          ]
        : []),
    ];
    const f = (n: number) => Math.round(n).toLocaleString('en');
    const lines = [
      `${DURATION_S} s per run after 1 s of warm-up (not counted, at PUPs of its own), ${CONNECTIONS} connections, autocannon in a separate process, 500 PUPs x 80 lockers, synchronous=FULL, group commit; load average ${load0} at start (${os.cpus().length} cores). The route has no auth, no validation and no logging; the statements are raw prepared statements (bench/booking-floor-worker.mjs).`,
      '',
      '| variant | req/s | ratio to bare route | p50 / p99 ms | bookings per commit | non-2xx |',
      '|---|---|---|---|---|---|',
      `| bare fastify route | ${f(base.rps)} | 1.00 | ${base.p50} / ${base.p99} | - | ${base.non2xx} |`,
      ...rows.map((r) => `| ${r.name} | ${f(r.load.rps)} | ${(r.load.rps / base.rps).toFixed(2)} | ${r.load.p50} / ${r.load.p99} | ${r.batch} | ${r.load.non2xx} |`),
    ];
    return { title: 'Booking floor: the booking SQL alone on SQLite', markdown: lines.join('\n') };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
