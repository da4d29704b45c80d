// Route definition for the tenant API: every /v1/ call is a POST with a JSON body, needs a bearer
// token, and answers inside the envelope. One helper does all of that so route modules only
// declare schemas and a handler. The schemas serve validation, serialization and OpenAPI.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import type { z } from 'zod';
import { ErrorEnvelope } from './envelope';
import { normalizeKeys } from './keys';
import { idempotencyScope } from './idempotency';

export interface V1RouteDef<B extends z.ZodTypeAny, R extends z.ZodTypeAny> {
  path: string;
  summary: string;
  description?: string;
  tags: string[];
  body: B;
  /** the response schema, built with envelope() or paged() */
  response: R;
  /** false for calls that take no JSON body (multipart upload) */
  jsonBody?: boolean;
  /** honours an Idempotency-Key header (create and cancel calls) */
  idempotent?: boolean;
  /** answers only on staging; on production the path is unknown (404 NotFound) */
  stagingOnly?: boolean;
  handler: (body: z.infer<B>, req: FastifyRequest) => Promise<Omit<z.input<R>, 'success' | 'error' | 'message'>>;
}

export function v1Post<B extends z.ZodTypeAny, R extends z.ZodTypeAny>(app: FastifyInstance, def: V1RouteDef<B, R>, opts: { environment?: string } = {}): void {
  if (def.stagingOnly && opts.environment !== 'staging') return;
  app.withTypeProvider<ZodTypeProvider>().route({
    method: 'POST',
    url: def.path,
    schema: {
      summary: def.summary,
      description: def.description,
      tags: def.tags,
      security: [{ bearerAuth: [] }],
      ...(def.jsonBody === false ? {} : { body: def.body }),
      response: { 200: def.response, 400: ErrorEnvelope, 401: ErrorEnvelope },
    },
    config: { auth: 'tenant', idempotent: def.idempotent ?? false, bodyType: def.jsonBody === false ? 'none' : 'json' },
    preValidation: (req, _reply, done) => {
      if (def.jsonBody !== false) (req as { body: unknown }).body = normalizeKeys(def.body, req.body);
      done();
    },
    handler: (async (req: FastifyRequest) => {
      // an Idempotency-Key reservation travels with the handler's work (its jobs mark it in their
      // own transaction: http/idempotency.ts). No closure per request: the arguments go through
      // AsyncLocalStorage.run (a named closure also costs a defineProperty under tsx's keepNames).
      const body = req.body as z.infer<B>;
      const data = await (req.idempotency ? idempotencyScope.run(req.idempotency, def.handler, body, req) : def.handler(body, req));
      return { ...data, success: true, error: null, message: null };
    }) as never,
  });
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /** 'tenant' requires a valid bearer token and sets request.tenant */
    auth?: 'tenant';
    /** the route answers in its own format (OAuth token endpoint), not the envelope */
    rawEnvelope?: boolean;
    /** the route honours an Idempotency-Key header */
    idempotent?: boolean;
    /** 'json': the body must be sent as application/json (app.ts refuses other content types) */
    bodyType?: 'json' | 'multipart' | 'none';
  }
}
