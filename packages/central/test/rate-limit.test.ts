// Rate limiting (http.rateLimitPerMinute) keys: a tenant's calls share one budget however many
// tokens it holds; requests without a valid token (such as /connect/token) count per IP address,
// and X-Forwarded-For moves that address only with http.trustProxy.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestService, type TestService } from './support/harness';
import { TENANT_A } from './support/fixtures';

const GET_PUPS = '/v1/PickupPoints/GetPickUpPoints';
const LIMIT = 3;

async function tenantUid(t: TestService, clientId: string) {
  return (await t.ctx.db.kysely.selectFrom('tenants').select('uid').where('client_id', '=', clientId).executeTakeFirstOrThrow()).uid;
}

function tokenRequest(t: TestService, forwardedFor?: string) {
  return t.app.inject({
    method: 'POST',
    url: '/connect/token',
    payload: new URLSearchParams({ grant_type: 'client_credentials', client_id: TENANT_A.clientId, client_secret: TENANT_A.clientSecret }).toString(),
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...(forwardedFor ? { 'x-forwarded-for': forwardedFor } : {}) },
  });
}

describe('rate limiting keys (trustProxy off, the default)', () => {
  let t: TestService;
  beforeAll(async () => {
    t = await createTestService('sqlite', { config: { http: { rateLimitPerMinute: LIMIT, unauthenticatedRateLimitPerMinute: LIMIT } } });
  });
  afterAll(async () => t?.close());

  it('counts all tokens of one tenant against one budget; another tenant has its own', async () => {
    const uid = await tenantUid(t, 'tenant-a');
    const tokens = Array.from({ length: LIMIT + 2 }, () => t.ctx.tokens.issue(uid).token);
    expect(new Set(tokens).size).toBe(tokens.length);
    const statuses: number[] = [];
    for (const tok of tokens) statuses.push((await t.post(GET_PUPS, { pageNo: 1, pageSize: 10 }, tok)).status);
    expect(statuses).toEqual([200, 200, 200, 429, 429]);
    const other = t.ctx.tokens.issue(await tenantUid(t, 'tenant-b')).token;
    expect((await t.post(GET_PUPS, { pageNo: 1, pageSize: 10 }, other)).status).toBe(200);
  });

  it('ignores X-Forwarded-For: a spoofed address per request does not get a fresh /connect/token budget', async () => {
    const statuses: number[] = [];
    for (let i = 0; i < LIMIT + 2; i++) statuses.push((await tokenRequest(t, `203.0.113.${i + 1}`)).statusCode);
    expect(statuses.slice(0, LIMIT)).toEqual([200, 200, 200]);
    expect(statuses.slice(LIMIT)).toEqual([429, 429]);
  });
});

describe('rate limiting keys with http.trustProxy true', () => {
  let t: TestService;
  beforeAll(async () => {
    t = await createTestService('sqlite', { config: { http: { rateLimitPerMinute: LIMIT, unauthenticatedRateLimitPerMinute: LIMIT, trustProxy: true } } });
  });
  afterAll(async () => t?.close());

  it('counts per forwarded client address behind a trusted proxy', async () => {
    const statuses: number[] = [];
    for (let i = 0; i < LIMIT + 1; i++) statuses.push((await tokenRequest(t, '198.51.100.7')).statusCode);
    expect(statuses).toEqual([200, 200, 200, 429]);
    expect((await tokenRequest(t, '198.51.100.8')).statusCode).toBe(200);
  });
});
