// POST /connect/token: OAuth 2 client credentials (form encoded), scope integration_api.
// Errors follow RFC 6749 section 5.2 (product.md): {error, error_description} with 400 or 401.
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { AppContext } from '../context';
import { verifySecret } from '../auth/secrets';

const TokenRequest = z.object({
  grant_type: z.string().optional(),
  client_id: z.string().optional(),
  client_secret: z.string().optional(),
  scope: z.string().optional(),
});

const TokenResponse = z.object({ access_token: z.string(), token_type: z.string(), expires_in: z.number().int(), scope: z.string() });
const OAuthError = z.object({ error: z.string(), error_description: z.string() });

// A fixed hash to verify against when the client is unknown, so both paths cost the same.
const DUMMY_HASH = 'scrypt$16384$8$1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA';

export async function tokenRoutes(app: FastifyInstance, ctx: AppContext) {
  app.post(
    '/connect/token',
    {
      schema: {
        summary: 'Obtain an access token (OAuth 2 client credentials)',
        tags: ['Authentication'],
        consumes: ['application/x-www-form-urlencoded'],
        body: TokenRequest,
        response: { 200: TokenResponse, 400: OAuthError, 401: OAuthError },
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
      const fail = (status: number, error: string, error_description: string) => reply.code(status as 400).header('cache-control', 'no-store').send({ error, error_description });
      if (!body.grant_type) return fail(400, 'invalid_request', 'grant_type is required');
      if (body.grant_type !== 'client_credentials') return fail(400, 'unsupported_grant_type', 'only client_credentials is supported');
      if (!clientId || !clientSecret) return fail(401, 'invalid_client', 'client_id and client_secret are required');
      const tenant = await ctx.db.kysely.selectFrom('tenants').select(['uid', 'secret_hash']).where('client_id', '=', clientId).executeTakeFirst();
      const good = verifySecret(clientSecret, tenant?.secret_hash ?? DUMMY_HASH) && !!tenant;
      if (!good) {
        req.log.warn({ ns: 'central.auth', event: 'token_denied' }, 'client authentication failed');
        return fail(401, 'invalid_client', 'unknown client or wrong secret');
      }
      const scopes = (body.scope ?? 'integration_api').split(' ').filter(Boolean);
      if (scopes.length === 0 || scopes.some((s) => s !== 'integration_api')) return fail(400, 'invalid_scope', 'the only scope is integration_api');
      const { token, expiresIn } = ctx.tokens.issue(tenant!.uid);
      return reply.header('cache-control', 'no-store').send({ access_token: token, token_type: 'Bearer', expires_in: expiresIn, scope: 'integration_api' });
    },
  );
}
