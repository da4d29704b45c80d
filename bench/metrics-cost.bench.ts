// What the Prometheus metrics cost the read path (issue 13: no more than 5 %). Two central
// services on SQLite, identical but for metrics.enabled (on: the per-request histogram is observed
// and the operator listener runs; off: neither), loaded in turn with the same read request
// (GetAccount, the cheapest read, where a fixed per-request cost weighs most; then
// GetPickUpPoints), alternating off/on ROUNDS times so a drift of the machine hits both alike.
// autocannon in a separate process (bench/support.ts). The services are scraped once per "on" run,
// and the histogram must have counted the run's requests (the hook was really on).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CentralService } from '../packages/central/src/service';
import { loadConfig } from '../packages/central/src/config';
import { createLogger } from '../packages/central/src/logger';
import { centralMetrics, requestOutcome, type MetricsServer } from '../packages/central/src/ops/metrics';
import { demoTenant, load as loadRun, type Load } from './support';

const DURATION_S = Number(process.env.BENCH_METRICS_SECONDS ?? 3);
const ROUNDS = Number(process.env.BENCH_METRICS_ROUNDS ?? 3);
const CONNECTIONS = 16;

interface Running {
  base: string;
  auth: Record<string, string>;
  bodies: { name: string; path: string; body: string }[];
  metrics: MetricsServer | null;
  stop(): Promise<void>;
}

async function start(metrics: boolean): Promise<Running> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-bench-metrics-'));
  const config = loadConfig({
    env: {},
    overrides: {
      database: { url: path.join(dir, 'bench.db') },
      http: { host: '127.0.0.1', port: 0, rateLimitPerMinute: 0, unauthenticatedRateLimitPerMinute: 0 },
      log: { level: 'silent' },
      mqtt: { mode: 'off' },
      environment: 'staging',
      metrics: { enabled: metrics, host: '127.0.0.1', port: 0 },
    },
  });
  const svc = new CentralService({ config, log: createLogger({ level: 'silent' }), startWorkers: false });
  const ctx = await svc.start();
  const server = (ctx.workers.find((w) => w.name === 'metrics') as MetricsServer | undefined) ?? null;
  await server?.start();
  const { base, token, mainAccountUid } = await demoTenant(svc, ctx);
  return {
    base,
    auth: { authorization: `Bearer ${token}` },
    bodies: [
      { name: 'GetAccount', path: '/v1/Account/GetAccount', body: JSON.stringify({ userUid: mainAccountUid }) },
      { name: 'GetPickUpPoints', path: '/v1/PickupPoints/GetPickUpPoints', body: JSON.stringify({ pageNo: 1, pageSize: 50, includeDetails: true }) },
    ],
    metrics: server,
    async stop() {
      await server?.stop();
      await svc.stop();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

function run(s: Running, b: Running['bodies'][number]): Promise<Load> {
  return loadRun({ url: s.base, connections: CONNECTIONS, duration: DURATION_S, headers: { 'content-type': 'application/json', ...s.auth }, requests: [{ method: 'POST', path: b.path, body: b.body }] });
}

/** requests the "on" service's histogram counted for a route */
async function counted(s: Running, route: string): Promise<number> {
  const text = await (await fetch(`${s.metrics!.address()}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith('locker_http_request_duration_seconds_count{') && l.includes(`route="${route}"`) && l.includes('outcome="success"'));
  return line ? Number(line.split(' ').pop()) : 0;
}

const fmt = (n: number) => Math.round(n).toLocaleString('en-US');

/** CPU time of what the request hook adds per request (app.ts onResponse): the outcome and one histogram observation, in microseconds. */
function hookCost(): number {
  const routes = ['/v1/Account/GetAccount', '/v1/PickupPoints/GetPickUpPoints', '/v1/Logistics/GetShipments'];
  const codes = new WeakMap<object, string>();
  const n = 1_000_000;
  const c0 = process.cpuUsage();
  for (let i = 0; i < n; i++) {
    const reply = { statusCode: 200 };
    centralMetrics.httpRequestDuration.observe({ method: 'POST', route: routes[i % 3]!, outcome: requestOutcome(reply.statusCode, codes.get(reply)) }, 0.001 * (i % 50));
  }
  const c = process.cpuUsage(c0);
  centralMetrics.httpRequestDuration.reset();
  return (c.user + c.system) / n;
}


export default async function metricsCostBench(): Promise<{ title: string; markdown: string }> {
  const load0 = os.loadavg()[0];
  const hookUs = hookCost();
  const off = await start(false);
  const on = await start(true);
  const table: string[] = [];
  const summary: string[] = [];
  const offMean = new Map<string, number>();
  try {
    for (let i = 0; i < off.bodies.length; i++) {
      const bOff = off.bodies[i]!;
      const bOn = on.bodies[i]!;
      const offRuns: Load[] = [];
      const onRuns: Load[] = [];
      for (let r = 0; r < ROUNDS; r++) {
        offRuns.push(await run(off, bOff));
        const before = await counted(on, bOn.path);
        const l = await run(on, bOn);
        const seen = (await counted(on, bOn.path)) - before;
        if (seen < l.rps * DURATION_S * 0.9) throw new Error(`metrics on: the histogram counted ${seen} of about ${Math.round(l.rps * DURATION_S)} requests`);
        onRuns.push(l);
      }
      const mean = (xs: Load[]) => xs.reduce((a, x) => a + x.rps, 0) / xs.length;
      const mOff = mean(offRuns);
      const mOn = mean(onRuns);
      offMean.set(bOff.name, mOff);
      table.push(`| ${bOff.name} | ${offRuns.map((x) => fmt(x.rps)).join(' / ')} | ${onRuns.map((x) => fmt(x.rps)).join(' / ')} | ${fmt(mOff)} | ${fmt(mOn)} | ${(((mOn - mOff) / mOff) * 100).toFixed(1)} % |`);
      summary.push(`${bOff.name} ${(((mOn - mOff) / mOff) * 100).toFixed(1)} %`);
      if ([...offRuns, ...onRuns].some((x) => x.non2xx || x.errors)) table.push(`| (${bOff.name}: non-2xx or errors in a run) | | | | | |`);
    }
  } finally {
    await on.stop();
    await off.stop();
  }
  return {
    title: 'Metrics cost on the read path (metrics.enabled on vs off)',
    markdown: [
      `Two central services on SQLite, identical but for \`metrics.enabled\`; autocannon in a separate process, ${CONNECTIONS} connections, ${DURATION_S} s per run, off and on alternating, ${ROUNDS} rounds per endpoint. ` +
        'The "on" runs were checked: the request histogram counted their requests.',
      '',
      '| endpoint | off req/s (each run) | on req/s (each run) | off mean | on mean | change with metrics on |',
      '|---|---|---|---:|---:|---:|',
      ...table,
      '',
      `The request hook's own work (outcome + one histogram observation with its labels, 1,000,000 times): ${(hookUs * 1000).toFixed(0)} ns of CPU per request, ${((hookUs / (1e6 / offMean.get('GetAccount')!)) * 100).toFixed(2)} % of a GetAccount request (${(1e6 / offMean.get('GetAccount')!).toFixed(0)} us each at the "off" rate on the server's one thread).`,
      '',
      `Throughput with metrics on: ${summary.join(', ')} (negative: slower). Load average (1 min) at the start ${load0.toFixed(2)}, at the end ${os.loadavg()[0].toFixed(2)} on ${os.cpus().length} cores.`,
    ].join('\n'),
  };
}
