// The committed generated types (src/generated/api.ts) must be what openapi-typescript makes of
// the OpenAPI document of the service in this tree right now: the test builds the document (a
// central service on a temp SQLite store, nothing listening: scripts/openapi.ts), generates the
// types into a temp file and compares it with the committed file byte for byte. A change to any
// request or response schema of the service without `npm run generate:client` fails here.
// Also: the client's rule for which calls get an Idempotency-Key matches the routes the service
// declares idempotent.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Fastify, { type RouteOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { centralOpenApiDocument, GENERATED_FILE, renderTypes } from '../scripts/openapi';
import { centralPlugin } from '../../central/src/app';
import { createTestService, type TestService } from '../../central/test/support/harness';
import { isIdempotentPath } from '../src/index';

describe('generated types', () => {
  let doc: Awaited<ReturnType<typeof centralOpenApiDocument>>;
  let tmp: string;

  beforeAll(async () => {
    doc = await centralOpenApiDocument();
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-client-types-'));
  });
  afterAll(() => {
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('the committed src/generated/api.ts is what the current OpenAPI document generates (run `npm run generate:client` when this fails)', async () => {
    const fresh = path.join(tmp, 'api.ts');
    fs.writeFileSync(fresh, await renderTypes(doc));
    const committed = fs.readFileSync(GENERATED_FILE, 'utf8');
    const generated = fs.readFileSync(fresh, 'utf8');
    if (committed !== generated) {
      // name the first line that differs, so the failure says what changed
      const a = committed.split('\n');
      const b = generated.split('\n');
      let i = 0;
      while (i < Math.max(a.length, b.length) && a[i] === b[i]) i++;
      expect.fail(`packages/client/src/generated/api.ts is stale (first difference at line ${i + 1}: committed ${JSON.stringify(a[i])}, generated ${JSON.stringify(b[i])}): run npm run generate:client and commit the result`);
    }
    expect(committed).toBe(generated);
  });

  it('the comparison sees a schema change (it can fail): a new response field gives other types', async () => {
    const changed = structuredClone(doc) as any;
    const schema = changed.paths['/v1/Logistics/CreateLocalShipment'].post.responses['200'].content['application/json'].schema;
    schema.properties.addedByTest = { type: 'string' };
    const text = await renderTypes(changed);
    expect(text).not.toBe(fs.readFileSync(GENERATED_FILE, 'utf8'));
    expect(text).toContain('addedByTest?: string');
  });

  it('every /v1/ and /connect/ route of the document is in the committed types', () => {
    const committed = fs.readFileSync(GENERATED_FILE, 'utf8');
    const paths = Object.keys(doc.paths ?? {}).filter((p) => p.startsWith('/v1/') || p.startsWith('/connect/'));
    expect(paths.length).toBeGreaterThan(40);
    for (const p of paths) expect(committed, p).toContain(`"${p}": {`);
  });
});

describe('Idempotency-Key rule', () => {
  let t: TestService;
  beforeAll(async () => {
    t = await createTestService('sqlite', { site: null });
  });
  afterAll(async () => {
    await t?.close();
  });

  it('isIdempotentPath is true exactly for the routes the service declares idempotent', async () => {
    const routes: { url: string; idempotent: boolean }[] = [];
    const app = Fastify();
    app.addHook('onRoute', (r: RouteOptions) => {
      if (r.url.startsWith('/v1/') && r.method === 'POST') routes.push({ url: r.url, idempotent: !!(r.config as { idempotent?: boolean } | undefined)?.idempotent });
    });
    await app.register(centralPlugin, { ctx: t.ctx });
    await app.ready();
    await app.close();
    expect(routes.length).toBeGreaterThan(40);
    const declared = routes.filter((r) => r.idempotent).map((r) => r.url).sort();
    expect(declared).toContain('/v1/Logistics/CreateLocalShipment');
    expect(routes.filter((r) => isIdempotentPath(r.url)).map((r) => r.url).sort()).toEqual(declared);
  });
});
