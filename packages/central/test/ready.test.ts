// GET /ready (the container HEALTHCHECK and the compose file's gates): 200 only while the database
// answers and the MQTT bus is up (embedded: listening; external: connected), else 503, in the API
// envelope, naming the failing part but no error text, host, port or URL. /health stays as it was.
import { afterEach, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { createTestService, type TestService } from './support/harness';
import { MOSQUITTO, MOSQUITTO_PASSWD, sleep, startMosquitto, type TestMosquitto } from './support/mosquitto';

const mosquittoAvailable = !!MOSQUITTO && !!MOSQUITTO_PASSWD;

async function ready(app: FastifyInstance) {
  const res = await app.inject({ method: 'GET', url: '/ready' });
  return { status: res.statusCode, body: res.json() as Record<string, unknown>, raw: res.body, type: res.headers['content-type'] };
}

async function waitForStatus(app: FastifyInstance, status: number, ms = 15_000) {
  const start = Date.now();
  for (;;) {
    const r = await ready(app);
    if (r.status === status) return r;
    if (Date.now() - start > ms) throw new Error(`/ready stayed ${r.status} (${r.raw}), expected ${status}`);
    await sleep(100);
  }
}

/** nothing of the service's internals in the answer: only the envelope, a status word and the per-part states */
function expectNoInternals(r: { body: Record<string, unknown>; raw: string }, ...secrets: string[]) {
  expect(Object.keys(r.body).sort()).toEqual(['checks', 'error', 'message', 'status', 'success']);
  expect(r.raw.replace('"error":"InternalError"', '')).not.toMatch(/mqtt:\/\/|postgres:\/\/|127\.0\.0\.1|localhost|\.db\b|error|ECONN|SQLITE|stack|not open/i);
  for (const s of secrets) expect(r.raw).not.toContain(s);
}

describe('GET /ready', () => {
  const open: TestService[] = [];
  const brokers: TestMosquitto[] = [];
  afterEach(async () => {
    for (const t of open.splice(0)) await t.close().catch(() => undefined);
    for (const b of brokers.splice(0)) await b.cleanup();
  });

  it('MQTT off: 200 while the database answers; 503 "database unavailable" once it does not, without the error text; /health unchanged', async () => {
    const t = await createTestService('sqlite', { site: null });
    open.push(t);
    const ok = await ready(t.app);
    expect(ok.status).toBe(200);
    expect(ok.type).toMatch(/^application\/json/);
    expect(ok.body).toEqual({ success: true, error: null, message: null, status: 'ready', checks: { database: 'ok', broker: 'off' } });

    // the store goes away under the running app (a closed SQLite handle: every query throws)
    await t.ctx.db.close();
    const down = await ready(t.app);
    expect(down.status).toBe(503);
    expect(down.body).toEqual({ success: false, error: 'InternalError', message: 'not ready: database unavailable', status: 'not ready', checks: { database: 'unavailable', broker: 'off' } });
    expectNoInternals(down, t.ctx.config.database.url);

    const health = await t.app.inject({ method: 'GET', url: '/health' });
    expect(health.statusCode).toBe(200);
    expect(health.json()).toEqual({ success: true, error: null, message: null, status: 'ok' });
  });

  it('embedded broker: 503 before it listens and after it stops, 200 while it listens', async () => {
    const t = await createTestService('sqlite', { site: null, config: { mqtt: { mode: 'embedded', host: '127.0.0.1', port: 0 } } });
    open.push(t);
    const bus = t.ctx.workers.find((w) => w.name === 'mqtt-embedded')!;
    expect(bus).toBeDefined();

    const before = await ready(t.app); // workers not started yet: the broker does not listen
    expect(before.status).toBe(503);
    expect(before.body).toMatchObject({ success: false, error: 'InternalError', message: 'not ready: broker unavailable', checks: { database: 'ok', broker: 'unavailable' } });
    expectNoInternals(before);

    await bus.start();
    expect((await ready(t.app)).body).toEqual({ success: true, error: null, message: null, status: 'ready', checks: { database: 'ok', broker: 'ok' } });

    await bus.stop();
    const after = await ready(t.app);
    expect(after.status).toBe(503);
    expect(after.body.checks).toEqual({ database: 'ok', broker: 'unavailable' });
  });

  it.skipIf(!mosquittoAvailable && process.env.LOCKER_REQUIRE_SERVICES !== '1')(
    `external broker (a private Mosquitto, deploy/mosquitto.conf): 200 while connected, 503 while the broker is down, 200 again after the reconnect${mosquittoAvailable ? '' : ' (SKIPPED: mosquitto not installed)'}`,
    async () => {
      const broker = await startMosquitto({ users: [['central-1', 'ready-test-secret']] });
      brokers.push(broker);
      const t = await createTestService('sqlite', {
        site: null,
        startWorkers: true,
        config: { mqtt: { mode: 'external', url: broker.url, username: 'central-1', password: 'ready-test-secret' } },
      });
      open.push(t);
      const up = await ready(t.app);
      expect(up.status).toBe(200);
      expect(up.body.checks).toEqual({ database: 'ok', broker: 'ok' });

      await broker.stop();
      const down = await waitForStatus(t.app, 503);
      expect(down.body).toEqual({ success: false, error: 'InternalError', message: 'not ready: broker unavailable', status: 'not ready', checks: { database: 'ok', broker: 'unavailable' } });
      expectNoInternals(down, broker.url, 'ready-test-secret', String(new URL(broker.url).port));
      expect((await t.app.inject({ method: 'GET', url: '/health' })).statusCode).toBe(200);

      await broker.start(); // the client reconnects on its own (every second)
      const again = await waitForStatus(t.app, 200);
      expect(again.body.checks).toEqual({ database: 'ok', broker: 'ok' });
    },
  );

  it('an external broker that is not there at all: 503 (the client never connected)', async () => {
    const t = await createTestService('sqlite', { site: null, config: { mqtt: { mode: 'external', url: 'mqtt://127.0.0.1:1', username: 'central-1', password: 'x' } } });
    open.push(t);
    const r = await ready(t.app);
    expect(r.status).toBe(503);
    expect(r.body.message).toBe('not ready: broker unavailable');
    expectNoInternals(r);
  });
});
