// Builds the central HTTP service as a fastify plugin. Only server.ts / service.ts listen.
import crypto from 'node:crypto';
import http from 'node:http';
import Fastify, { LogController, type FastifyContextConfig, type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import formbody from '@fastify/formbody';
import helmet, { type FastifyHelmetOptions } from '@fastify/helmet';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import rateLimit from '@fastify/rate-limit';
import { jsonSchemaTransform, validatorCompiler, hasZodFastifySchemaValidationErrors } from 'fastify-type-provider-zod';
import { serializerCompiler } from './http/serializer';
import type { AppContext } from './context';
import { ApiError } from './errors';
import { PrincipalCache } from './auth/principal';
import { TokenGuard } from './auth/token-guard';
import { tokenRoutes } from './api/token';
import { pickupPointRoutes } from './api/pickup-points';
import { accountRoutes } from './api/accounts';
import { logisticsRoutes } from './api/logistics';
import { platformRoutes } from './api/platform';
import { idempotencyPlugin } from './http/idempotency';
import { readyRoutes } from './http/ready';
import { findNul } from './nul';
import { redactUrl, registerRouteWords } from '@locker/common';
import { centralMetrics, requestOutcome } from './ops/metrics';

/**
 * The headers helmet sets with these options, in its order and spelling: taken once from a
 * throwaway fastify instance with @fastify/helmet (the same package and configuration as before),
 * so every request only sets them instead of running helmet's middleware.
 */
async function securityHeaders(opts: FastifyHelmetOptions): Promise<[string, string | string[]][]> {
  const probe = Fastify({ logger: false });
  await probe.register(helmet, { global: true, ...opts });
  probe.get('/', async (_req, reply) => (reply.raw as http.ServerResponse & { getRawHeaderNames(): string[] }).getRawHeaderNames().map((n) => [n, reply.raw.getHeader(n)]));
  try {
    const r = await probe.inject({ method: 'GET', url: '/' });
    return (r.json() as [string, string | number | string[]][]).map(([n, v]) => [n, typeof v === 'number' ? String(v) : v]);
  } finally {
    await probe.close();
  }
}

/**
 * The route's config and URL pattern, read once per request: fastify's request.routeOptions
 * builds a new object of 13 fields on every read, and the hooks read it several times.
 */
export function routeOf(req: FastifyRequest): { config: FastifyContextConfig | undefined; url: string | undefined } {
  let r = req.lockerRoute;
  if (!r) {
    const o = req.routeOptions;
    r = req.lockerRoute = { config: o.config, url: o.url };
  }
  return r;
}

/** the envelope error code of an answer (the metrics' outcome label; ops/metrics.ts) */
const replyErrorCodes = new WeakMap<FastifyReply, string>();

function envelopeError(reply: FastifyReply, status: number, code: string, message: string) {
  replyErrorCodes.set(reply, code);
  return reply.code(status).type('application/json; charset=utf-8').send({ success: false, error: code, message });
}

function fieldPath(instancePath: string | undefined): string {
  return (instancePath ?? '').replace(/^\//, '').replace(/\//g, '.');
}

export const centralPlugin = fp<{ ctx: AppContext }>(async (app, { ctx }) => {
  const principals = new PrincipalCache(ctx.db.kysely);
  app.decorate('principals', principals);
  app.decorateRequest('tenant', null as never);
  app.decorateRequest('lockerRoute', null as never);
  app.setValidatorCompiler(validatorCompiler);
  // responses: compiled writers with the output of the zod parse + JSON.stringify (http/serializer.ts)
  app.setSerializerCompiler(serializerCompiler);

  await app.register(formbody);

  // Security headers on every answer, the docs page (/docs, Swagger UI) above all: a CSP that
  // allows only the page's own scripts and styles (Swagger UI has no inline script), no framing,
  // no MIME sniffing, no referrer. No upgrade-insecure-requests: the service may be reached over
  // plain HTTP on a private network (TLS ends at the proxy), where upgrading would break the page.
  // The headers are helmet's for this configuration, worked out once (securityHeaders below):
  // @fastify/helmet builds a new helmet middleware and parses the CSP again on every request.
  const headers = await securityHeaders({
    contentSecurityPolicy: {
      useDefaults: false,
      directives: {
        defaultSrc: ["'self'"],
        baseUri: ["'self'"],
        connectSrc: ["'self'"],
        fontSrc: ["'self'", 'data:'],
        formAction: ["'self'"],
        frameAncestors: ["'none'"],
        imgSrc: ["'self'", 'data:'],
        objectSrc: ["'none'"],
        scriptSrc: ["'self'"],
        scriptSrcAttr: ["'none'"],
        // Swagger UI's bundle adds one <style> element of its own: allowed by its hash (test/http-envelope.test.ts
        // opens the page in Chromium and fails on any CSP violation, e.g. after a Swagger UI upgrade)
        styleSrc: ["'self'", "'sha256-RL3ie0nH+Lzz2YNqQN83mnU0J1ot4QL7b99vMdIX99w='"],
      },
    },
    frameguard: { action: 'deny' },
    referrerPolicy: { policy: 'no-referrer' },
    // HSTS is the TLS-terminating proxy's to send; over plain HTTP browsers ignore it anyway
    strictTransportSecurity: false,
  });
  app.addHook('onRequest', (req, reply, done) => {
    routeOf(req);
    const res = reply.raw;
    for (let i = 0; i < headers.length; i++) res.setHeader(headers[i]![0], headers[i]![1]);
    done();
  });

  await app.register(swagger, {
    openapi: {
      openapi: '3.0.3',
      info: {
        title: 'Locker Shipment and Account Integration API',
        version: '1.0.0',
        description: 'Tenant API of the parcel-locker platform. Every /v1/ call is a POST with a bearer token; every response carries the envelope {success, error, message}. See docs/api.md.',
      },
      components: { securitySchemes: { bearerAuth: { type: 'http', scheme: 'bearer' } } },
    },
    transform: jsonSchemaTransform,
  });
  await app.register(swaggerUi, { routePrefix: '/docs' });

  const tokenGuard = new TokenGuard(ctx.config, ctx.clock);
  app.decorate('tokenGuard', tokenGuard);

  const { rateLimitPerMinute: perTenant, unauthenticatedRateLimitPerMinute: perAddress } = ctx.config.http;
  if (perTenant > 0 || perAddress > 0) {
    await app.register(rateLimit, {
      // http.rateLimitPerMinute per tenant, http.unauthenticatedRateLimitPerMinute per address
      max: (_req, key) => (key.startsWith('client:') ? perTenant : perAddress),
      // a budget that is 0 is off
      allowList: (_req, key) => (key.startsWith('client:') ? perTenant === 0 : perAddress === 0),
      timeWindow: 60_000,
      // One budget per tenant, however many tokens it holds; a request without a valid token
      // (such as /connect/token) counts against its IP address. req.ip honours X-Forwarded-For
      // only with http.trustProxy, so a client cannot pick a fresh address per request.
      keyGenerator: async (req) => {
        const m = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? '');
        const claims = m ? ctx.tokens.verify(m[1]!) : null;
        const p = claims ? await principals.get(claims.sub) : null;
        return p ? `client:${p.clientId}` : `ip:${req.ip}`;
      },
      errorResponseBuilder: (_req, c) => {
        const err = new ApiError('RateLimited', `rate limit of ${c.max} requests per minute exceeded; retry after ${Math.ceil(c.ttl / 1000)} s`, 429);
        return err;
      },
    });
  }

  // One log line per request, with its id; never bodies, never the Authorization header. The path
  // is the route's pattern, or for an unknown route the path as sent with e-mail-like and
  // code-like segments redacted (a mistyped URL may carry an address or a PIN); no query string.
  const metricsOn = ctx.config.metrics.enabled;
  // (The hooks on every request are callback-style, not async: no promise and microtask per hook.)
  app.addHook('onResponse', (req, reply, done) => {
    const url = routeOf(req).url;
    req.log.info(
      { ns: 'central.http', method: req.method, path: url ?? redactUrl(req.url.split('?')[0]!), status: reply.statusCode, ms: Math.round(reply.elapsedTime * 10) / 10, tenant: req.tenant?.clientId },
      'request',
    );
    // request rate and latency per route template and outcome (never the raw URL): metrics.enabled only
    if (metricsOn) centralMetrics.httpRequestDuration.observe({ method: req.method, route: url ?? 'unmatched', outcome: requestOutcome(reply.statusCode, replyErrorCodes.get(reply)) }, reply.elapsedTime / 1000);
    done();
  });
  app.addHook('onSend', (req, reply, payload, done) => {
    reply.header('x-request-id', req.id);
    done(null, payload);
  });

  // Authentication of /v1/ routes (route config auth: 'tenant'). A thrown error answers as an
  // async hook's rejection did; the principal comes from its cache without a promise when fresh.
  const unknownClient = () => new ApiError('Unauthorized', 'the token belongs to no known client', 401);
  app.addHook('onRequest', (req, _reply, done) => {
    if (routeOf(req).config?.auth !== 'tenant') return done();
    const h = req.headers.authorization;
    const m = h ? /^Bearer\s+(\S+)\s*$/i.exec(h) : null;
    if (!m) throw new ApiError('Unauthorized', 'missing bearer access token (Authorization: Bearer <token>)', 401);
    const claims = ctx.tokens.verify(m[1]!);
    if (!claims) throw new ApiError('Unauthorized', 'invalid or expired access token', 401);
    const cached = principals.peek(claims.sub);
    if (cached === undefined) {
      // not cached (or stale): fastify waits for the returned promise instead of done
      return principals.get(claims.sub).then((p) => {
        if (!p) throw unknownClient();
        req.tenant = p;
      });
    }
    if (!cached) throw unknownClient();
    req.tenant = cached;
    done();
  });

  // Strict content types: a call with a JSON body (route config bodyType 'json', http/route.ts and
  // accounts/route.ts) takes application/json only; a form-encoded or text body is refused before
  // it is parsed (only /connect/token takes forms, UploadAccountSuggestions multipart).
  app.addHook('preParsing', (req, _reply, payload, done) => {
    if (routeOf(req).config?.bodyType !== 'json') return done(null, payload);
    const ct = req.headers['content-type'];
    if (ct === undefined) return done(null, payload); // no body: the body schema answers (request body: ...)
    const type = ct.split(';')[0]!.trim().toLowerCase();
    if (type !== 'application/json') throw new ApiError('InvalidRequest', `unsupported Content-Type ${ct.slice(0, 100)}: this call takes a JSON body, send Content-Type: application/json`, 400);
    const enc = req.headers['content-encoding'];
    if (enc !== undefined && enc.trim().toLowerCase() !== 'identity') throw new ApiError('InvalidRequest', `unsupported Content-Encoding ${enc.slice(0, 100)}: send the JSON body uncompressed`, 400);
    done(null, payload);
  });

  // While the service shuts down, requests still arriving on open connections are answered 503
  // with the envelope (fastify's own 503 has another body: return503OnClosing is off in buildApp).
  let closing = false;
  app.addHook('preClose', async () => {
    closing = true;
  });
  app.addHook('onRequest', (_req, reply, done) => {
    if (!closing) return done();
    reply.header('connection', 'close');
    envelopeError(reply, 503, 'InternalError', 'the service is shutting down; retry'); // answered: no done()
  });

  // PostgreSQL text cannot hold U+0000 (the query fails with a 500), so a NUL anywhere in the
  // JSON body of a /v1/ call is refused up front as InvalidRequest naming the field, on both
  // engines alike. A global hook runs before every route's own preValidation.
  app.addHook('preValidation', (req, _reply, done) => {
    if (routeOf(req).config?.auth !== 'tenant' || req.body == null || typeof req.body !== 'object') return done();
    const at = findNul(req.body);
    if (at) throw new ApiError('InvalidRequest', `${at}: must not contain the NUL character (U+0000)`, 400);
    done();
  });

  app.setNotFoundHandler((req, reply) => envelopeError(reply, 404, 'NotFound', `no such endpoint: ${req.method} ${req.url.split('?')[0]}`));

  app.setErrorHandler((err: FastifyError, req: FastifyRequest, reply: FastifyReply) => {
    if (err instanceof ApiError) {
      for (const [k, v] of Object.entries(err.headers)) reply.header(k, v);
      if (err.status === 429 && !reply.getHeader('retry-after')) reply.header('retry-after', String(reply.getHeader('x-ratelimit-reset') ?? 60));
      return envelopeError(reply, err.status, err.code, err.message);
    }
    if (hasZodFastifySchemaValidationErrors(err) || err.validation) {
      const v = (err.validation ?? [])[0] as { instancePath?: string; message?: string; params?: any } | undefined;
      const path = fieldPath(v?.instancePath);
      const where = err.validationContext && err.validationContext !== 'body' ? `${err.validationContext}.` : '';
      const msg = path ? `${where}${path}: ${v?.message ?? 'invalid'}` : `request ${err.validationContext ?? 'body'}: ${v?.message ?? 'invalid'}`;
      return envelopeError(reply, 400, 'InvalidRequest', msg);
    }
    if (err.code === 'FST_ERR_CTP_BODY_TOO_LARGE' || err.statusCode === 413) {
      return envelopeError(reply, 413, 'InvalidRequest', `request body too large (limit ${ctx.config.http.bodyLimitBytes} bytes)`);
    }
    if (err.statusCode === 429) return envelopeError(reply.header('retry-after', '60'), 429, 'RateLimited', err.message);
    if (err.statusCode && err.statusCode >= 400 && err.statusCode < 500) {
      // Malformed JSON, unsupported media type, empty body and the like: 400. Other client errors
      // of the framework and its plugins keep their status (416 of a docs file's Range, ...).
      const msg = err.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE' ? `unsupported Content-Type ${req.headers['content-type'] ?? '(none)'}: send application/json` : `malformed request: ${err.message}`;
      const status = err.statusCode === 415 || err.statusCode === 400 || !http.STATUS_CODES[err.statusCode] ? 400 : err.statusCode;
      return envelopeError(reply, status, 'InvalidRequest', msg);
    }
    if (err.code === 'FST_ERR_RESPONSE_SERIALIZATION' || (err as any).name === 'ResponseSerializationError') {
      req.log.error({ ns: 'central.http', err: { message: err.message, code: err.code } }, 'response failed its schema');
    } else {
      req.log.error({ ns: 'central.http', err }, 'unhandled error');
    }
    return envelopeError(reply, 500, 'InternalError', `internal error (request ${req.id})`);
  });

  await idempotencyPlugin(app, ctx);

  await app.register(async (scope) => tokenRoutes(scope, ctx, tokenGuard));
  await app.register(async (scope) => pickupPointRoutes(scope, ctx));
  await app.register(async (scope) => accountRoutes(scope, ctx));
  await app.register(async (scope) => logisticsRoutes(scope, ctx));
  await app.register(async (scope) => platformRoutes(scope, ctx));

  app.get('/health', { schema: { hide: true } }, async () => ({ success: true, error: null, message: null, status: 'ok' }));
  // /ready: the database answers and the MQTT bus is up (http/ready.ts); /health: the process answers
  readyRoutes(app, ctx);
});

declare module 'fastify' {
  interface FastifyRequest {
    /** routeOf(): the route's config and URL, read once per request */
    lockerRoute: { config: FastifyContextConfig | undefined; url: string | undefined } | null;
  }
  interface FastifyInstance {
    principals: PrincipalCache;
    /** /connect/token: failed-login throttling and the bounded secret verifier */
    tokenGuard: TokenGuard;
  }
}

export interface BuildAppOptions {
  /** log through ctx.log (default true); tests may pass false */
  logRequests?: boolean;
}

/**
 * Errors fastify raises before any hook or the error handler runs (a URL whose percent-encoding
 * is malformed, an over-long path parameter, a failing async route constraint): answered 400 with
 * the envelope like every other malformed request, not fastify's own error body.
 */
function frameworkError(err: FastifyError, req: FastifyRequest, reply: FastifyReply) {
  const msg =
    err.code === 'FST_ERR_BAD_URL'
      ? `malformed request URL: ${req.url.split('?')[0]} is not validly percent-encoded`
      : err.code === 'FST_ERR_MAX_PARAM_LENGTH'
        ? 'malformed request URL: a path parameter is too long'
        : `malformed request: ${err.message}`;
  return envelopeError(reply, 400, 'InvalidRequest', msg);
}

/**
 * Errors of the HTTP server itself, before fastify sees a request (a request not complete within
 * http.requestTimeoutMs, oversized headers, unparsable HTTP): answered on the raw socket with the
 * envelope, then the connection is closed (as fastify's default handler does, with its own body).
 */
function clientError(requestTimeoutMs: number) {
  return function (this: FastifyInstance, err: NodeJS.ErrnoException, socket: import('node:net').Socket) {
    if (err.code === 'ECONNRESET' || socket.destroyed) return;
    const [status, message] =
      err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? [408, `request not received completely within ${requestTimeoutMs} ms`]
        : err.code === 'HPE_HEADER_OVERFLOW'
          ? [431, 'request headers too large']
          : [400, 'malformed HTTP request'];
    const body = JSON.stringify({ success: false, error: 'InvalidRequest', message });
    this.log.debug({ ns: 'central.http', code: err.code, status }, 'client error');
    if (socket.writable) {
      socket.write(`HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nContent-Type: application/json; charset=utf-8\r\nConnection: close\r\n\r\n${body}`);
    }
    socket.destroy();
  };
}

export async function buildApp(ctx: AppContext, opts: BuildAppOptions = {}): Promise<FastifyInstance> {
  const { requestTimeoutMs } = ctx.config.http;
  const app = Fastify({
    frameworkErrors: frameworkError,
    clientErrorHandler: clientError(requestTimeoutMs),
    // A request must be complete (headers and body) within http.requestTimeoutMs, else Node
    // answers 408 and closes the connection. Node checks that on a timer (30 s by default), so the
    // check runs often enough for the configured timeout; headersTimeout may not exceed it.
    requestTimeout: requestTimeoutMs,
    http: requestTimeoutMs > 0 ? { requestTimeout: requestTimeoutMs, headersTimeout: Math.min(60_000, requestTimeoutMs), connectionsCheckingInterval: Math.max(50, Math.min(1000, Math.floor(requestTimeoutMs / 2))) } : {},
    loggerInstance: opts.logRequests === false ? undefined : ctx.log.child({ ns: 'central.http' }),
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: ctx.config.http.bodyLimitBytes,
    genReqId: (req) => {
      const given = req.headers['x-request-id'];
      return typeof given === 'string' && /^[A-Za-z0-9._-]{1,64}$/.test(given) ? given : crypto.randomUUID();
    },
    trustProxy: ctx.config.http.trustProxy,
    return503OnClosing: false,
    ajv: { customOptions: { coerceTypes: false } },
  });
  // the routes' own long words stay readable in logged paths (redactUrl redacts other letter runs)
  app.addHook('onRoute', (r) => registerRouteWords([r.url]));
  // An Expect header other than 100-continue: Node answers a bare 417 unless someone listens
  app.server.on('checkExpectation', (req: http.IncomingMessage, res: http.ServerResponse) => {
    const body = JSON.stringify({ success: false, error: 'InvalidRequest', message: `unsupported Expect header ${String(req.headers.expect ?? '').slice(0, 100)}: only 100-continue is supported` });
    res.writeHead(417, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body), 'x-content-type-options': 'nosniff' });
    res.end(body);
  });
  await app.register(centralPlugin, { ctx });
  await app.ready();
  return app as unknown as FastifyInstance;
}
