// The OpenAPI document (/docs/json) must describe every tenant route with a request body schema and
// a response schema. Routes are enumerated from the app itself (an onRoute hook on an app built
// from the same plugin and context), so endpoints added later are checked without editing this file.
import Fastify, { type FastifyInstance, type RouteOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { centralPlugin } from '../src/app';
import { createTestService, type TestService } from './support/harness';

interface RouteInfo {
  method: string;
  url: string;
  hidden: boolean;
}

/** Builds the central plugin on a fresh fastify instance and records every route it registers. */
async function enumerateRoutes(t: TestService): Promise<{ app: FastifyInstance; routes: RouteInfo[] }> {
  const routes: RouteInfo[] = [];
  const app = Fastify({ bodyLimit: t.ctx.config.http.bodyLimitBytes });
  app.addHook('onRoute', (r: RouteOptions) => {
    const methods = Array.isArray(r.method) ? r.method : [r.method];
    for (const m of methods) routes.push({ method: String(m).toUpperCase(), url: r.url, hidden: !!(r.schema as { hide?: boolean } | undefined)?.hide });
  });
  await app.register(centralPlugin, { ctx: t.ctx });
  await app.ready();
  return { app, routes };
}

const isApiRoute = (r: RouteInfo) => (r.url.startsWith('/v1/') || r.url.startsWith('/connect/')) && r.method !== 'HEAD' && r.method !== 'OPTIONS';

function schemaHasShape(s: any): boolean {
  if (!s || typeof s !== 'object') return false;
  if (s.type === 'object' && s.properties && typeof s.properties === 'object') return true;
  for (const k of ['anyOf', 'oneOf', 'allOf'] as const) if (Array.isArray(s[k]) && s[k].some(schemaHasShape)) return true;
  return false;
}

function collectRefs(node: unknown, out: string[] = []): string[] {
  if (Array.isArray(node)) node.forEach((n) => collectRefs(n, out));
  else if (node && typeof node === 'object') {
    for (const [k, v] of Object.entries(node)) {
      if (k === '$ref' && typeof v === 'string') out.push(v);
      else collectRefs(v, out);
    }
  }
  return out;
}

function resolvePointer(doc: any, ref: string): unknown {
  if (!ref.startsWith('#/')) return undefined;
  return ref
    .slice(2)
    .split('/')
    .map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'))
    .reduce((cur: any, key) => (cur == null ? undefined : cur[key]), doc);
}

/** Follows a top-level $ref (components) so shapes are checked, not references. */
function deref(doc: any, s: any): any {
  for (let i = 0; i < 10 && s && typeof s === 'object' && typeof s.$ref === 'string'; i++) s = resolvePointer(doc, s.$ref);
  return s;
}

function problemsOf(doc: any, routes: RouteInfo[]): string[] {
  const problems: string[] = [];
  for (const r of routes.filter(isApiRoute)) {
    const where = `${r.method} ${r.url}`;
    if (r.hidden) {
      problems.push(`${where}: hidden from the document`);
      continue;
    }
    const op = doc.paths?.[r.url]?.[r.method.toLowerCase()];
    if (!op) {
      problems.push(`${where}: missing from the document`);
      continue;
    }
    const content = op.requestBody?.content;
    const bodySchemas = content ? Object.values<any>(content).map((c) => deref(doc, c.schema)) : [];
    if (!bodySchemas.length || !bodySchemas.some(schemaHasShape)) problems.push(`${where}: no request body schema`);
    const okSchema = deref(doc, op.responses?.['200']?.content?.['application/json']?.schema);
    if (!schemaHasShape(okSchema)) problems.push(`${where}: no 200 response schema`);
    if (r.url.startsWith('/v1/')) {
      const props = okSchema?.properties ?? {};
      for (const f of ['success', 'error', 'message']) if (!props[f]) problems.push(`${where}: 200 response lacks envelope field ${f}`);
      if (!op.responses?.['400'] || !op.responses?.['401']) problems.push(`${where}: 400/401 error envelopes not documented`);
      if (!JSON.stringify(op.security ?? []).includes('bearerAuth')) problems.push(`${where}: no bearerAuth security`);
      if (!op.summary) problems.push(`${where}: no summary`);
    }
  }
  return problems;
}

describe('OpenAPI document and Swagger UI', () => {
  let t: TestService;
  let side: FastifyInstance;
  let routes: RouteInfo[];
  let doc: any;

  beforeAll(async () => {
    t = await createTestService('sqlite', { site: null });
    ({ app: side, routes } = await enumerateRoutes(t));
    const res = await t.app.inject({ method: 'GET', url: '/docs/json' });
    expect(res.statusCode).toBe(200);
    expect(String(res.headers['content-type'])).toMatch(/application\/json/);
    doc = res.json();
  });
  afterAll(async () => {
    await side?.close();
    await t?.close();
  });

  it('is an OpenAPI 3 document with info, paths and the bearer security scheme', () => {
    expect(doc.openapi).toMatch(/^3\.\d+\.\d+$/);
    expect(typeof doc.info?.title).toBe('string');
    expect(doc.info.title.length).toBeGreaterThan(0);
    expect(typeof doc.info?.version).toBe('string');
    expect(doc.paths && typeof doc.paths).toBe('object');
    expect(doc.components?.securitySchemes?.bearerAuth).toMatchObject({ type: 'http', scheme: 'bearer' });
    // every operation has a responses object; every $ref resolves
    for (const [p, ops] of Object.entries<any>(doc.paths)) {
      expect(p.startsWith('/'), p).toBe(true);
      for (const [m, op] of Object.entries<any>(ops)) {
        expect(['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace', 'parameters', 'summary', 'description', 'servers']).toContain(m);
        if (typeof op === 'object' && !Array.isArray(op) && m !== 'parameters') expect(op.responses, `${m} ${p}`).toBeTypeOf('object');
      }
    }
    const dangling = collectRefs(doc).filter((r) => resolvePointer(doc, r) === undefined);
    expect(dangling).toEqual([]);
  });

  it('enumerates the routes of the app (sanity: the known endpoints are found)', () => {
    const urls = routes.filter(isApiRoute).map((r) => `${r.method} ${r.url}`);
    expect(urls).toContain('POST /connect/token');
    for (const name of ['GetPickUpPoints', 'GetPickUpPointAvailability', 'GetLockers', 'GetAvailableLockers', 'GetLockerKinds']) {
      expect(urls).toContain(`POST /v1/PickupPoints/${name}`);
    }
    // the side app registers exactly the routes the real app answers
    for (const r of routes.filter(isApiRoute)) expect(t.app.hasRoute({ method: r.method as 'POST', url: r.url }), r.url).toBe(true);
  });

  it('documents every /v1/ and /connect/ route with a request body schema and a 200 response schema', () => {
    const problems = problemsOf(doc, routes);
    expect(problems, problems.join('\n')).toEqual([]);
  });

  it('the check catches a route without schemas (it can fail)', async () => {
    const extra: RouteInfo[] = [];
    const app = Fastify();
    app.addHook('onRoute', (r: RouteOptions) => {
      extra.push({ method: String(r.method).toUpperCase(), url: r.url, hidden: false });
    });
    await app.register(centralPlugin, { ctx: t.ctx });
    app.post('/v1/Zz/Undocumented', { config: { auth: 'tenant' } }, async () => ({ success: true, error: null, message: null }));
    await app.ready();
    try {
      const problems = problemsOf(app.swagger(), extra);
      expect(problems).toEqual(expect.arrayContaining(['POST /v1/Zz/Undocumented: no request body schema', 'POST /v1/Zz/Undocumented: no 200 response schema']));
      expect(problems.every((p) => p.includes('/v1/Zz/Undocumented'))).toBe(true);
    } finally {
      await app.close();
    }
  });

  it('shows request field constraints (paging limits) in the schemas', () => {
    const body = doc.paths['/v1/PickupPoints/GetLockers'].post.requestBody.content['application/json'].schema;
    expect(body.required).toEqual(expect.arrayContaining(['pageNo', 'pageSize', 'pupUid']));
    expect(body.properties.pageSize).toMatchObject({ type: 'integer', minimum: 1, maximum: 500 });
    const res = doc.paths['/v1/PickupPoints/GetPickUpPoints'].post.responses['200'].content['application/json'].schema;
    expect(res.required).toEqual(expect.arrayContaining(['success', 'error', 'message', 'items', 'pageNo', 'pageSize', 'totalItems', 'totalPages']));
  });

  it('serves the Swagger UI as an HTML page at /docs', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/docs' });
    const page = res.statusCode >= 300 && res.statusCode < 400 ? await t.app.inject({ method: 'GET', url: String(res.headers.location) }) : res;
    expect(page.statusCode).toBe(200);
    expect(String(page.headers['content-type'])).toMatch(/text\/html/);
    expect(page.body).toMatch(/<html/i);
    expect(page.body).toMatch(/swagger/i);
  });
});
