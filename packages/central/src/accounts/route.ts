// Route helper for the account calls. Like http/route.ts v1Post (bearer token, case-insensitive
// body keys, zod validation, envelope), plus "failures with data": some account calls answer a
// failed command with fields next to the error (CreateOrGetAccount's AccessDenied carries the
// existing userUid; SetAccountDetails on another tenant's account answers canManageUser false).
// A handler throws AccountFailure for those; the reply is HTTP 400 with success false, the code,
// the message and the data. The 400 schema is the response schema with every field optional, so
// plain errors (envelope only) pass it too.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { ErrorEnvelope } from '../http/envelope';
import { normalizeKeys } from '../http/keys';

export class AccountFailure extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly data: Record<string, unknown>,
    readonly status = 400,
  ) {
    super(message);
    this.name = 'AccountFailure';
  }
}

export interface AccountRouteDef<B extends z.ZodTypeAny, R extends z.ZodObject<any>> {
  path: string;
  summary: string;
  description?: string;
  body: B;
  response: R;
  /** false for multipart (the handler reads the parts itself) */
  jsonBody?: boolean;
  idempotent?: boolean;
  /** extra OpenAPI schema keys (e.g. consumes) */
  openapi?: Record<string, unknown>;
  handler: (body: z.infer<B>, req: FastifyRequest, reply: FastifyReply) => Promise<Omit<z.input<R>, 'success' | 'error' | 'message'>>;
}

export function accountPost<B extends z.ZodTypeAny, R extends z.ZodObject<any>>(app: FastifyInstance, def: AccountRouteDef<B, R>): void {
  const failed = def.response.partial().extend({ success: z.boolean(), error: z.string(), message: z.string() });
  app.withTypeProvider<ZodTypeProvider>().route({
    method: 'POST',
    url: def.path,
    schema: {
      summary: def.summary,
      description: def.description,
      tags: ['Account'],
      security: [{ bearerAuth: [] }],
      // For multipart the body schema only documents the parts (req.body stays null, so it must be nullish).
      body: def.body,
      ...(def.openapi ?? {}),
      response: { 200: def.response, 400: failed, 401: ErrorEnvelope, 413: ErrorEnvelope },
    },
    config: { auth: 'tenant', idempotent: def.idempotent ?? false, bodyType: def.jsonBody === false ? 'multipart' : 'json' },
    preValidation: (req, _reply, done) => {
      // A multipart handler reads the parts itself; any other body is ignored here and refused there.
      (req as { body: unknown }).body = def.jsonBody === false ? null : normalizeKeys(def.body, req.body);
      done();
    },
    handler: (async (req: FastifyRequest, reply: FastifyReply) => {
      try {
        const data = await def.handler(req.body as z.infer<B>, req, reply);
        return { ...data, success: true, error: null, message: null };
      } catch (e) {
        if (e instanceof AccountFailure) {
          reply.code(e.status);
          return { ...e.data, success: false, error: e.code, message: e.message };
        }
        throw e;
      }
    }) as never,
  });
}
