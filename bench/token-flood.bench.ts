// Authenticated API latency during a flood of wrong client secrets against /connect/token
// (issue 12; docs/api.md, "Throttling and limits"). Each wrong secret costs one scrypt (about
// 25 ms of CPU); before the fix it ran synchronously on the event loop, so a few connections of
// wrong secrets stalled every other request. Now scrypt runs on the thread pool with bounded
// concurrency and a queue limit (beyond it: 503 at once, no scrypt), and failed attempts are
// throttled per client id and address and per address.
//
// Rows (SQLite, the embedded default; the per-tenant request limit is off here so the measured
// client is never answered 429 itself):
//   1. quiet: GetPickUpPoints with a valid token, no flood;
//   2. flood, failure throttles off: 32 connections of wrong secrets for one client id, with the
//      per-address throttles and request limits off, as a flood from many addresses would see them
//      (only the bounded verifier protects the service);
//   3. flood, default settings: the same flood from one address with every default on.
// The measured client runs MEASURE_CONNECTIONS connections of GetPickUpPoints while the flood runs.
//
// BENCH_TOKEN_FLOOD_LEGACY=1 runs rows 1 and 2 against code from before the fix (which has none
// of the new settings): `git archive <commit> | tar -x -C /tmp/old`, copy this file and
// bench/support.ts, bench/load-child.mjs into it, then `npx tsx bench/run.ts token-flood` there.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CentralService } from '../packages/central/src/service';
import { loadConfig } from '../packages/central/src/config';
import { createLogger } from '../packages/central/src/logger';
import { demoTenant, load, type Load } from './support';

const DURATION_S = Number(process.env.BENCH_TOKEN_FLOOD_SECONDS ?? 10);
const FLOOD_CONNECTIONS = Number(process.env.BENCH_TOKEN_FLOOD_CONNECTIONS ?? 32);
const MEASURE_CONNECTIONS = 4;
const LEGACY = process.env.BENCH_TOKEN_FLOOD_LEGACY === '1';

type Mode = 'quiet' | 'flood-unthrottled' | 'flood-defaults';

interface Row {
  mode: Mode;
  api: Load;
  flood: Load | null;
  stats: { scrypt: number; cacheHits: number; busy: number } | null;
}

function overrides(mode: Mode, dbUrl: string): Record<string, unknown> {
  const base = { database: { url: dbUrl }, http: { host: '127.0.0.1', port: 0, rateLimitPerMinute: 0 }, log: { level: 'silent' }, mqtt: { mode: 'off' }, environment: 'staging' };
  if (LEGACY) return base;
  if (mode === 'flood-defaults') return base;
  return {
    ...base,
    http: { ...base.http, unauthenticatedRateLimitPerMinute: 0 },
    throttle: { tokenMaxFailuresPerClient: 0, tokenMaxFailuresPerAddress: 0 },
  };
}

async function measure(mode: Mode): Promise<Row> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-bench-flood-'));
  const config = loadConfig({ env: {}, overrides: overrides(mode, path.join(dir, 'bench.db')) as never });
  const svc = new CentralService({ config, log: createLogger({ level: 'silent' }), startWorkers: false });
  const ctx = await svc.start();
  try {
    const { base, token, clientId } = await demoTenant(svc, ctx);
    const apiBody = JSON.stringify({ pageNo: 1, pageSize: 50, includeDetails: true });
    const probe = await fetch(`${base}/v1/PickupPoints/GetPickUpPoints`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` }, body: apiBody });
    if (probe.status !== 200) throw new Error(`GetPickUpPoints answered ${probe.status}`);
    const measured = () =>
      load({
        url: base,
        connections: MEASURE_CONNECTIONS,
        duration: DURATION_S,
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        requests: [{ method: 'POST', path: '/v1/PickupPoints/GetPickUpPoints', body: apiBody }],
      });
    if (mode === 'quiet') return { mode, api: await measured(), flood: null, stats: null };
    const floodBody = new URLSearchParams({ grant_type: 'client_credentials', client_id: clientId, client_secret: 'wrong-secret-0123456789' }).toString();
    const flood = load({
      url: base,
      connections: FLOOD_CONNECTIONS,
      duration: DURATION_S + 2,
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      requests: [{ method: 'POST', path: '/connect/token', body: floodBody }],
    });
    await new Promise((r) => setTimeout(r, 1000)); // the flood is under way before measuring
    const api = await measured();
    const f = await flood;
    const guard = (svc.app as unknown as { tokenGuard?: { verifier: { stats: Row['stats'] } } }).tokenGuard;
    return { mode, api, flood: f, stats: guard ? { ...guard.verifier.stats! } : null };
  } finally {
    await svc.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
const LABEL: Record<Mode, string> = {
  quiet: 'no flood',
  'flood-unthrottled': `${FLOOD_CONNECTIONS}-connection wrong-secret flood, failure throttles and request limits off (as from many addresses)`,
  'flood-defaults': `${FLOOD_CONNECTIONS}-connection wrong-secret flood from one address, default settings`,
};

export default async function tokenFloodBench(): Promise<{ title: string; markdown: string }> {
  const modes: Mode[] = LEGACY ? ['quiet', 'flood-unthrottled'] : ['quiet', 'flood-unthrottled', 'flood-defaults'];
  const rows: Row[] = [];
  for (const m of modes) rows.push(await measure(m));
  const lines = [
    `SQLite, loopback HTTP, autocannon in separate processes: ${MEASURE_CONNECTIONS} connections of GetPickUpPoints (valid token) for ${DURATION_S} s, ` +
      `while ${FLOOD_CONNECTIONS} connections send wrong secrets for one client id to /connect/token. ${LEGACY ? 'Code BEFORE the fix (scrypt synchronous on the event loop).' : 'Code with the fix.'}`,
    '',
    '| scenario | API req/s | API p50 ms | API p99 ms | API non-2xx | flood answers/s | flood 2xx | scrypt runs | refused busy (503) |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...rows.map((r) => {
      const floodRate = r.flood ? fmt((r.flood.ok + r.flood.non2xx) / (DURATION_S + 2)) : '-';
      return `| ${LABEL[r.mode]} | ${fmt(r.api.rps)} | ${r.api.p50} | ${r.api.p99} | ${r.api.non2xx} | ${floodRate} | ${r.flood ? r.flood.ok : '-'} | ${r.stats ? fmt(r.stats.scrypt) : '-'} | ${r.stats ? fmt(r.stats.busy) : '-'} |`;
    }),
  ];
  return { title: `Authenticated API latency during a /connect/token wrong-secret flood${LEGACY ? ' (before the fix)' : ''}`, markdown: lines.join('\n') };
}
