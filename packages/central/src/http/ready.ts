// GET /ready: may this instance take traffic? The container HEALTHCHECK (Dockerfile), the compose
// file's depends_on gates and load balancers ask it. `/health` only says the process answers HTTP;
// `/ready` also asks the database a trivial query and checks the MQTT bus: the embedded broker
// listens, or the client of an external broker is connected. 200 or 503 in the API envelope; the
// answer names the failing part only (never an error text, a host name or a URL: those go to the
// log, at most once per change of state).
import type { FastifyInstance } from 'fastify';
import { sql } from 'kysely';
import type { AppContext } from '../context';

/** How long the database may take to answer `select 1` before the instance counts as not ready. */
export const READY_DB_TIMEOUT_MS = 2000;

export type CheckState = 'ok' | 'unavailable' | 'off';

export interface Readiness {
  ready: boolean;
  checks: { database: CheckState; broker: CheckState };
}

async function databaseAnswers(ctx: AppContext, timeoutMs: number): Promise<{ ok: boolean; err?: string }> {
  let timer: NodeJS.Timeout | undefined;
  try {
    const probe = sql`select 1 as ok`.execute(ctx.db.kysely).then(() => ({ ok: true }));
    const timeout = new Promise<{ ok: boolean; err: string }>((resolve) => {
      timer = setTimeout(() => resolve({ ok: false, err: `no answer within ${timeoutMs} ms` }), timeoutMs);
    });
    return await Promise.race([probe, timeout]);
  } catch (err) {
    return { ok: false, err: (err as Error).message };
  } finally {
    clearTimeout(timer);
  }
}

/** The readiness of one instance; `log` gets the reasons (the HTTP answer does not). */
export async function readiness(ctx: AppContext, timeoutMs = READY_DB_TIMEOUT_MS): Promise<Readiness & { reasons: string[] }> {
  const reasons: string[] = [];
  const db = await databaseAnswers(ctx, timeoutMs);
  if (!db.ok) reasons.push(`database: ${db.err}`);
  let broker: CheckState = 'off';
  if (ctx.bus) {
    broker = ctx.bus.connected() ? 'ok' : 'unavailable';
    if (broker !== 'ok') reasons.push(ctx.bus.kind === 'embedded' ? 'embedded MQTT broker not listening' : 'not connected to the external MQTT broker');
  }
  const checks = { database: db.ok ? ('ok' as const) : ('unavailable' as const), broker };
  return { ready: db.ok && broker !== 'unavailable', checks, reasons };
}

export function readyRoutes(app: FastifyInstance, ctx: AppContext) {
  let lastLogged = '';
  app.get('/ready', { schema: { hide: true } }, async (_req, reply) => {
    const r = await readiness(ctx);
    const state = r.reasons.join('; ');
    if (state !== lastLogged) {
      lastLogged = state;
      if (r.ready) ctx.log.info({ ns: 'central.ready' }, 'ready');
      else ctx.log.warn({ ns: 'central.ready', reasons: r.reasons }, 'not ready');
    }
    if (r.ready) return reply.code(200).send({ success: true, error: null, message: null, status: 'ready', checks: r.checks });
    const failing = Object.entries(r.checks)
      .filter(([, v]) => v === 'unavailable')
      .map(([k]) => k)
      .join(' and ');
    return reply.code(503).send({ success: false, error: 'InternalError', message: `not ready: ${failing} unavailable`, status: 'not ready', checks: r.checks });
  });
}
