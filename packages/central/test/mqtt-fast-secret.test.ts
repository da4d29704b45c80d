// The fast verifier of machine-generated terminal secrets (auth/terminal-secret-digest.ts,
// docs/edge-protocol.md "Connection"): a high-entropy secret with a keyed digest next to its scrypt
// hash logs in by one HMAC (no scrypt, also on a freshly started broker with an empty login
// cache); a wrong one is refused; a human-written secret keeps scrypt; a row without a digest
// works by scrypt and gets one; a new secret gets a new digest; no key configured, no digest.
// scrypt calls are counted by spying on node:crypto's scrypt (the broker's verifier, as in
// mqtt-login-admission.test.ts); provisioning hashes with scryptSync, which is not counted.
import crypto from 'node:crypto';
import mqtt, { type MqttClient } from 'mqtt';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { EmbeddedBroker } from '../src/mqtt/embedded';
import { createLogger } from '../src/logger';
import { applyProvisioning } from '../src/provisioning/apply';
import { generateTerminalSecret, isHighEntropySecret, terminalDigestKey, terminalSecretDigest, verifyTerminalSecretDigest } from '../src/auth/terminal-secret-digest';
import { hashSecret } from '../src/auth/secrets';
import { loadConfig } from '../src/config';

const PEPPER = 'test-pepper-0123456789-abcdefghijklmnopqrstuvwxyz';
const key = terminalDigestKey({ pepper: PEPPER })!;

function connect(url: string, id: string, password: string): Promise<{ ok: boolean; client: MqttClient; code?: number }> {
  const c = mqtt.connect(url, { clientId: id, username: id, password, reconnectPeriod: 0, connectTimeout: 10_000 });
  return new Promise((resolve) => {
    c.once('connect', () => resolve({ ok: true, client: c }));
    c.once('error', (e) => {
      c.end(true);
      resolve({ ok: false, client: c, code: (e as { code?: number }).code });
    });
  });
}

function spyScrypt() {
  const state = { calls: 0 };
  const real = crypto.scrypt.bind(crypto) as (...a: unknown[]) => void;
  const spy = vi.spyOn(crypto, 'scrypt').mockImplementation(((...args: unknown[]) => {
    state.calls++;
    real(...args);
  }) as never);
  return { state, restore: () => spy.mockRestore() };
}

describe('the high-entropy rule', () => {
  it('secrets of our generator, openssl rand -hex 16 and -base64 24 pass (almost always; a rare random one keeps scrypt)', () => {
    for (let i = 0; i < 500; i++) expect(isHighEntropySecret(generateTerminalSecret())).toBe(true);
    let hex = 0;
    let b64 = 0;
    for (let i = 0; i < 1000; i++) {
      if (isHighEntropySecret(crypto.randomBytes(16).toString('hex'))) hex++;
      if (isHighEntropySecret(crypto.randomBytes(24).toString('base64'))) b64++;
    }
    expect(hex).toBeGreaterThan(970);
    expect(b64).toBeGreaterThan(970);
  });

  it('human-written and patterned secrets do not pass', () => {
    for (const s of [
      'terminal-secret-a1',
      'terminal-secret-for-the-demo-site-01',
      'a-long-random-secret',
      'TerminalSecretAmsterdam01',
      'MyTerminalPassword2024Secret',
      'deadbeefcafebabefeedfacedecade01',
      '0123456789abcdef0123456789abcdef',
      'abcdefghijklmnopqrstuvwxyzABCDEF0123',
      'Aa1Aa1Aa1Aa1Aa1Aa1Aa1Aa1',
      'xK9mQ2vL7pR4', // random-looking but short: under 128 bits
      crypto.randomBytes(15).toString('hex'), // 120 bits
      'aaaaB7kQ2mX9pL4vR8tZ3wN6',
    ])
      expect(isHighEntropySecret(s), s).toBe(false);
  });

  it('no key without a pepper or a configured token signing key; the pepper comes from the configuration or LOCKER_MQTT_TERMINAL_SECRET_PEPPER', () => {
    expect(terminalDigestKey({})).toBeNull();
    const fromToken = terminalDigestKey({ tokenSigningKey: 'k'.repeat(40) })!;
    expect(fromToken).not.toBeNull();
    expect(fromToken.equals(key)).toBe(false);
    expect(terminalDigestKey({ pepper: PEPPER, tokenSigningKey: 'k'.repeat(40) })!.equals(key)).toBe(true); // the pepper wins
    expect(loadConfig({ env: { LOCKER_MQTT_TERMINAL_SECRET_PEPPER: PEPPER } }).mqtt.terminalSecretPepper).toBe(PEPPER);
    expect(() => loadConfig({ env: { LOCKER_MQTT_TERMINAL_SECRET_PEPPER: 'short' } })).toThrow(/terminalSecretPepper|TERMINAL_SECRET_PEPPER/);
  });

  it('a digest is bound to the key, the terminal id and the scrypt hash: another key or hash makes it unusable (scrypt decides), a wrong secret is bad', () => {
    const s = generateTerminalSecret();
    const h = 'scrypt$16384$8$1$salt$hash';
    const d = terminalSecretDigest(key, 't1', h, s)!;
    expect(verifyTerminalSecretDigest(key, 't1', h, s, d)).toBe('ok');
    expect(verifyTerminalSecretDigest(key, 't1', h, generateTerminalSecret(), d)).toBe('bad');
    expect(verifyTerminalSecretDigest(key, 't2', h, s, d)).toBe('bad');
    expect(verifyTerminalSecretDigest(terminalDigestKey({ pepper: `${PEPPER}-rotated` })!, 't1', h, s, d)).toBe('unusable');
    expect(verifyTerminalSecretDigest(key, 't1', 'scrypt$16384$8$1$other$hash', s, d)).toBe('unusable');
    expect(verifyTerminalSecretDigest(key, 't1', h, 'terminal-secret-a1', d)).toBe('unusable');
    expect(terminalSecretDigest(key, 't1', h, 'terminal-secret-a1')).toBeNull();
  });
});

describe('embedded broker: the fast verifier of terminal secrets', () => {
  let t: TestService;
  let pupUid: string;
  const clients: MqttClient[] = [];
  const brokers: EmbeddedBroker[] = [];
  let scrypt: ReturnType<typeof spyScrypt> | undefined;

  async function startBroker(opts: Partial<ConstructorParameters<typeof EmbeddedBroker>[0]> = {}): Promise<EmbeddedBroker> {
    const b = new EmbeddedBroker({ host: '127.0.0.1', port: 0, db: t.ctx.db.kysely, log: createLogger({ level: 'silent' }), storedBeforeAck: [], terminalDigestKey: key, ...opts });
    await b.start();
    brokers.push(b);
    return b;
  }
  const provision = (terminals: { id: string; secret: string }[], digestKey = key) =>
    applyProvisioning(t.ctx.db.kysely, { pickupPoints: [], tenants: [], terminals: terminals.map((x) => ({ ...x, pupUid })) }, t.ctx.clock, { terminalDigestKey: digestKey });
  const row = (id: string) => t.ctx.db.kysely.selectFrom('terminals').select(['secret_hash', 'secret_fast']).where('id', '=', id).executeTakeFirstOrThrow();

  beforeAll(async () => {
    t = await createTestService('sqlite');
    pupUid = (await t.ctx.db.kysely.selectFrom('terminals').select('pup_uid').where('id', '=', 'term-a1').executeTakeFirstOrThrow()).pup_uid;
  }, 60_000);
  afterEach(async () => {
    scrypt?.restore();
    scrypt = undefined;
    for (const c of clients.splice(0)) c.end(true);
    for (const b of brokers.splice(0)) await b.stop();
  });
  afterAll(async () => {
    await t.close();
  });

  it('a provisioned high-entropy secret logs in with zero scrypt calls, on a fresh broker (empty login cache, as after a restart) and with the cache off', async () => {
    const secret = generateTerminalSecret();
    await provision([{ id: 'fast-1', secret }]);
    expect((await row('fast-1')).secret_fast).toMatch(/^hs256\$/);
    scrypt = spyScrypt();
    for (const opts of [{}, { loginCacheMs: 0 }]) {
      const b = await startBroker(opts);
      for (let i = 0; i < 3; i++) {
        const r = await connect(b.address()!, 'fast-1', secret);
        clients.push(r.client);
        expect(r.ok).toBe(true);
      }
      expect(b.loginStats()).toMatchObject({ verifierCalls: 0, fastChecks: 3, pendingChecks: 0 });
    }
    expect(scrypt.state.calls).toBe(0);
  });

  it('a wrong secret is refused (CONNACK 4) by the digest alone, and counts as a failed login', async () => {
    const secret = generateTerminalSecret();
    await provision([{ id: 'fast-2', secret }]);
    const b = await startBroker({ authThrottle: { maxFailuresPerClient: 2 } });
    scrypt = spyScrypt();
    expect((await connect(b.address()!, 'fast-2', generateTerminalSecret())).code).toBe(4);
    expect(scrypt.state.calls).toBe(0);
    // a wrong secret that is not high-entropy is checked by scrypt, and refused
    expect((await connect(b.address()!, 'fast-2', 'not-the-secret-1')).code).toBe(4);
    expect(scrypt.state.calls).toBe(1);
    // two failures: blocked (CONNACK 5) even with the right secret
    expect((await connect(b.address()!, 'fast-2', secret)).code).toBe(5);
  });

  it('a human-written secret gets no digest and still uses scrypt (and never gets one)', async () => {
    await provision([{ id: 'human-1', secret: 'terminal-secret-human-1' }]);
    expect((await row('human-1')).secret_fast).toBeNull();
    const b = await startBroker({ loginCacheMs: 0 });
    scrypt = spyScrypt();
    const r = await connect(b.address()!, 'human-1', 'terminal-secret-human-1');
    clients.push(r.client);
    expect(r.ok).toBe(true);
    expect(scrypt.state.calls).toBe(1);
    expect(b.loginStats()).toMatchObject({ verifierCalls: 1, fastChecks: 0, backfills: 0 });
    expect((await row('human-1')).secret_fast).toBeNull();
  });

  it('a row without a digest (from before migration 409, or provisioned as a hash) logs in by scrypt and gets its digest; the next broker lets it in with no scrypt', async () => {
    const secret = generateTerminalSecret();
    await provision([{ id: 'old-1', secret: hashSecret(secret) }]);
    expect((await row('old-1')).secret_fast).toBeNull();
    scrypt = spyScrypt();
    const b1 = await startBroker();
    const r1 = await connect(b1.address()!, 'old-1', secret);
    clients.push(r1.client);
    expect(r1.ok).toBe(true);
    expect(scrypt.state.calls).toBe(1);
    expect(b1.loginStats().backfills).toBe(1);
    expect((await row('old-1')).secret_fast).toMatch(/^hs256\$/);
    // re-applying the same file (the hash) keeps the stored digest
    await provision([{ id: 'old-1', secret: (await row('old-1')).secret_hash }]);
    expect((await row('old-1')).secret_fast).toMatch(/^hs256\$/);
    const b2 = await startBroker(); // a restart: empty login cache
    const r2 = await connect(b2.address()!, 'old-1', secret);
    clients.push(r2.client);
    expect(r2.ok).toBe(true);
    expect(scrypt.state.calls).toBe(1);
    expect(b2.loginStats()).toMatchObject({ verifierCalls: 0, fastChecks: 1 });
  });

  it('a new secret gets a new digest: the old secret is refused, the new one gets in without scrypt; the same secret again changes nothing', async () => {
    const s1 = generateTerminalSecret();
    const s2 = generateTerminalSecret();
    await provision([{ id: 'rot-1', secret: s1 }]);
    const d1 = (await row('rot-1')).secret_fast;
    const again = await provision([{ id: 'rot-1', secret: s1 }]);
    expect(again.changes).toEqual([]);
    expect((await row('rot-1')).secret_fast).toBe(d1);
    await provision([{ id: 'rot-1', secret: s2 }]);
    const d2 = (await row('rot-1')).secret_fast;
    expect(d2).toMatch(/^hs256\$/);
    expect(d2).not.toBe(d1);
    const b = await startBroker();
    scrypt = spyScrypt();
    expect((await connect(b.address()!, 'rot-1', s1)).code).toBe(4);
    const r = await connect(b.address()!, 'rot-1', s2);
    clients.push(r.client);
    expect(r.ok).toBe(true);
    expect(scrypt.state.calls).toBe(0);
    // changed to a human-written secret: the digest goes
    await provision([{ id: 'rot-1', secret: 'terminal-secret-rot-1' }]);
    expect((await row('rot-1')).secret_fast).toBeNull();
  });

  it('no pepper configured: provisioning writes no digest, the broker uses scrypt (a stored digest is ignored) and stores none', async () => {
    const secret = generateTerminalSecret();
    await provision([{ id: 'nokey-1', secret }], null as never);
    expect((await row('nokey-1')).secret_fast).toBeNull();
    await provision([{ id: 'nokey-2', secret }]); // has a digest, but the broker has no key
    const b = await startBroker({ terminalDigestKey: null, loginCacheMs: 0 });
    scrypt = spyScrypt();
    for (const id of ['nokey-1', 'nokey-2']) {
      const r = await connect(b.address()!, id, secret);
      clients.push(r.client);
      expect(r.ok).toBe(true);
    }
    expect(scrypt.state.calls).toBe(2);
    expect(b.loginStats()).toMatchObject({ fastChecks: 0, backfills: 0 });
    expect((await row('nokey-1')).secret_fast).toBeNull();
  });

  it('a rotated pepper: digests made under the old one are not refused but checked by scrypt once, then stored under the new one', async () => {
    const secret = generateTerminalSecret();
    await provision([{ id: 'pep-1', secret }], terminalDigestKey({ pepper: `${PEPPER}-old` })!);
    const b = await startBroker();
    scrypt = spyScrypt();
    const r = await connect(b.address()!, 'pep-1', secret);
    clients.push(r.client);
    expect(r.ok).toBe(true);
    expect(scrypt.state.calls).toBe(1);
    expect(verifyTerminalSecretDigest(key, 'pep-1', (await row('pep-1')).secret_hash, secret, (await row('pep-1')).secret_fast)).toBe('ok');
    const b2 = await startBroker({ loginCacheMs: 0 });
    const r2 = await connect(b2.address()!, 'pep-1', secret);
    clients.push(r2.client);
    expect(r2.ok).toBe(true);
    expect(scrypt.state.calls).toBe(1);
  });
});

describeEngines('migration 409 and provisioning: the fast digest column', (engine) => {
  let t: TestService;
  beforeAll(async () => {
    t = await createTestService(engine);
  }, 60_000);
  afterAll(async () => {
    await t?.close();
  });

  it('provisioning stores the digest of a high-entropy secret and none for a human-written one; the backfill update writes it only while the hash is unchanged', async () => {
    const db = t.ctx.db.kysely;
    const pupUid = (await db.selectFrom('terminals').select('pup_uid').where('id', '=', 'term-a1').executeTakeFirstOrThrow()).pup_uid;
    const secret = generateTerminalSecret();
    await applyProvisioning(db, { pickupPoints: [], tenants: [], terminals: [{ id: 'eng-1', pupUid, secret }, { id: 'eng-2', pupUid, secret: 'terminal-secret-eng-2' }] }, t.ctx.clock, { terminalDigestKey: key });
    const rows = await db.selectFrom('terminals').select(['id', 'secret_hash', 'secret_fast']).where('id', 'in', ['eng-1', 'eng-2', 'term-a1']).orderBy('id').execute();
    const [e1, e2, a1] = rows;
    expect(verifyTerminalSecretDigest(key, 'eng-1', e1!.secret_hash, secret, e1!.secret_fast)).toBe('ok');
    expect(e2!.secret_fast).toBeNull();
    expect(a1!.secret_fast).toBeNull(); // provisioned before, without a key
    const b = new EmbeddedBroker({ host: '127.0.0.1', port: 0, db, log: createLogger({ level: 'silent' }), storedBeforeAck: [], terminalDigestKey: key });
    await b.start();
    try {
      const r = await connect(b.address()!, 'eng-1', secret);
      r.client.end(true);
      expect(r.ok).toBe(true);
      expect(b.loginStats()).toMatchObject({ verifierCalls: 0, fastChecks: 1 });
    } finally {
      await b.stop();
    }
  });
});

describe('a login by the fast digest from a connection that already closed', () => {
  it('is not let in (abandoned: no CONNACK to nobody, no last will of a connection that never served)', async () => {
    const { TerminalLogins } = await import('../src/mqtt/terminal-auth');
    const secret = generateTerminalSecret();
    const hash = hashSecret(secret);
    const logins = new TerminalLogins({ lookup: async () => ({ hash, fast: terminalSecretDigest(key, 'term-x', hash, secret) }), digestKey: key, log: createLogger({ level: 'silent' }) });
    try {
      const attempt = (closed: boolean) => logins.login({ clientId: 'term-x', username: 'term-x', password: Buffer.from(secret), address: '127.0.0.1', isClosed: () => closed });
      expect(await attempt(true)).toBe('abandoned');
      expect(await attempt(false)).toBe('ok');
      expect(logins.stats().fastChecks).toBe(2);
      expect(logins.stats().failures).toBe(0); // an abandoned attempt is no failed login
    } finally {
      logins.close();
    }
  });
});
