// Issue 12, item 5: no personal data or secrets in the log, request paths and query strings
// included. A set of requests goes through the real service (its own logger, trace level, every
// line captured): e-mail addresses, phone numbers, names, PINs, QR codes, the client secret and the
// access token, in bodies, headers, paths (percent-encoded and not) and query strings. Then the
// whole log is scanned for each value, as sent, lower-cased and percent-encoded: none may appear.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redactUrl, registerRouteWords } from '@locker/common';
import { newQr } from '../src/shipments/codes';
import { createLogger } from '../src/logger';
import { loadConfig } from '../src/config';
import { CentralService } from '../src/service';
import { ManualClock } from '../src/clock';
import { applyProvisioning } from '../src/provisioning/apply';
import { apiClient, type TestService } from './support/harness';
import { captureLog } from './support/log-capture';
import { PUP_A1, TENANT_A, testSite } from './support/fixtures';
import { booking, codes, ok } from './shipments-helpers';

describe('redactUrl', () => {
  // as the service registers its routes (app.ts)
  registerRouteWords(['/v1/Account/GetAccountSuggestions', '/v1/PickupPoints/GetPickUpPointAvailability', '/v1/Logistics/GetShipmentAccessConfig']);
  it.each([
    ['/v1/Account/someone%40example.com', '/v1/Account/[redacted]'],
    ['/v1/Account/someone@example.com/x', '/v1/Account/[redacted]/x'],
    ['/v1/Logistics/123456', '/v1/Logistics/[redacted]'],
    ['/v1/Account/GetAccountSuggestions', '/v1/Account/GetAccountSuggestions'],
    ['/v1/PickupPoints/GetPickUpPointAvailability', '/v1/PickupPoints/GetPickUpPointAvailability'],
    ['/docs/static/swagger-ui-bundle.js', '/docs/static/swagger-ui-bundle.js'],
    ['/v1/x/eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc', '/v1/x/[redacted]'],
    ['/v1/x/QR-unguessable-0123456789', '/v1/x/[redacted]'],
    // QR values (24 base64url characters) without a digit: one failed this test in CI
    ['/v1/Logistics/vZBDebBUlbLhgEoD_-kcRaEf', '/v1/Logistics/[redacted]'],
    ['/v1/Logistics/vZBDebBUlbLhgEoDxkcRaEfq', '/v1/Logistics/[redacted]'],
    ['/v1/Logistics/GetShipmentAccessConfig', '/v1/Logistics/GetShipmentAccessConfig'],
    // a CamelCase-looking QR value (drawn in a CI run) is no route word
    ['/v1/Logistics/rcbNxirpAwyPmRgsSuJbWaoz', '/v1/Logistics/[redacted]'],
    ['/v1/Logistics/HfdqhRleXvxNoBpyCyDupsml', '/v1/Logistics/[redacted]'],
    ['/docs/static/swagger-ui-standalone-preset.js', '/docs/static/swagger-ui-standalone-preset.js'],
    ['/v1/x?email=a%40b.c&pin=123456&flag', '/v1/x?email=[redacted]&pin=[redacted]&flag'],
    ['/v1/x?someone@example.com', '/v1/x?[redacted]'],
    ['https://user:pass@hooks.example.test/cb/123456?sig=abc#frag', 'https://[redacted]@hooks.example.test/cb/[redacted]?sig=[redacted]'],
    ['/v1/%zz%40', '/v1/[redacted]'],
    ['/v1/Account/Anna%20de%20Vries', '/v1/Account/[redacted]'],
    ['/v1/Account/Zo%C3%AB', '/v1/Account/[redacted]'],
    ['/v1/Account/', '/v1/Account/'],
  ])('%s -> %s', (url, want) => {
    expect(redactUrl(url)).toBe(want);
  });

  it('every QR value the service makes is redacted in a path (100,000 drawn)', () => {
    for (let i = 0; i < 100_000; i++) {
      const qr = newQr();
      expect(redactUrl(`/v1/Logistics/${qr}`), qr).toBe('/v1/Logistics/[redacted]');
    }
  });
});

describe('the log of a session of requests holds no personal data or secrets', () => {
  let t: TestService;
  let dir: string;
  const cap = captureLog();
  beforeAll(async () => {
    // the real service with its logger writing into the capture, at trace level
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-logscan-'));
    const clock = new ManualClock('2026-03-01T10:00:00.000Z');
    const config = loadConfig({ env: {}, overrides: { database: { url: path.join(dir, 'central.db') }, log: { level: 'trace' }, mqtt: { mode: 'off' }, environment: 'staging' } });
    const svc = new CentralService({ config, clock, log: createLogger({ level: 'trace', destination: cap.destination }), startWorkers: false });
    const ctx = await svc.start();
    const site = testSite();
    await applyProvisioning(ctx.db.kysely, site, clock);
    const secrets = new Map((site.tenants ?? []).map((x) => [x.clientId, x.clientSecret] as [string, string]));
    t = { engine: 'sqlite', svc, app: svc.app, ctx, clock, ...apiClient(svc.app, ctx, secrets), provision: null as never, close: async () => svc.stop() };
  });
  afterAll(async () => {
    await t?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('scans every line', async () => {
    const email = 'Marieke.Scan@example.test';
    const phone = '+31687650099';
    const first = 'Geertruida';
    const last = 'Zwanenburgh';
    const secret = TENANT_A.clientSecret;
    const token = await t.token();

    // personal data in bodies, paths and query strings
    const acct = await ok(t.post('/v1/Account/CreateAccount', { emailAddress: email, firstName: first, lastName: last, phoneNumber: phone, pickUpPointUid: PUP_A1 }));
    await ok(t.post('/v1/Account/GetAccounts', { pageNo: 1, pageSize: 10, emailAddress: email, fullName: `${first} ${last}`, phoneNumber: phone }));
    await ok(t.post('/v1/Account/GetAccount', { emailAddress: email }));
    const auth = { authorization: `Bearer ${token}` };
    const sends: { method: 'GET' | 'POST'; url: string; headers?: Record<string, string>; payload?: string }[] = [
      { method: 'GET', url: `/v1/Account/${encodeURIComponent(email)}` },
      { method: 'GET', url: `/v1/Account/${email}` },
      { method: 'POST', url: `/v1/Account/${encodeURIComponent(email)}/GetAccount`, headers: { ...auth, 'content-type': 'application/json' }, payload: '{}' },
      { method: 'GET', url: `/v1/Account/GetAccount?email=${encodeURIComponent(email)}&phone=${encodeURIComponent(phone)}` },
      { method: 'POST', url: `/v1/Account/GetAccount?email=${encodeURIComponent(email)}`, headers: { ...auth, 'content-type': 'application/json' }, payload: JSON.stringify({ emailAddress: email }) },
      { method: 'GET', url: `/docs?token=${token}` },
      { method: 'GET', url: `/v1/${token}` },
      { method: 'GET', url: `/v1/Account/${first}%20${last}/${phone}` },
      // a body the service refuses, holding personal data
      { method: 'POST', url: '/v1/Account/GetAccount', headers: { ...auth, 'content-type': 'application/json' }, payload: `{"emailAddress": "${email}", ` },
      { method: 'POST', url: '/v1/Account/GetAccount', headers: { ...auth, 'content-type': 'application/x-www-form-urlencoded' }, payload: `emailAddress=${encodeURIComponent(email)}` },
      // the client secret in a form, in Basic auth, and wrong
      { method: 'POST', url: '/connect/token', headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: `grant_type=client_credentials&client_id=${TENANT_A.clientId}&client_secret=${secret}-wrong` },
      { method: 'POST', url: '/connect/token', headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: `Basic ${Buffer.from(`${TENANT_A.clientId}:${secret}`).toString('base64')}` }, payload: 'grant_type=client_credentials' },
      { method: 'POST', url: `/connect/token?client_secret=${secret}`, headers: { 'content-type': 'application/json' }, payload: JSON.stringify({ client_secret: secret }) },
    ];
    for (const s of sends) await t.app.inject({ method: s.method, url: s.url, headers: s.headers, payload: s.payload });

    // PINs and QR codes: a shipment's codes, sent back in bodies and paths
    const sh = await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: acct.userUid, ...booking() }));
    const c = await codes(t, sh.shipmentUid);
    const detail = await ok(t.post('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 1, shipmentUid: sh.shipmentUid }));
    const at = detail.items[0];
    await t.post('/v1/Logistics/SimulateLockerAccess', { pupUid: PUP_A1, lockerName: at?.lockerName ?? 'x', pinCode: '999999' });
    await t.post('/v1/Logistics/SimulateLockerAccess', { pupUid: PUP_A1, lockerName: at?.lockerName ?? 'x', pinCode: c.dropPin });
    await t.app.inject({ method: 'GET', url: `/v1/Logistics/${c.dropPin}` });
    await t.app.inject({ method: 'GET', url: `/v1/Logistics/x?pin=${c.pickPin}&qr=${encodeURIComponent(c.pickQr ?? '')}` });
    await t.app.inject({ method: 'GET', url: `/v1/Logistics/${encodeURIComponent(c.dropQr ?? '')}` });

    // a route's own long word stays readable in a logged path (registered from the service's routes)
    await t.app.inject({ method: 'GET', url: '/v1/Logistics/SimulateLockerAccess/nothing' });

    const log = cap.lines.join('\n');
    expect(cap.lines.length).toBeGreaterThan(20);
    expect(log).toContain('/v1/Logistics/SimulateLockerAccess/nothing');
    // the log does show the requests (one line each, with the path)
    expect(log).toContain('/v1/Account/[redacted]');
    const values = [email, phone, first, last, secret, token, c.dropPin!, c.pickPin!, c.dropQr!, c.pickQr!, ...c.links].filter((v) => v && v.length >= 4);
    expect(values.length).toBeGreaterThanOrEqual(10);
    for (const v of values) {
      for (const form of new Set([v, v.toLowerCase(), encodeURIComponent(v), encodeURIComponent(v).toLowerCase(), v.replace('+', '%2B')])) {
        expect(log.includes(form), `${form} found in the log:\n${cap.lines.filter((l) => l.includes(form)).join('\n')}`).toBe(false);
      }
    }
  });
});
