// Test harness for the central service: builds a real service on a real store (a SQLite file in a
// temp folder, or PostgreSQL in a schema of its own), provisions a site, and gives tokens and a
// small client over fastify's inject(). Contract suites run once per engine with describeEngines.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import crypto from 'node:crypto';
import pg from 'pg';
import { describe, inject } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { loadConfig, type ConfigInput } from '../../src/config';
import { CentralService } from '../../src/service';
import { ManualClock } from '../../src/clock';
import { createLogger } from '../../src/logger';
import { applyProvisioning } from '../../src/provisioning/apply';
import type { ProvisioningInput } from '../../src/provisioning/schema';
import type { AppContext } from '../../src/context';
import type { TerminalGateway } from '../../src/terminals/gateway';
import { testSite } from './fixtures';

export type EngineName = 'sqlite' | 'postgres';

export function pgUrl(): string | null {
  return inject('pgUrl');
}

/** Runs the suite once per storage engine; the PostgreSQL run is skipped (visibly) without a server. */
export function describeEngines(name: string, fn: (engine: EngineName) => void) {
  describe(`${name} [sqlite]`, () => fn('sqlite'));
  const url = pgUrl();
  if (url) describe(`${name} [postgres]`, () => fn('postgres'));
  else describe.skip(`${name} [postgres] (SKIPPED: PostgreSQL not reachable)`, () => fn('postgres'));
}

export interface TestServiceOptions {
  config?: ConfigInput;
  clock?: ManualClock;
  terminals?: TerminalGateway;
  site?: ProvisioningInput | null;
  startWorkers?: boolean;
}

export interface TestService {
  engine: EngineName;
  /** the PostgreSQL schema of this service (undefined on SQLite): a second service on the same store needs it */
  pgSchema?: string;
  svc: CentralService;
  app: FastifyInstance;
  ctx: AppContext;
  clock: ManualClock;
  /** obtains a token for a provisioned client (the fixture's secrets) */
  token(clientId?: string): Promise<string>;
  /** POST a JSON body to a /v1/ path with a token */
  post(path: string, body: unknown, token?: string | null): Promise<{ status: number; body: any; headers: Record<string, unknown> }>;
  provision(site: ProvisioningInput): ReturnType<typeof applyProvisioning>;
  close(): Promise<void>;
}

export async function createTestService(engine: EngineName, opts: TestServiceOptions = {}): Promise<TestService> {
  const clock = opts.clock ?? new ManualClock('2026-03-01T10:00:00.000Z');
  let dbUrl: string;
  let cleanup: () => Promise<void>;
  let pgSchema: string | undefined;
  if (engine === 'sqlite') {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-test-'));
    dbUrl = path.join(dir, 'central.db');
    cleanup = async () => fs.rmSync(dir, { recursive: true, force: true });
  } else {
    const url = pgUrl();
    if (!url) throw new Error('PostgreSQL not reachable');
    dbUrl = url;
    pgSchema = `t_${crypto.randomBytes(6).toString('hex')}`;
    cleanup = async () => {
      const c = new pg.Client({ connectionString: url });
      await c.connect();
      await c.query(`DROP SCHEMA IF EXISTS ${pgSchema} CASCADE`);
      await c.end();
    };
  }
  const config = loadConfig({
    env: {},
    overrides: {
      ...opts.config,
      // request limits and brute-force throttles off unless a test sets them (suites send many
      // requests, wrong secrets and wrong PINs from one address within a minute of a manual clock)
      http: { rateLimitPerMinute: 0, unauthenticatedRateLimitPerMinute: 0, ...(opts.config?.http ?? {}) },
      throttle: { tokenMaxFailuresPerClient: 0, tokenMaxFailuresPerAddress: 0, pinMaxFailuresPerLocker: 0, pinMaxFailuresPerPup: 0, pinMaxFailuresPerTenant: 0, ...(opts.config?.throttle ?? {}) },
      database: { url: dbUrl, poolSize: 5, ...(opts.config?.database ?? {}) },
      log: { level: 'silent', ...(opts.config?.log ?? {}) },
      mqtt: { mode: 'off', ...(opts.config?.mqtt ?? {}) },
      environment: opts.config?.environment ?? 'staging',
    },
  });
  const svc = new CentralService({ config, clock, log: createLogger({ level: config.log.level }), terminals: opts.terminals, pgSchema, startWorkers: opts.startWorkers ?? false });
  const ctx = await svc.start();
  const site = opts.site === undefined ? testSite() : opts.site;
  if (site) await applyProvisioning(ctx.db.kysely, site, clock);
  const app = svc.app;
  const secrets = new Map<string, string>();
  for (const t of (site?.tenants ?? []) as { clientId: string; clientSecret: string }[]) secrets.set(t.clientId, t.clientSecret);
  const client = apiClient(app, ctx, secrets);
  const svcApi: TestService = {
    engine,
    pgSchema,
    svc,
    app,
    ctx,
    clock,
    ...client,
    async provision(s) {
      const r = await applyProvisioning(ctx.db.kysely, s, clock);
      app.principals.clear();
      return r;
    },
    async close() {
      await svc.stop();
      await cleanup();
    },
  };
  return svcApi;
}

/** A small client of a test app over inject(): tokens for provisioned clients, JSON POSTs. */
export function apiClient(app: FastifyInstance, ctx: AppContext, secrets: ReadonlyMap<string, string>) {
  const tokens = new Map<string, string>();
  const client = {
    async token(clientId = 'tenant-a'): Promise<string> {
      const cached = tokens.get(clientId);
      if (cached && ctx.tokens.verify(cached)) return cached;
      const res = await app.inject({
        method: 'POST',
        url: '/connect/token',
        payload: new URLSearchParams({ grant_type: 'client_credentials', client_id: clientId, client_secret: secrets.get(clientId) ?? '', scope: 'integration_api' }).toString(),
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
      });
      if (res.statusCode !== 200) throw new Error(`token for ${clientId} failed: ${res.statusCode} ${res.body}`);
      const t = res.json().access_token as string;
      tokens.set(clientId, t);
      return t;
    },
    async post(p: string, body: unknown, token?: string | null): Promise<{ status: number; body: any; headers: Record<string, unknown> }> {
      const tok = token === undefined ? await client.token() : token;
      const res = await app.inject({
        method: 'POST',
        url: p,
        payload: body === undefined ? undefined : JSON.stringify(body),
        headers: { 'content-type': 'application/json', ...(tok ? { authorization: `Bearer ${tok}` } : {}) },
      });
      let parsed: any;
      try {
        parsed = res.json();
      } catch {
        parsed = res.body;
      }
      return { status: res.statusCode, body: parsed, headers: res.headers as Record<string, unknown> };
    },
  };
  return client;
}
