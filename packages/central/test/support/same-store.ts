// Opens another CentralService on the store of an existing test service: for restart tests (stop
// the first with `t.svc.stop()`, open a new one here) and for several instances sharing one
// database. The first TestService's close() still removes the store (its service stop is a no-op
// once stopped), so close the instances opened here first, then the original.
import type { FastifyInstance } from 'fastify';
import { loadConfig, type ConfigInput } from '../../src/config';
import { CentralService } from '../../src/service';
import { ManualClock } from '../../src/clock';
import { createLogger } from '../../src/logger';
import type { AppContext } from '../../src/context';
import { apiClient, type TestService } from './harness';
import { TENANT_A, TENANT_B } from './fixtures';

export interface SameStoreService {
  svc: CentralService;
  app: FastifyInstance;
  ctx: AppContext;
  clock: ManualClock;
  token(clientId?: string): Promise<string>;
  post(path: string, body: unknown, token?: string | null): Promise<{ status: number; body: any; headers: Record<string, unknown> }>;
  close(): Promise<void>;
}

/** The PostgreSQL schema the service's pool works in (null on SQLite). */
export async function storeSchema(ctx: AppContext): Promise<string | null> {
  if (ctx.db.engine !== 'postgres') return null;
  const r = await ctx.db.pool!.query('select current_schema() as s');
  return r.rows[0].s as string;
}

const SECRETS: Record<string, string> = { [TENANT_A.clientId]: TENANT_A.clientSecret, [TENANT_B.clientId]: TENANT_B.clientSecret };

export async function openSameStore(
  t: TestService,
  opts: { clock?: ManualClock; config?: ConfigInput; startWorkers?: boolean; pgSchema?: string | null } = {},
): Promise<SameStoreService> {
  const pgSchema = opts.pgSchema !== undefined ? opts.pgSchema : await storeSchema(t.ctx);
  const base = t.ctx.config;
  const config = loadConfig({ env: {}, overrides: { ...(base as ConfigInput), ...(opts.config ?? {}), database: base.database, mqtt: { ...base.mqtt, mode: 'off' } } });
  const clock = opts.clock ?? t.clock;
  const svc = new CentralService({ config, clock, log: createLogger({ level: config.log.level }), pgSchema: pgSchema ?? undefined, startWorkers: opts.startWorkers ?? false });
  const ctx = await svc.start();
  const app = svc.app;
  const api: SameStoreService = {
    svc,
    app,
    ctx,
    clock,
    ...apiClient(app, ctx, new Map(Object.entries(SECRETS))),
    async close() {
      await svc.stop();
    },
  };
  return api;
}
