// Shared pieces of the HTTP benchmarks (api.bench.ts, shipments.bench.ts):
//
// - load(): autocannon in a CHILD PROCESS (bench/load-child.mjs). The server under test runs in
//   this process; the load generator must not share its process (an in-process autocannon runs on
//   the server's event loop, and even a worker thread shares the process's V8 platform and GC
//   threads). On a 2-core machine server and load generator then each own one core.
// - bareBaseline(): the bare fastify route every ratio is taken against, measured by the very same
//   load() (same connections, duration, body size, separate process).
// - reachable(): is a TCP endpoint (PostgreSQL) up.
// - demoTenant(): the demo site provisioned into a started service, listening, with a tenant token.
import { execFile } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Fastify from 'fastify';
import type { AppContext } from '../packages/central/src/context';
import type { CentralService } from '../packages/central/src/service';
import { applyProvisioning, parseProvisioning, readProvisioningFile } from '../packages/central/src/provisioning/apply';
import { systemClock } from '../packages/central/src/clock';
import { DEMO_SITE } from '../packages/central/src/cli';

const CHILD = path.join(path.dirname(fileURLToPath(import.meta.url)), 'load-child.mjs');

export interface LoadRequest {
  method: 'POST' | 'GET';
  path: string;
  body?: string;
}

export interface LoadOptions {
  /** base URL (http://host:port) */
  url: string;
  connections: number;
  /** seconds */
  duration: number;
  headers: Record<string, string>;
  /** requests cycled through on every connection */
  requests: LoadRequest[];
}

export interface Load {
  /** 2xx responses per second */
  rps: number;
  ok: number;
  non2xx: number;
  errors: number;
  p50: number;
  p99: number;
  /**
   * CPU time of THIS process (the server under test, when it runs here as in the API benches) per
   * answered request, in microseconds: user + system over the load. Less sensitive than req/s to
   * other work on a shared machine (it counts what a request costs, not what it was given).
   */
  cpuUsPerReq: number;
}

export function load(o: LoadOptions): Promise<Load> {
  const opts = { url: o.url, connections: o.connections, duration: o.duration, headers: o.headers, requests: o.requests };
  return new Promise((resolve, reject) => {
    const cpu0 = process.cpuUsage();
    const child = execFile(process.execPath, [CHILD], { maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) => {
      const cpu = process.cpuUsage(cpu0);
      if (err) return reject(new Error(`load generator failed: ${err.message} ${stderr}`));
      const r = JSON.parse(stdout.trim().split('\n').pop()!) as { ok: number; non2xx: number; errors: number; timeouts: number; duration: number; p50: number; p99: number };
      const answered = r.ok + r.non2xx;
      resolve({ rps: r.ok / (r.duration || o.duration), ok: r.ok, non2xx: r.non2xx, errors: r.errors + r.timeouts, p50: r.p50, p99: r.p99, cpuUsPerReq: answered ? (cpu.user + cpu.system) / answered : 0 });
    });
    child.stdin!.end(JSON.stringify(opts));
  });
}

/**
 * The baseline: a bare fastify POST route that parses the JSON body and answers a small JSON
 * object (no auth, no validation, no store), loaded exactly like the routes under test.
 */
export async function bareBaseline(body: string, o: Omit<LoadOptions, 'url' | 'requests' | 'headers'>): Promise<Load> {
  const app = Fastify({ logger: false });
  app.post('/v1/Bare', async (req) => ({ success: true, error: null, message: null, echo: (req.body as { pageNo?: unknown })?.pageNo ?? null }));
  const url = await app.listen({ host: '127.0.0.1', port: 0 });
  try {
    return await load({ ...o, url, headers: { 'content-type': 'application/json' }, requests: [{ method: 'POST', path: '/v1/Bare', body }] });
  } finally {
    await app.close();
  }
}

export function reachable(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect({ host, port });
    const done = (ok: boolean) => {
      s.destroy();
      resolve(ok);
    };
    s.setTimeout(1000, () => done(false));
    s.once('connect', () => done(true));
    s.once('error', () => done(false));
  });
}

/**
 * Provisions the demo site into a started service, starts its HTTP listener and gets a token of
 * the site's first tenant: what every API bench needs before it loads an endpoint.
 */
export async function demoTenant(svc: CentralService, ctx: AppContext): Promise<{ base: string; token: string; clientId: string; pupUid: string; mainAccountUid: string }> {
  const site = parseProvisioning(readProvisioningFile(DEMO_SITE));
  await applyProvisioning(ctx.db.kysely, site, systemClock);
  const base = await svc.listen();
  const tenant = site.tenants[0]!;
  const tokRes = await fetch(`${base}/connect/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'client_credentials', client_id: tenant.clientId, client_secret: tenant.clientSecret, scope: 'integration_api' }),
  });
  const token = ((await tokRes.json()) as { access_token: string }).access_token;
  const row = await ctx.db.kysely.selectFrom('tenants').select('main_account_uid').where('client_id', '=', tenant.clientId).executeTakeFirstOrThrow();
  return { base, token, clientId: tenant.clientId, pupUid: tenant.pickupPoints[0]!, mainAccountUid: row.main_account_uid };
}
