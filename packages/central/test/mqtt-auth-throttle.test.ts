// Terminal logins on the embedded broker: scrypt runs on the thread pool, and failed logins are
// throttled (per terminal id and address, per address) with a log line. A burst of bad CONNECTs
// must not stall the HTTP API on the same event loop, and a correct secret still connects.
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import mqtt, { type MqttClient } from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestService, type TestService } from './support/harness';
import { captureLog } from './support/log-capture';
import { EmbeddedBroker } from '../src/mqtt/embedded';
import { createLogger } from '../src/logger';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function tryConnect(url: string, opts: mqtt.IClientOptions): Promise<{ ok: boolean; client: MqttClient; code?: number }> {
  const c = mqtt.connect(url, { reconnectPeriod: 0, connectTimeout: 10_000, ...opts });
  return new Promise((resolve) => {
    c.once('connect', () => resolve({ ok: true, client: c }));
    c.once('error', (e) => {
      c.end(true);
      resolve({ ok: false, client: c, code: (e as { code?: number }).code });
    });
  });
}

describe('embedded broker: terminal login cost and throttling', () => {
  let t: TestService;
  let broker: EmbeddedBroker;
  let lines: any[] = [];
  const clients: MqttClient[] = [];
  beforeAll(async () => {
    t = await createTestService('sqlite');
    const log = captureLog();
    lines = log.entries;
    const sink = log.destination;
    broker = new EmbeddedBroker({ host: '127.0.0.1', port: 0, db: t.ctx.db.kysely, log: createLogger({ level: 'info', destination: sink }), authThrottle: { blockMs: 1500 } });
    await broker.start();
  });
  afterAll(async () => {
    for (const c of clients) c.end(true);
    await broker.stop();
    await t.close();
  });

  it('the secret check runs off the event loop: a burst of bad CONNECTs (throttling off) leaves the loop mostly idle', async () => {
    // distinct wrong secrets (the same one would share a single check), and room for all 30 checks
    // at once (beyond maxPendingLogins a login is refused at once with CONNACK 3, unchecked)
    const free = new EmbeddedBroker({ host: '127.0.0.1', port: 0, db: t.ctx.db.kysely, log: createLogger({ level: 'silent' }), authThrottle: { maxFailuresPerClient: 1e9, maxFailuresPerAddress: 1e9 }, maxPendingLogins: 64 });
    await free.start();
    try {
      const url = free.address()!;
      const elu0 = performance.eventLoopUtilization();
      const burst = Array.from({ length: 30 }, (_, i) => tryConnect(url, { clientId: 'term-a1', username: 'term-a1', password: `wrong-secret-${i}` }));
      await sleep(20);
      const t0 = performance.now();
      const res = await t.app.inject({ method: 'GET', url: '/health' });
      const injectMs = performance.now() - t0;
      const results = await Promise.all(burst);
      const elu = performance.eventLoopUtilization(elu0);
      expect(results.map((r) => r.code)).toEqual(results.map(() => 4)); // every one checked and refused
      expect(free.loginStats().verifierCalls).toBe(30);
      expect(res.statusCode).toBe(200);
      expect(injectMs).toBeLessThan(250);
      // scryptSync on the loop: ~50 ms busy per CONNECT, the loop almost fully busy for the burst
      expect(elu.utilization).toBeLessThan(0.6);
    } finally {
      await free.stop();
    }
  });

  it('a burst of bad CONNECTs does not stall the event loop or the HTTP API; the attacker is throttled, others still connect', async () => {
    const url = broker.address()!;
    const h = monitorEventLoopDelay({ resolution: 5 });
    h.enable();
    const burst = Array.from({ length: 40 }, () => tryConnect(url, { clientId: 'term-a1', username: 'term-a1', password: 'wrong-secret' }));
    await sleep(20);
    const t0 = performance.now();
    const res = await t.app.inject({ method: 'GET', url: '/health' });
    const injectMs = performance.now() - t0;
    const results = await Promise.all(burst);
    h.disable();
    expect(res.statusCode).toBe(200);
    expect(results.every((r) => !r.ok)).toBe(true);
    // synchronous scrypt: ~50 ms of blocked loop per CONNECT, seconds for the burst
    expect(injectMs).toBeLessThan(250);
    expect(h.max / 1e6).toBeLessThan(250);
    // only the first few were checked; the rest refused as throttled (CONNACK 5), with a log line
    expect(results.filter((r) => r.code === 5).length).toBeGreaterThanOrEqual(30);
    const warn = lines.find((l) => l.errorCode === 'AUTH_THROTTLED' && l.terminal === 'term-a1');
    expect(warn).toMatchObject({ ns: 'central.mqtt.broker', remote: '127.0.0.1', msg: expect.stringContaining('too many failed terminal logins') });
    expect(JSON.stringify(lines)).not.toContain('wrong-secret');

    // another terminal from the same address with its right secret still connects
    const b = await tryConnect(url, { clientId: 'term-b1', username: 'term-b1', password: 'terminal-secret-b1' });
    clients.push(b.client);
    expect(b.ok).toBe(true);
    // the blocked id is refused even with the right secret until the block ends, then connects
    expect((await tryConnect(url, { clientId: 'term-a1', username: 'term-a1', password: 'terminal-secret-a1' })).code).toBe(5);
    await sleep(1600);
    const a = await tryConnect(url, { clientId: 'term-a1', username: 'term-a1', password: 'terminal-secret-a1' });
    clients.push(a.client);
    expect(a.ok).toBe(true);
  });
});
