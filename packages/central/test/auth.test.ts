import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { TENANT_A } from './support/fixtures';

const form = (o: Record<string, string>) => new URLSearchParams(o).toString();

describeEngines('token endpoint and bearer auth', (engine) => {
  let t: TestService;
  beforeAll(async () => {
    t = await createTestService(engine, { config: { auth: { tokenLifetimeSeconds: 60 } } });
  });
  afterAll(async () => t?.close());

  const tokenReq = (o: Record<string, string>) =>
    t.app.inject({ method: 'POST', url: '/connect/token', payload: form(o), headers: { 'content-type': 'application/x-www-form-urlencoded' } });

  it('issues a bearer token for valid client credentials', async () => {
    const res = await tokenReq({ grant_type: 'client_credentials', client_id: TENANT_A.clientId, client_secret: TENANT_A.clientSecret, scope: 'integration_api' });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body.token_type).toBe('Bearer');
    expect(body.expires_in).toBe(60);
    expect(typeof body.access_token).toBe('string');
    expect(res.headers['cache-control']).toBe('no-store');
    expect(body).toMatchObject({ success: true, error: null, message: null, scope: 'integration_api' });
  });

  it.each([
    [{ grant_type: 'client_credentials', client_id: TENANT_A.clientId, client_secret: 'wrong-secret-xx', scope: 'integration_api' }, 401, 'invalid_client'],
    [{ grant_type: 'client_credentials', client_id: 'nobody', client_secret: 'whatever-secret', scope: 'integration_api' }, 401, 'invalid_client'],
    [{ grant_type: 'password', client_id: TENANT_A.clientId, client_secret: TENANT_A.clientSecret, scope: 'integration_api' }, 400, 'unsupported_grant_type'],
    [{ grant_type: 'client_credentials', client_id: TENANT_A.clientId, client_secret: TENANT_A.clientSecret, scope: 'admin' }, 400, 'invalid_scope'],
    [{ client_id: TENANT_A.clientId, client_secret: TENANT_A.clientSecret }, 400, 'invalid_request'],
  ])('refuses %o with the OAuth error', async (body, status, error) => {
    const res = await tokenReq(body as Record<string, string>);
    expect(res.statusCode).toBe(status);
    expect(res.json().error).toBe(error);
  });

  it.each([
    ['no body', undefined, undefined],
    ['no body with the form Content-Type', undefined, 'application/x-www-form-urlencoded'],
    ['a JSON body with a number grant_type', JSON.stringify({ grant_type: 1 }), 'application/json'],
    ['a malformed JSON body', '{"grant_type":', 'application/json'],
    ['a text/plain body', 'grant_type=client_credentials', 'text/plain'],
    ['an unsupported Content-Type', '<x/>', 'application/xml'],
  ])('answers %s with the OAuth invalid_request (and the envelope fields), never a 500', async (_n, payload, type) => {
    const res = await t.app.inject({ method: 'POST', url: '/connect/token', payload, headers: type ? { 'content-type': type } : {} });
    expect(res.statusCode, res.body).toBe(400);
    expect(res.json()).toEqual({ success: false, error: 'invalid_request', message: expect.any(String), error_description: expect.any(String) });
    expect(res.json().message).toBe(res.json().error_description);
    expect(res.headers['cache-control']).toBe('no-store');
  });

  it('carries the envelope fields on the OAuth errors it answers itself', async () => {
    const res = await tokenReq({ grant_type: 'password', client_id: TENANT_A.clientId, client_secret: TENANT_A.clientSecret });
    expect(res.json()).toEqual({ success: false, error: 'unsupported_grant_type', message: 'only client_credentials is supported', error_description: 'only client_credentials is supported' });
  });

  it('stores client secrets hashed', async () => {
    const row = await t.ctx.db.kysely.selectFrom('tenants').select('secret_hash').where('client_id', '=', TENANT_A.clientId).executeTakeFirstOrThrow();
    expect(row.secret_hash).not.toContain(TENANT_A.clientSecret);
    expect(row.secret_hash.startsWith('scrypt$')).toBe(true);
  });

  it('client credentials in HTTP Basic auth; malformed Basic credentials are invalid_client, never a 500', async () => {
    const basic = (cred: string) =>
      t.app.inject({
        method: 'POST',
        url: '/connect/token',
        payload: form({ grant_type: 'client_credentials', scope: 'integration_api' }),
        headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: `Basic ${Buffer.from(cred).toString('base64')}` },
      });
    const good = await basic(`${encodeURIComponent(TENANT_A.clientId)}:${encodeURIComponent(TENANT_A.clientSecret)}`);
    expect(good.statusCode).toBe(200);
    expect(typeof good.json().access_token).toBe('string');
    for (const cred of ['%:x', `${TENANT_A.clientId}:%zz`, `${TENANT_A.clientId}:%E0%A4%A`, 'no-colon-at-all', ':', '']) {
      const res = await basic(cred);
      expect(res.statusCode, cred).toBe(401);
      expect(res.json(), cred).toMatchObject({ error: 'invalid_client' });
    }
  });

  it('answers /v1/ calls without or with a bad token with 401 Unauthorized in the envelope', async () => {
    for (const tok of [null, 'garbage', 'v1.e30.abc']) {
      const res = await t.post('/v1/PickupPoints/GetPickUpPoints', { pageNo: 1, pageSize: 10 }, tok);
      expect(res.status).toBe(401);
      expect(res.body).toEqual({ success: false, error: 'Unauthorized', message: expect.any(String) });
    }
  });

  it('expires tokens after the configured lifetime (moved clock)', async () => {
    const tok = await t.token();
    expect(t.ctx.tokens.verify(tok)).not.toBeNull();
    t.clock.advance(59_000);
    expect(t.ctx.tokens.verify(tok)).not.toBeNull();
    t.clock.advance(2_000);
    expect(t.ctx.tokens.verify(tok)).toBeNull();
  });

  it('refuses a token with a changed body or signature after the genuine one was accepted (verified-token cache)', async () => {
    const tok = await t.token();
    expect(t.ctx.tokens.verify(tok)).not.toBeNull();
    const [v, body, sig] = tok.split('.') as [string, string, string];
    const claims = JSON.parse(Buffer.from(body, 'base64url').toString());
    const forged = Buffer.from(JSON.stringify({ ...claims, sub: 'someone-else' })).toString('base64url');
    const flip = (c: string) => (c === 'A' ? 'B' : 'A');
    for (const bad of [`${v}.${forged}.${sig}`, `${v}.${body}.${flip(sig[0]!)}${sig.slice(1)}`, `${tok}x`]) {
      expect(t.ctx.tokens.verify(bad)).toBeNull();
      const res = await t.post('/v1/PickupPoints/GetPickUpPoints', { pageNo: 1, pageSize: 10 }, bad);
      expect(res.status).toBe(401);
    }
    expect((await t.post('/v1/PickupPoints/GetPickUpPoints', { pageNo: 1, pageSize: 10 }, tok)).status).toBe(200);
  });

  it('answers unknown paths with 404 NotFound in the envelope', async () => {
    const res = await t.post('/v1/Nope/Nothing', {});
    expect(res.status).toBe(404);
    expect(res.body).toMatchObject({ success: false, error: 'NotFound' });
  });
});
