// /connect/token under attack (docs/api.md, "Throttling and limits"): failed secrets throttled per
// client id from one address and per address, escalating, 429 slow_down with Retry-After; the
// right secret from another address still gets a token; the secret verifier answers 503 at once
// (no scrypt) when its slots and queue are full; a verified secret is reused without scrypt until
// the secret changes; scrypt never runs on the event loop.
import crypto from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { createTestService, type TestService } from './support/harness';
import { TENANT_A, TENANT_B, testSite } from './support/fixtures';
import { loadConfig } from '../src/config';
import { verifySecretAsync } from '../src/auth/secrets';

const DEFAULTS = loadConfig({ env: {} }).throttle;
const PER_CLIENT = DEFAULTS.tokenMaxFailuresPerClient;
const PER_ADDRESS = DEFAULTS.tokenMaxFailuresPerAddress;
const BLOCK_S = DEFAULTS.tokenBlockSeconds;

function tokenRequest(t: TestService, clientId: string, secret: string, remoteAddress: string) {
  return t.app.inject({
    method: 'POST',
    url: '/connect/token',
    remoteAddress,
    payload: new URLSearchParams({ grant_type: 'client_credentials', client_id: clientId, client_secret: secret }).toString(),
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
  });
}

describe('failed /connect/token attempts are throttled (the default limits)', () => {
  let t: TestService;
  beforeAll(async () => {
    // the harness turns the throttles off for other suites: this one runs with the defaults
    t = await createTestService('sqlite', { config: { throttle: { tokenMaxFailuresPerClient: PER_CLIENT, tokenMaxFailuresPerAddress: PER_ADDRESS } } });
  });
  afterAll(async () => t?.close());

  it('uses documented defaults: 5 per client id and address, 20 per address, first block 60 s', () => {
    expect({ PER_CLIENT, PER_ADDRESS, BLOCK_S }).toEqual({ PER_CLIENT: 5, PER_ADDRESS: 20, BLOCK_S: 60 });
  });

  it('answers 429 slow_down with Retry-After after the allowed failures of one client id from one address, escalating; another address still gets a token', async () => {
    const attacker = '198.51.100.10';
    for (let i = 0; i < PER_CLIENT; i++) expect((await tokenRequest(t, TENANT_A.clientId, `wrong-secret-${i}`, attacker)).statusCode).toBe(401);
    const blocked = await tokenRequest(t, TENANT_A.clientId, 'wrong-secret-x', attacker);
    expect(blocked.statusCode).toBe(429);
    expect(blocked.headers['retry-after']).toBe(String(BLOCK_S));
    expect(blocked.headers['cache-control']).toBe('no-store');
    expect(blocked.json()).toEqual({ success: false, error: 'slow_down', message: expect.stringMatching(/too many failed attempts/), error_description: expect.any(String) });
    // while blocked, even the right secret from that address is refused (not checked at all)
    expect((await tokenRequest(t, TENANT_A.clientId, TENANT_A.clientSecret, attacker)).statusCode).toBe(429);
    // the same client id with the right secret from another address still gets a token
    const other = await tokenRequest(t, TENANT_A.clientId, TENANT_A.clientSecret, '203.0.113.20');
    expect(other.statusCode).toBe(200);
    expect(other.json().access_token).toEqual(expect.any(String));

    // after the block, the same number of failures blocks again, twice as long
    t.clock.advance(BLOCK_S * 1000 + 1000);
    for (let i = 0; i < PER_CLIENT; i++) expect((await tokenRequest(t, TENANT_A.clientId, `wrong-again-${i}`, attacker)).statusCode).toBe(401);
    const again = await tokenRequest(t, TENANT_A.clientId, 'wrong-again-x', attacker);
    expect(again.statusCode).toBe(429);
    expect(again.headers['retry-after']).toBe(String(2 * BLOCK_S));
    t.clock.advance(2 * BLOCK_S * 1000 + 1000);
    // a success from the address clears the client id's record there
    expect((await tokenRequest(t, TENANT_A.clientId, TENANT_A.clientSecret, attacker)).statusCode).toBe(200);
  });

  it('throttles one address across client ids (unknown ones included), and no other address', async () => {
    const attacker = '198.51.100.30';
    const statuses: number[] = [];
    for (let i = 0; i < PER_ADDRESS; i++) statuses.push((await tokenRequest(t, `client-${i}`, 'guess-secret', attacker)).statusCode);
    expect(statuses.every((s) => s === 401)).toBe(true);
    const blocked = await tokenRequest(t, TENANT_B.clientId, 'guess-secret', attacker);
    expect(blocked.statusCode).toBe(429);
    expect(blocked.json().error).toBe('slow_down');
    expect(Number(blocked.headers['retry-after'])).toBe(BLOCK_S);
    expect((await tokenRequest(t, 'client-new', 'guess-secret', attacker)).statusCode).toBe(429);
    expect((await tokenRequest(t, TENANT_B.clientId, TENANT_B.clientSecret, '198.51.100.31')).statusCode).toBe(200);
  });
});

describe('secret verification is bounded and cached', () => {
  let t: TestService;
  beforeAll(async () => {
    t = await createTestService('sqlite', { config: { auth: { verifyConcurrency: 1, verifyQueueLimit: 2 } } });
  });
  afterAll(async () => t?.close());
  afterEach(() => {
    t.app.tokenGuard.verifier.verifyFn = verifySecretAsync;
    t.app.tokenGuard.verifier.clear();
    vi.restoreAllMocks();
  });

  it('answers 503 temporarily_unavailable with Retry-After at once, without scrypt, when every slot and the queue are taken', async () => {
    const held: (() => void)[] = [];
    const calls: string[] = [];
    t.app.tokenGuard.verifier.verifyFn = (secret) => {
      calls.push(secret);
      return new Promise<boolean>((resolve) => held.push(() => resolve(false)));
    };
    // 1 running + 2 waiting
    const running = [1, 2, 3].map((i) => tokenRequest(t, TENANT_A.clientId, `held-${i}`, `192.0.2.${i}`));
    for (let i = 0; i < 100 && (calls.length < 1 || t.app.tokenGuard.verifier.load().waiting < 2); i++) await new Promise((r) => setTimeout(r, 5));
    expect(t.app.tokenGuard.verifier.load()).toEqual({ active: 1, waiting: 2 });
    const started = Date.now();
    const refused = await tokenRequest(t, TENANT_A.clientId, TENANT_A.clientSecret, '192.0.2.9');
    expect(Date.now() - started).toBeLessThan(1000);
    expect(refused.statusCode).toBe(503);
    expect(refused.headers['retry-after']).toBe('1');
    expect(refused.json()).toEqual({ success: false, error: 'temporarily_unavailable', message: expect.any(String), error_description: expect.any(String) });
    expect(calls).toEqual(['held-1']);
    // the queued ones run one at a time as slots free up
    while (calls.length < 3 || held.length > 0) {
      const next = held.shift();
      if (next) next();
      await new Promise((r) => setTimeout(r, 5));
    }
    expect((await Promise.all(running)).map((r) => r.statusCode)).toEqual([401, 401, 401]);
    expect(calls).toEqual(['held-1', 'held-2', 'held-3']);
  });

  it('reuses a successful verification without another scrypt, until the secret changes', async () => {
    let scrypts = 0;
    t.app.tokenGuard.verifier.verifyFn = (secret, hash) => {
      scrypts++;
      return verifySecretAsync(secret, hash);
    };
    expect((await tokenRequest(t, TENANT_A.clientId, TENANT_A.clientSecret, '192.0.2.50')).statusCode).toBe(200);
    expect(scrypts).toBe(1);
    expect((await tokenRequest(t, TENANT_A.clientId, TENANT_A.clientSecret, '192.0.2.51')).statusCode).toBe(200);
    expect(scrypts).toBe(1);
    // a wrong secret is never cached: every try costs (and counts)
    expect((await tokenRequest(t, TENANT_A.clientId, 'not-the-secret-1', '192.0.2.50')).statusCode).toBe(401);
    expect((await tokenRequest(t, TENANT_A.clientId, 'not-the-secret-1', '192.0.2.50')).statusCode).toBe(401);
    expect(scrypts).toBe(3);

    // provisioning changes the secret: the remembered success no longer matches the stored hash
    const site = testSite();
    const newSecret = 'secret-a-rotated-0123456789';
    (site.tenants!.find((x) => x.clientId === TENANT_A.clientId) as { clientSecret: string }).clientSecret = newSecret;
    await t.provision(site);
    try {
      expect((await tokenRequest(t, TENANT_A.clientId, TENANT_A.clientSecret, '192.0.2.50')).statusCode).toBe(401);
      expect(scrypts).toBe(4);
      expect((await tokenRequest(t, TENANT_A.clientId, newSecret, '192.0.2.50')).statusCode).toBe(200);
      expect((await tokenRequest(t, TENANT_A.clientId, newSecret, '192.0.2.50')).statusCode).toBe(200);
      expect(scrypts).toBe(5);
    } finally {
      await t.provision(testSite());
    }
  });

  it('never runs scrypt on the event loop for a token request', async () => {
    const sync = vi.spyOn(crypto, 'scryptSync');
    expect((await tokenRequest(t, TENANT_B.clientId, TENANT_B.clientSecret, '192.0.2.60')).statusCode).toBe(200);
    expect((await tokenRequest(t, TENANT_B.clientId, 'wrong-secret-zz', '192.0.2.60')).statusCode).toBe(401);
    expect((await tokenRequest(t, 'nobody-at-all', 'wrong-secret-zz', '192.0.2.60')).statusCode).toBe(401);
    expect(sync).not.toHaveBeenCalled();
  });
});

describe('the per-address request limit on /connect/token', () => {
  let t: TestService;
  beforeAll(async () => {
    t = await createTestService('sqlite', { config: { http: { unauthenticatedRateLimitPerMinute: 2 } } });
  });
  afterAll(async () => t?.close());

  it('answers 429 in the OAuth style (slow_down) with Retry-After, not a 500', async () => {
    expect((await tokenRequest(t, TENANT_A.clientId, TENANT_A.clientSecret, '192.0.2.70')).statusCode).toBe(200);
    expect((await tokenRequest(t, TENANT_A.clientId, TENANT_A.clientSecret, '192.0.2.70')).statusCode).toBe(200);
    const r = await tokenRequest(t, TENANT_A.clientId, TENANT_A.clientSecret, '192.0.2.70');
    expect(r.statusCode).toBe(429);
    expect(Number(r.headers['retry-after'])).toBeGreaterThan(0);
    expect(r.json()).toEqual({ success: false, error: 'slow_down', message: expect.any(String), error_description: expect.any(String) });
  });
});
