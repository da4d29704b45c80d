// Terminal logins on the embedded broker under a reconnect storm: a bounded number of secret
// checks in progress (beyond: CONNACK 3 at once, no scrypt), no check for a login whose connection
// already closed, a retry while its check is pending is neither refused nor checked again, a
// reconnect costs no scrypt, and a storm of a few hundred terminals through mqtt.js all get in.
// scrypt calls are counted (and held back where a test needs a pending check) by spying on
// node:crypto's scrypt, which the broker's default verifier (auth/secrets.ts) calls.
import crypto from 'node:crypto';
import net from 'node:net';
import mqtt, { type MqttClient } from 'mqtt';
import mqttPacket from 'mqtt-packet';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { createTestService, type TestService } from './support/harness';
import { EmbeddedBroker } from '../src/mqtt/embedded';
import { createLogger } from '../src/logger';
import { topics } from '../src/mqtt/topics';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const STORM = 400;

/** An scrypt hash in the stored format, with a small N so that hundreds of them are quick to make and check. */
function cheapHash(secret: string, n = 1024): string {
  const salt = crypto.randomBytes(16);
  const hash = crypto.scryptSync(secret, salt, 32, { N: n, r: 8, p: 1 });
  return `scrypt$${n}$8$1$${salt.toString('base64url')}$${hash.toString('base64url')}`;
}

const secretOf = (id: string) => `storm-secret-${id}-${'x'.repeat(24)}`;

function tryConnect(url: string, id: string, opts: mqtt.IClientOptions = {}): Promise<{ ok: boolean; client: MqttClient; code?: number; at: number }> {
  const c = mqtt.connect(url, { clientId: id, username: id, password: secretOf(id), reconnectPeriod: 0, connectTimeout: 20_000, ...opts });
  return new Promise((resolve) => {
    c.once('connect', () => resolve({ ok: true, client: c, at: Date.now() }));
    c.once('error', (e) => {
      c.end(true);
      resolve({ ok: false, client: c, code: (e as { code?: number }).code, at: Date.now() });
    });
  });
}

/** Counts scrypt calls; while `hold` is set, each call waits for release() before it runs. */
function spyScrypt() {
  const real = crypto.scrypt.bind(crypto) as (...a: unknown[]) => void;
  const state = { calls: 0, held: [] as (() => void)[], hold: false };
  const spy = vi.spyOn(crypto, 'scrypt').mockImplementation(((...args: unknown[]) => {
    state.calls++;
    if (state.hold) state.held.push(() => real(...args));
    else real(...args);
  }) as never);
  return {
    state,
    release() {
      state.hold = false;
      for (const f of state.held.splice(0)) f();
    },
    restore: () => spy.mockRestore(),
  };
}

describe('embedded broker: terminal logins under a reconnect storm', () => {
  let t: TestService;
  const clients: MqttClient[] = [];
  const brokers: EmbeddedBroker[] = [];
  let scrypt: ReturnType<typeof spyScrypt>;

  async function startBroker(opts: Partial<ConstructorParameters<typeof EmbeddedBroker>[0]> = {}): Promise<EmbeddedBroker> {
    const b = new EmbeddedBroker({ host: '127.0.0.1', port: 0, db: t.ctx.db.kysely, log: createLogger({ level: 'silent' }), storedBeforeAck: [], ...opts });
    await b.start();
    brokers.push(b);
    return b;
  }

  beforeAll(async () => {
    t = await createTestService('sqlite');
    const pup = await t.ctx.db.kysely.selectFrom('terminals').select('pup_uid').where('id', '=', 'term-a1').executeTakeFirstOrThrow();
    const now = new Date().toISOString();
    const rows = Array.from({ length: STORM }, (_, i) => ({ id: `term-s${i}`, pup_uid: pup.pup_uid, secret_hash: cheapHash(secretOf(`term-s${i}`)), name: null, created_at: now, updated_at: now }));
    for (let i = 0; i < rows.length; i += 100) await t.ctx.db.kysely.insertInto('terminals').values(rows.slice(i, i + 100)).execute();
  }, 60_000);
  afterEach(async () => {
    scrypt?.release();
    scrypt?.restore();
    for (const c of clients.splice(0)) c.end(true);
    for (const b of brokers.splice(0)) await b.stop();
  });
  afterAll(async () => {
    await t.close();
  });

  it('admission control: beyond maxPendingLogins checks in progress, logins are refused at once with CONNACK 3 (server unavailable), without scrypt; the admitted ones connect', async () => {
    const b = await startBroker({ maxPendingLogins: 4 });
    scrypt = spyScrypt();
    scrypt.state.hold = true;
    const t0 = Date.now();
    const attempts = Array.from({ length: 10 }, (_, i) => tryConnect(b.address()!, `term-s${i}`));
    const refused: Awaited<(typeof attempts)[number]>[] = [];
    for (const a of attempts) void a.then((r) => !r.ok && refused.push(r));
    await vi.waitFor(() => expect(refused.length).toBe(6), { timeout: 5000 });
    // refused while the 4 admitted checks are still held: at once, not after a check
    expect(refused.every((r) => r.code === 3 && r.at - t0 < 3000)).toBe(true);
    expect(scrypt.state.calls).toBe(4);
    scrypt.release();
    const results = await Promise.all(attempts);
    for (const r of results) clients.push(r.client);
    expect(results.filter((r) => r.ok)).toHaveLength(4);
    expect(scrypt.state.calls).toBe(4);
  });

  it('a login whose connection closed before its check is not checked', async () => {
    const b = await startBroker();
    scrypt = spyScrypt();
    const url = new URL(b.address()!);
    const sock = net.connect(Number(url.port), url.hostname);
    await new Promise<void>((r) => sock.once('connect', () => r()));
    sock.on('error', () => {});
    // the CONNECT and the end of the connection arrive together (a terminal that gave up waiting
    // while the service was stalled)
    sock.write(mqttPacket.generate({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: 4, clean: true, clientId: 'term-s10', keepalive: 30, username: 'term-s10', password: Buffer.from(secretOf('term-s10')) }));
    sock.destroy();
    await sleep(300);
    expect(scrypt.state.calls).toBe(0);
    // the same terminal on an open connection is checked and connects
    const r = await tryConnect(b.address()!, 'term-s10');
    clients.push(r.client);
    expect(r.ok).toBe(true);
    expect(scrypt.state.calls).toBe(1);
  });

  it('a terminal that retries while its check is pending (its connect timeout passed) is not refused or throttled, and is checked once', async () => {
    const b = await startBroker({ authThrottle: { maxFailuresPerClient: 3, maxFailuresPerAddress: 3 } });
    scrypt = spyScrypt();
    scrypt.state.hold = true;
    const c = mqtt.connect(b.address()!, { clientId: 'term-s11', username: 'term-s11', password: secretOf('term-s11'), connectTimeout: 400, reconnectPeriod: 100, reconnectOnConnackError: true });
    clients.push(c);
    const codes: number[] = [];
    let closes = 0;
    c.on('error', (e) => codes.push((e as { code?: number }).code ?? -1));
    c.on('close', () => closes++);
    await vi.waitFor(() => expect(closes).toBeGreaterThanOrEqual(5), { timeout: 10_000 }); // 5 attempts given up while the check is held
    scrypt.release();
    await vi.waitFor(() => expect(c.connected).toBe(true), { timeout: 10_000 });
    expect(codes.filter((x) => x === 4 || x === 5)).toEqual([]);
    expect(scrypt.state.calls).toBe(1);
  });

  it('a reconnect costs no scrypt, also hours later; a changed secret is checked again and the old one refused', async () => {
    const b = await startBroker();
    scrypt = spyScrypt();
    const first = await tryConnect(b.address()!, 'term-s12');
    expect(first.ok).toBe(true);
    first.client.end(true);
    expect(scrypt.state.calls).toBe(1);
    for (let i = 0; i < 3; i++) {
      const r = await tryConnect(b.address()!, 'term-s12');
      expect(r.ok).toBe(true);
      r.client.end(true);
    }
    // two hours later (the terminal was offline, the service kept running)
    const realNow = Date.now.bind(Date);
    const clock = vi.spyOn(Date, 'now').mockImplementation(() => realNow() + 2 * 3600_000);
    try {
      const r = await tryConnect(b.address()!, 'term-s12');
      expect(r.ok).toBe(true);
      r.client.end(true);
    } finally {
      clock.mockRestore();
    }
    expect(scrypt.state.calls).toBe(1);
    // re-provisioned with another secret: the cached login no longer counts
    await t.ctx.db.kysely.updateTable('terminals').set({ secret_hash: cheapHash('another-secret') }).where('id', '=', 'term-s12').execute();
    expect((await tryConnect(b.address()!, 'term-s12')).code).toBe(4);
    expect(scrypt.state.calls).toBe(2);
    const again = await tryConnect(b.address()!, 'term-s12', { password: 'another-secret' });
    clients.push(again.client);
    expect(again.ok).toBe(true);
    expect(scrypt.state.calls).toBe(3);
    await t.ctx.db.kysely.updateTable('terminals').set({ secret_hash: cheapHash(secretOf('term-s12')) }).where('id', '=', 'term-s12').execute();
  });

  it(`a storm: ${STORM} terminals connect at once (mqtt.js, retrying refusals), all get in and report their status; then all reconnect at once with no scrypt`, async () => {
    const b = await startBroker();
    scrypt = spyScrypt();
    const statuses = new Set<string>();
    await b.subscribe(`${topics.prefix('+')}up/status`, (topic) => void statuses.add(topic));
    const codes = new Map<number, number>();
    const storm = async (wave: number) => {
      const t0 = Date.now();
      const wave0 = scrypt.state.calls;
      const cs = Array.from({ length: STORM }, (_, i) => {
        const id = `term-s${i}`;
        const c = mqtt.connect(b.address()!, {
          clientId: id,
          username: id,
          password: secretOf(id),
          connectTimeout: 10_000,
          reconnectPeriod: 200 + Math.floor(Math.random() * 800),
          reconnectOnConnackError: true,
          will: { topic: topics.up(id, 'status'), payload: Buffer.from('{"v":1,"state":"offline"}'), qos: 1, retain: true },
        });
        c.on('error', (e) => {
          const code = (e as { code?: number }).code ?? -1;
          codes.set(code, (codes.get(code) ?? 0) + 1);
        });
        c.on('connect', () => c.publish(topics.up(id, 'status'), `{"v":1,"state":"online","wave":${wave}}`, { qos: 1, retain: true }));
        clients.push(c);
        return c;
      });
      await vi.waitFor(() => expect(cs.filter((c) => c.connected).length).toBe(STORM), { timeout: 60_000, interval: 100 });
      await vi.waitFor(() => expect(statuses.size).toBe(STORM), { timeout: 10_000 });
      const ms = Date.now() - t0;
      const checks = scrypt.state.calls - wave0;
      for (const c of cs) c.end(true);
      await sleep(200);
      return { ms, checks };
    };
    const w1 = await storm(1);
    expect(w1.checks).toBe(STORM); // one check per terminal, however often it retried
    statuses.clear();
    const w2 = await storm(2);
    expect(w2.checks).toBe(0); // a reconnect costs no scrypt
    // no terminal refused as a bad login or throttled: only "come back later" (3)
    expect([...codes.keys()].filter((c) => c === 4 || c === 5)).toEqual([]);
    expect(b.loginStats().failures).toBe(0);
  }, 150_000);
});
