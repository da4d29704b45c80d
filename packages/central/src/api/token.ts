// POST /connect/token: OAuth 2 client credentials (form encoded), scope integration_api.
// Errors follow RFC 6749 section 5.2 (product.md): {error, error_description} with 400 or 401;
// throttled attempts get 429 slow_down and an overloaded verifier 503 temporarily_unavailable,
// both with Retry-After (docs/api.md, "Throttling and limits").
import type { FastifyError, FastifyInstance } from 'fastify';
import { z } from 'zod';
import { hasZodFastifySchemaValidationErrors } from 'fastify-type-provider-zod';
import { ApiError } from '../errors';
import type { AppContext } from '../context';
import type { TokenGuard } from '../auth/token-guard';

const TokenRequest = z.object({
  grant_type: z.string().optional(),
  client_id: z.string().optional(),
  client_secret: z.string().optional(),
  scope: z.string().optional(),
});

// The OAuth fields, plus the envelope (product.md: on every response, success or not).
const TokenResponse = z.object({
  access_token: z.string(),
  token_type: z.string(),
  expires_in: z.number().int(),
  scope: z.string(),
  success: z.literal(true),
  error: z.null(),
  message: z.null(),
});
// RFC 6749 5.2 error JSON. `error` doubles as the envelope's error code, and `success` and
// `message` carry the rest of the envelope (product.md: the envelope is on every response).
const OAuthError = z.object({ success: z.literal(false), error: z.string(), message: z.string(), error_description: z.string() });

function oauthError(error: string, error_description: string) {
  return { success: false as const, error, message: error_description, error_description };
}

// A fixed hash to verify against when the client is unknown, so both paths cost the same.
const DUMMY_HASH = 'scrypt$16384$8$1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA';

export async function tokenRoutes(app: FastifyInstance, ctx: AppContext, guard: TokenGuard) {
  // A body that cannot be parsed or fails validation (no body, a non-string field, another
  // Content-Type) is an OAuth invalid_request. The global handler would send the tenant envelope,
  // which the 400 response schema refuses (a 500). A 429 of the request limit is answered here
  // in the OAuth style too (slow_down); 413 and faults go on to the global handler.
  app.setErrorHandler((err: FastifyError, req, reply) => {
    const status = err.statusCode ?? 500;
    const isValidation = hasZodFastifySchemaValidationErrors(err) || !!err.validation;
    if (!(err instanceof ApiError) && (isValidation || (status >= 400 && status < 500 && status !== 413 && status !== 429))) {
      const v = (err.validation ?? [])[0] as { instancePath?: string; message?: string } | undefined;
      const field = (v?.instancePath ?? '').replace(/^\//, '').replace(/\//g, '.');
      const why = isValidation
        ? field
          ? `${field}: ${v?.message ?? 'invalid'}`
          : `request body: ${v?.message ?? 'invalid'}; send a form-encoded body (application/x-www-form-urlencoded)`
        : err.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE'
          ? `unsupported Content-Type ${req.headers['content-type'] ?? '(none)'}: send application/x-www-form-urlencoded`
          : `malformed request: ${err.message}`;
      return reply.code(400).header('cache-control', 'no-store').send(oauthError('invalid_request', why));
    }
    if ((err instanceof ApiError ? err.status : status) === 429) {
      // the per-address request limit (http.unauthenticatedRateLimitPerMinute), in OAuth style too
      const after = String(reply.getHeader('retry-after') ?? reply.getHeader('x-ratelimit-reset') ?? 60);
      return reply.code(429).header('retry-after', after).header('cache-control', 'no-store').send(oauthError('slow_down', err.message));
    }
    throw err;
  });

  app.post(
    '/connect/token',
    {
      schema: {
        summary: 'Obtain an access token (OAuth 2 client credentials)',
        tags: ['Authentication'],
        consumes: ['application/x-www-form-urlencoded'],
        body: TokenRequest,
        response: { 200: TokenResponse, 400: OAuthError, 401: OAuthError, 429: OAuthError, 503: OAuthError },
      },
      config: { rawEnvelope: true },
    },
    async (req, reply) => {
      const body = req.body as z.infer<typeof TokenRequest>;
      // Basic auth is the other standard way to pass client credentials.
      let clientId = body.client_id;
      let clientSecret = body.client_secret;
      const auth = req.headers.authorization;
      if (!clientId && auth?.startsWith('Basic ')) {
        // RFC 6749 2.3.1: percent-encoded id and secret, joined by the FIRST colon (RFC 7617: the
        // secret may contain colons). Malformed percent-encoding is a bad credential, not a fault.
        const decoded = Buffer.from(auth.slice(6), 'base64').toString('utf8');
        const colon = decoded.indexOf(':');
        const formDecode = (v: string) => {
          try {
            return decodeURIComponent(v); // '+' is kept as is: clients rarely form-encode it
          } catch {
            return undefined;
          }
        };
        if (colon > 0) {
          clientId = formDecode(decoded.slice(0, colon));
          clientSecret = formDecode(decoded.slice(colon + 1));
        }
      }
      const fail = (status: number, error: string, error_description: string) => reply.code(status as 400).header('cache-control', 'no-store').send(oauthError(error, error_description));
      if (!body.grant_type) return fail(400, 'invalid_request', 'grant_type is required');
      if (body.grant_type !== 'client_credentials') return fail(400, 'unsupported_grant_type', 'only client_credentials is supported');
      if (!clientId || !clientSecret) return fail(401, 'invalid_client', 'client_id and client_secret are required');
      const tenant = await ctx.db.kysely.selectFrom('tenants').select(['uid', 'secret_hash']).where('client_id', '=', clientId).executeTakeFirst();
      // scrypt on the thread pool, bounded; failures throttled per client id from this address
      // and per address (an unknown client id costs and counts the same as a wrong secret)
      const r = await guard.check(clientId, clientSecret, tenant?.secret_hash ?? DUMMY_HASH, !!tenant, req.ip);
      if (r.kind === 'throttled') {
        req.log.debug({ ns: 'central.auth', event: 'token_throttled', scope: r.scope, retryAfter: r.retryAfterSeconds }, 'client authentication throttled');
        reply.header('retry-after', String(r.retryAfterSeconds));
        const who = r.scope === 'client' ? 'for this client_id from this address' : 'from this address';
        return fail(429, 'slow_down', `too many failed attempts ${who}; retry after ${r.retryAfterSeconds} s`);
      }
      if (r.kind === 'busy') {
        reply.header('retry-after', String(r.retryAfterSeconds));
        return fail(503, 'temporarily_unavailable', `too many client authentications in progress; retry after ${r.retryAfterSeconds} s`);
      }
      if (r.kind === 'bad') {
        req.log.warn({ ns: 'central.auth', event: 'token_denied', ...(r.blockedMs ? { blockSeconds: Math.round(r.blockedMs / 1000), errorCode: 'AUTH_THROTTLED' } : {}) }, 'client authentication failed');
        return fail(401, 'invalid_client', 'unknown client or wrong secret');
      }
      const scopes = (body.scope ?? 'integration_api').split(' ').filter(Boolean);
      if (scopes.length === 0 || scopes.some((s) => s !== 'integration_api')) return fail(400, 'invalid_scope', 'the only scope is integration_api');
      const { token, expiresIn } = ctx.tokens.issue(tenant!.uid);
      return reply.header('cache-control', 'no-store').send({ access_token: token, token_type: 'Bearer', expires_in: expiresIn, scope: 'integration_api', success: true, error: null, message: null });
    },
  );
}
