// Read-path throughput of the tenant API over loopback HTTP (autocannon, in a separate process:
// bench/support.ts), as a ratio to a bare fastify JSON route measured in the same run with the same
// connections and duration:
//
// 1. Baseline: a bare fastify POST route that parses a small JSON body and answers a small JSON
//    object (no auth, no validation, no store).
// 2. Each endpoint of ENDPOINTS below (the seven reads of issue 15) on the central service (bearer
//    token check, case-insensitive keys, zod validation, tenant-scoped queries, response schema),
//    on SQLite (the embedded default, synchronous=FULL) and, when reachable, on PostgreSQL.
// 3. The bare route again between every two rows (BENCH_API_BARE_SECONDS, default 2 s): each
//    row's ratio is taken against the mean of the bare runs right before and right after it.
//    Each endpoint gets 1 s of load first, not counted (JIT; PostgreSQL pool connections).
//
// Besides req/s, each row reports the server's CPU time per request (this process; the load
// generator runs in its own): a cost figure that other work on a shared machine disturbs less.
// BENCH_API_SECONDS sets the seconds per row (default 3: the whole bench about a minute).
// Adding an endpoint to the comparison is one line in ENDPOINTS; bench/profile-endpoint.ts
// profiles any of them by name.
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { dropPgSchema } from './cpu-profile';
import { CentralService } from '../packages/central/src/service';
import { loadConfig } from '../packages/central/src/config';
import { createLogger } from '../packages/central/src/logger';
import { demoTenant, bareBaseline, load as loadRun, reachable, type Load } from './support';

const PG_URL = process.env.LOCKER_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const DURATION_S = Number(process.env.BENCH_API_SECONDS ?? 3);
const CONNECTIONS = 16;

export interface Fixture {
  pupUid: string;
  mainAccountUid: string;
}

/**
 * The endpoints measured: name, path and request body (built from the provisioned demo tenant:
 * its first PUP, Central Station, holds 20 lockers of 4 sizes; the tenant manages 2 PUPs).
 * Exported for bench/profile-endpoint.ts, which profiles any of them.
 */
export const ENDPOINTS: { name: string; path: string; body: (f: Fixture) => unknown }[] = [
  { name: 'GetPickUpPoints', path: '/v1/PickupPoints/GetPickUpPoints', body: () => ({ pageNo: 1, pageSize: 50, includeDetails: true }) },
  { name: 'GetPickUpPointAvailability', path: '/v1/PickupPoints/GetPickUpPointAvailability', body: (f) => ({ pageNo: 1, pageSize: 50, pupUid: f.pupUid }) },
  { name: 'GetLockers', path: '/v1/PickupPoints/GetLockers', body: (f) => ({ pageNo: 1, pageSize: 50, pupUid: f.pupUid }) },
  { name: 'GetAvailableLockers', path: '/v1/PickupPoints/GetAvailableLockers', body: (f) => ({ pageNo: 1, pageSize: 50, pupUid: f.pupUid }) },
  { name: 'GetLockerKinds', path: '/v1/PickupPoints/GetLockerKinds', body: (f) => ({ pupUid: f.pupUid }) },
  { name: 'GetAccount', path: '/v1/Account/GetAccount', body: (f) => ({ userUid: f.mainAccountUid }) },
  { name: 'GetAccounts', path: '/v1/Account/GetAccounts', body: () => ({ pageNo: 1, pageSize: 50 }) },
];

function load(url: string, body: string, headers: Record<string, string>, duration = DURATION_S): Promise<Load> {
  const u = new URL(url);
  return loadRun({ url: u.origin, connections: CONNECTIONS, duration, headers: { 'content-type': 'application/json', ...headers }, requests: [{ method: 'POST', path: u.pathname, body }] });
}

function baseline(): Promise<Load> {
  return bareBaseline(JSON.stringify({ pageNo: 1, pageSize: 50, includeDetails: true }), { connections: CONNECTIONS, duration: BARE_S });
}

/** seconds of each bare-route run between two rows (BENCH_API_BARE_SECONDS) */
const BARE_S = Number(process.env.BENCH_API_BARE_SECONDS ?? 2);
/** the stores measured (BENCH_API_ENGINES, comma-separated; default both) */
const ENGINES = (process.env.BENCH_API_ENGINES ?? 'sqlite,postgres').split(',').map((e) => e.trim());
/** PostgreSQL: database.pgReadPipelines (BENCH_API_PG_PIPELINES; default 2 as the service's; 0: every read from the pool, as before) */
const PG_PIPELINES = Number(process.env.BENCH_API_PG_PIPELINES ?? 2);
/** seconds of load on each endpoint before it is measured (not counted) */
const WARMUP_S = 1;

interface Row {
  engine: string;
  name: string;
  load: Load;
  check: string;
  /** the bare route measured right before and right after this row: the row's baseline is their mean */
  bare: [Load, Load];
}

/**
 * The bare route between every two rows: the machine's speed drifts by a factor of two or more
 * within a minute on a shared 2-core machine (docs/benchmarks.md), so each row is compared with
 * the bare route measured right before and right after it, not with one run at each end.
 */
class Baselines {
  private last: Load | null = null;
  readonly all: Load[] = [];
  async before(): Promise<Load> {
    if (!this.last) {
      this.last = await baseline();
      this.all.push(this.last);
    }
    return this.last;
  }
  async after(): Promise<Load> {
    this.last = await baseline();
    this.all.push(this.last);
    return this.last;
  }
}

async function measureEngine(engine: 'sqlite' | 'postgres', bases: Baselines): Promise<Row[]> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-bench-api-'));
  const pgSchema = engine === 'postgres' ? `bench_${crypto.randomBytes(5).toString('hex')}` : undefined;
  const config = loadConfig({
    env: {},
    overrides: { database: { url: engine === 'sqlite' ? path.join(dir, 'bench.db') : PG_URL, pgReadPipelines: PG_PIPELINES }, http: { host: '127.0.0.1', port: 0, rateLimitPerMinute: 0, unauthenticatedRateLimitPerMinute: 0 }, log: { level: 'silent' }, mqtt: { mode: 'off' }, environment: 'staging' },
  });
  const svc = new CentralService({ config, log: createLogger({ level: 'silent' }), pgSchema, startWorkers: false });
  const ctx = await svc.start();
  try {
    const { base, token, pupUid, mainAccountUid } = await demoTenant(svc, ctx);
    // the fresh schema's statistics, as autovacuum would gather them shortly after: otherwise its
    // ANALYZE of the new tables runs during the first PostgreSQL rows
    if (engine === 'postgres') await ctx.db.pool!.query('ANALYZE');
    const fixture: Fixture = { pupUid, mainAccountUid };
    const auth = { authorization: `Bearer ${token}` };
    const rows: Row[] = [];
    for (const ep of ENDPOINTS) {
      const body = JSON.stringify(ep.body(fixture));
      // one checked request first: the figure only counts when the endpoint answers success
      const probe = await fetch(`${base}${ep.path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...auth }, body });
      const answer = (await probe.json().catch(() => null)) as { success?: boolean; error?: string } | null;
      const check = probe.status === 200 && answer?.success === true ? 'ok' : `answered ${probe.status} ${answer?.error ?? ''}`.trim();
      // warm-up, not counted: the JIT, and on PostgreSQL the pool's connections (opened on
      // demand, each preparing its statements): the first row paid for all of that before
      await load(`${base}${ep.path}`, body, auth, WARMUP_S);
      const before = await bases.before();
      const measured = await load(`${base}${ep.path}`, body, auth);
      rows.push({ engine, name: ep.name, load: measured, check, bare: [before, await bases.after()] });
    }
    return rows;
  } finally {
    await svc.stop();
    fs.rmSync(dir, { recursive: true, force: true });
    await dropPgSchema(PG_URL, pgSchema);
  }
}

const fmt = (n: number) => Math.round(n).toLocaleString('en-US');

export default async function apiBench(): Promise<{ title: string; markdown: string }> {
  const bases = new Baselines();
  const rows: Row[] = ENGINES.includes('sqlite') ? await measureEngine('sqlite', bases) : [];
  const pgUrl = new URL(PG_URL);
  const pgOk = ENGINES.includes('postgres') && (await reachable(pgUrl.hostname, Number(pgUrl.port || 5432)));
  if (pgOk) rows.push(...(await measureEngine('postgres', bases)));
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
  const rowBare = (r: Row) => ({ rps: (r.bare[0].rps + r.bare[1].rps) / 2, cpu: (r.bare[0].cpuUsPerReq + r.bare[1].cpuUsPerReq) / 2 });
  const all = bases.all;
  const bare = { rps: mean(all.map((b) => b.rps)), cpu: mean(all.map((b) => b.cpuUsPerReq)), min: Math.min(...all.map((b) => b.rps)), max: Math.max(...all.map((b) => b.rps)), p50: all[0]?.p50 ?? 0, p99: Math.max(...all.map((b) => b.p99)), non2xx: all.reduce((a, b) => a + b.non2xx, 0), errors: all.reduce((a, b) => a + b.errors, 0) };
  const goal = (engine: string) => (engine === 'sqlite' ? 0.3 : 0.2);

  const lines = [
    `autocannon, ${CONNECTIONS} connections, ${DURATION_S} s per row, load generator in a separate process (bench/load-child.mjs; the bare route loaded the same way), loopback HTTP. ` +
      `The bare fastify JSON route runs for ${BARE_S} s between every two rows (${all.length} runs: ${fmt(bare.min)} to ${fmt(bare.max)} req/s, mean ${fmt(bare.rps)}); ` +
      'each row\'s ratio = its requests per second (2xx only) / the mean of the bare runs right before and right after it (column "bare req/s"). ' +
      'Goal (issue 15): >= 0.30 on SQLite, >= 0.20 on PostgreSQL. ' +
      'CPU us/req: CPU time of the server process (user + system) per answered request; CPU ratio = the adjacent bare runs\' CPU per request / the endpoint\'s, ' +
      'the same comparison by cost rather than by throughput (less disturbed by other work on the machine; the load generator runs in its own process).',
    '',
    '| store | endpoint | req/s | bare req/s | ratio to bare route | goal | CPU us/req | bare CPU us/req | CPU ratio | p50 ms | p99 ms | non-2xx | errors | check |',
    '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|',
    `| - | bare fastify JSON route (mean of ${all.length} runs) | ${fmt(bare.rps)} | - | 1.00 | - | ${bare.cpu.toFixed(0)} | - | 1.00 | ${bare.p50} | ${bare.p99} | ${bare.non2xx} | ${bare.errors} | baseline |`,
    ...rows.map((r) => {
      const b = rowBare(r);
      return `| ${r.engine === 'sqlite' ? 'SQLite' : 'PostgreSQL'} | ${r.name} | ${fmt(r.load.rps)} | ${fmt(b.rps)} | ${(r.load.rps / b.rps).toFixed(2)} | ${goal(r.engine).toFixed(2)} | ${r.load.cpuUsPerReq.toFixed(0)} | ${b.cpu.toFixed(0)} | ${(b.cpu / r.load.cpuUsPerReq).toFixed(2)} | ${r.load.p50} | ${r.load.p99} | ${r.load.non2xx} | ${r.load.errors} | ${r.check} |`;
    }),
    '',
    pgOk || !ENGINES.includes('postgres') ? '' : `PostgreSQL not reachable at ${pgUrl.host}: only SQLite measured.`,
  ];
  return { title: 'Tenant API read path (the seven reads of issue 15) vs a bare fastify route', markdown: lines.join('\n') };
}
