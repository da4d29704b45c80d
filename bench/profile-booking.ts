// A CPU profile of the real CreateLocalShipment endpoint under the shipments bench's load (SQLite,
// synchronous=FULL, 500 PUPs x 80 lockers, autocannon in a separate process), to see where a
// booking's time goes. Not part of `npm run bench` (it measures no ratio):
//
//   npx tsx bench/profile-booking.ts            # 5 s of load, prints the top functions by self time
//   BENCH_PROFILE_SECONDS=10 BENCH_PROFILE_OUT=/tmp/booking.cpuprofile npx tsx bench/profile-booking.ts
//
// The .cpuprofile opens in Chrome DevTools (Performance) or speedscope. `run` and `all` are
// better-sqlite3's native statement calls (a COMMIT is a `run`); `(idle)` is the event loop
// waiting for the load generator.
import fs from 'node:fs';
import inspector from 'node:inspector/promises';
import os from 'node:os';
import path from 'node:path';
import { CentralService } from '../packages/central/src/service';
import { loadConfig } from '../packages/central/src/config';
import { createLogger } from '../packages/central/src/logger';
import { applyProvisioning } from '../packages/central/src/provisioning/apply';
import { toDbTime } from '../packages/central/src/ids';
import { provision } from './shipments.bench';
import { load } from './support';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string };
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const seconds = Number(process.env.BENCH_PROFILE_SECONDS ?? 5);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-profile-'));
const config = loadConfig({
  env: {},
  overrides: { database: { url: path.join(dir, 'central.db'), sqliteSynchronous: 'FULL' }, log: { level: 'silent' }, mqtt: { mode: 'off' }, environment: 'staging', http: { host: '127.0.0.1', port: 0, rateLimitPerMinute: 0, unauthenticatedRateLimitPerMinute: 0 } },
});
const svc = new CentralService({ config, log: createLogger({ level: 'silent' }), startWorkers: false });
const ctx = await svc.start();
try {
  const now = toDbTime(new Date());
  const site = { pickupPoints: [], terminals: [], tenants: [{ clientId: 'bench', clientSecret: 'bench-secret-0123456789', name: 'Bench', mainAccount: { email: 'bench-dispatch@example.test', firstName: 'B', lastName: 'D' }, pickupPoints: [] }] };
  await applyProvisioning(ctx.db.kysely, site, ctx.clock);
  const tenant = await ctx.db.kysely.selectFrom('tenants').select('uid').where('client_id', '=', 'bench').executeTakeFirstOrThrow();
  const { pups, user } = await provision(ctx.db, now, tenant.uid);
  // callbacks registered: every booking queues a pending outbox row, as in the shipments bench
  await ctx.db.kysely.insertInto('callback_configs').values({ tenant_uid: tenant.uid, url: 'http://127.0.0.1:9/callbacks', auth_type: 'HMAC', auth_key: 'k'.repeat(64), created_at: now, updated_at: now }).execute();
  const url = await svc.listen();
  const headers = { 'content-type': 'application/json', authorization: `Bearer ${ctx.tokens.issue(tenant.uid).token}` };
  const body = (p: string) => JSON.stringify({ ToUserUid: user, PupUid: p, Dimension: { width: 30, height: 8, length: 50 }, AllowLargerLockers: true, AllowOverflowLockers: false, ReferenceNo: 'bench' });
  const requests = pups.map((p) => ({ method: 'POST' as const, path: '/v1/Logistics/CreateLocalShipment', body: body(p) }));

  const session = new inspector.Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.setSamplingInterval', { interval: 100 });
  await session.post('Profiler.start');
  const r = await load({ url, connections: 64, duration: seconds, headers, requests });
  const { profile } = (await session.post('Profiler.stop')) as unknown as { profile: Profile };
  session.disconnect();
  console.log(`${Math.round(r.rps)} bookings/s (non-2xx ${r.non2xx}, p50 ${r.p50} ms, p99 ${r.p99} ms) while profiling`);
  if (process.env.BENCH_PROFILE_OUT) fs.writeFileSync(process.env.BENCH_PROFILE_OUT, JSON.stringify(profile));

  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map<string, number>();
  let total = 0;
  profile.samples.forEach((id, i) => {
    const f = byId.get(id)!.callFrame;
    const key = `${f.functionName || '(anonymous)'} ${f.url ? f.url.split('/').slice(-2).join('/') : ''}`.trim();
    const dt = profile.timeDeltas[i] ?? 0;
    self.set(key, (self.get(key) ?? 0) + dt);
    total += dt;
  });
  console.log('\nself time   function');
  for (const [k, v] of [...self].sort((a, b) => b[1] - a[1]).slice(0, 30)) console.log(`${((v / total) * 100).toFixed(1).padStart(6)} %   ${k}`);
} finally {
  await svc.stop();
  fs.rmSync(dir, { recursive: true, force: true });
}
