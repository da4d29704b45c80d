// Issue 12, item 6: strict content types on the JSON calls, and the envelope on every answer,
// framework-level ones included. Requests go over a real socket to a listening service (Node's
// HTTP server answers some requests itself, e.g. an unknown Expect header, before fastify sees
// them), written byte for byte; each answer must be the envelope {success: false, error, message}
// with the expected status and a JSON content type.
import fs from 'node:fs';
import net from 'node:net';
import { chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestService, type TestService } from './support/harness';

interface Raw {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** Sends raw bytes, reads until the server closes or a complete response arrived. */
function raw(port: number, request: string): Promise<Raw> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host: '127.0.0.1', port });
    let buf = Buffer.alloc(0);
    const done = () => {
      const text = buf.toString('utf8');
      const head = text.split('\r\n\r\n')[0] ?? '';
      const [statusLine, ...hl] = head.split('\r\n');
      const headers: Record<string, string> = {};
      for (const l of hl) {
        const i = l.indexOf(':');
        headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
      }
      let body = text.slice(head.length + 4);
      if (headers['transfer-encoding'] === 'chunked') {
        let out = '';
        let rest = body;
        for (;;) {
          const nl = rest.indexOf('\r\n');
          const n = parseInt(rest.slice(0, nl), 16);
          if (!n) break;
          out += rest.slice(nl + 2, nl + 2 + n);
          rest = rest.slice(nl + 2 + n + 2);
        }
        body = out;
      }
      resolve({ status: Number(statusLine?.split(' ')[1]), headers, body });
    };
    const complete = () => {
      const text = buf.toString('utf8');
      const end = text.indexOf('\r\n\r\n');
      if (end < 0) return false;
      const m = /\r\ncontent-length:\s*(\d+)/i.exec(text.slice(0, end));
      if (m) return Buffer.byteLength(text.slice(end + 4)) >= Number(m[1]);
      return /\r\ntransfer-encoding:\s*chunked/i.test(text.slice(0, end)) && text.endsWith('0\r\n\r\n');
    };
    s.setTimeout(5000, () => {
      s.destroy();
      reject(new Error('timeout'));
    });
    s.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      if (complete()) {
        s.destroy();
        done();
      }
    });
    s.on('end', done);
    s.on('error', (e) => (buf.length ? done() : reject(e)));
    s.write(request);
  });
}

describe('every answer carries the envelope; JSON calls take JSON only', () => {
  let t: TestService;
  let port: number;
  let token: string;
  beforeAll(async () => {
    t = await createTestService('sqlite', { config: { http: { bodyLimitBytes: 2048, host: '127.0.0.1', port: 0 } } });
    const url = await t.svc.listen();
    port = Number(new URL(url).port);
    token = await t.token();
  });
  afterAll(async () => t?.close());

  const req = (method: string, path: string, headers: Record<string, string | number> = {}, body = '') => {
    const h = { host: 'localhost', connection: 'close', ...(body ? { 'content-length': Buffer.byteLength(body) } : {}), ...headers };
    return `${method} ${path} HTTP/1.1\r\n${Object.entries(h)
      .map(([k, v]) => `${k}: ${v}`)
      .join('\r\n')}\r\n\r\n${body}`;
  };
  const authed = () => ({ authorization: `Bearer ${token}` });

  const cases: [string, () => string, number, string, RegExp][] = [
    ['a form-encoded body to a JSON call (GetAccount answered success before)', () => req('POST', '/v1/Account/GetAccount', { ...authed(), 'content-type': 'application/x-www-form-urlencoded' }, 'emailAddress=dispatch-a%40example.test'), 400, 'InvalidRequest', /^unsupported Content-Type application\/x-www-form-urlencoded: this call takes a JSON body/],
    ['a form-encoded body to a pick up point call', () => req('POST', '/v1/PickupPoints/GetPickUpPoints', { ...authed(), 'content-type': 'application/x-www-form-urlencoded' }, 'pageNo=1&pageSize=10'), 400, 'InvalidRequest', /^unsupported Content-Type application\/x-www-form-urlencoded/],
    ['text/plain to a JSON call', () => req('POST', '/v1/Account/GetAccount', { ...authed(), 'content-type': 'text/plain' }, '{"userUid":"x"}'), 400, 'InvalidRequest', /^unsupported Content-Type text\/plain/],
    ['multipart to a JSON call', () => req('POST', '/v1/Account/GetAccount', { ...authed(), 'content-type': 'multipart/form-data; boundary=x' }, '--x--\r\n'), 400, 'InvalidRequest', /^unsupported Content-Type multipart\/form-data/],
    ['an unknown content type (415 in fastify)', () => req('POST', '/v1/Account/GetAccount', { ...authed(), 'content-type': 'application/xml' }, '<a/>'), 400, 'InvalidRequest', /^unsupported Content-Type application\/xml/],
    ['Expect: 999-bogus (a bare 417 before)', () => req('POST', '/v1/Account/GetAccount', { ...authed(), 'content-type': 'application/json', expect: '999-bogus' }, '{}'), 417, 'InvalidRequest', /Expect/],
    ['an unknown route', () => req('GET', '/nope'), 404, 'NotFound', /no such endpoint/],
    ['a known path with the wrong method (405 elsewhere)', () => req('GET', '/v1/Account/GetAccount', authed()), 404, 'NotFound', /no such endpoint: GET/],
    ['DELETE on a known path', () => req('DELETE', '/v1/Account/GetAccount', authed()), 404, 'NotFound', /no such endpoint/],
    ['a body over the limit (413)', () => req('POST', '/v1/Account/GetAccount', { ...authed(), 'content-type': 'application/json' }, JSON.stringify({ userUid: 'x'.repeat(4000) })), 413, 'InvalidRequest', /too large \(limit 2048 bytes\)/],
    ['malformed JSON', () => req('POST', '/v1/Account/GetAccount', { ...authed(), 'content-type': 'application/json' }, '{"userUid": '), 400, 'InvalidRequest', /malformed/],
    ['an empty JSON body', () => req('POST', '/v1/Account/GetAccount', { ...authed(), 'content-type': 'application/json', 'content-length': 0 }), 400, 'InvalidRequest', /./],
    ['a __proto__ key in JSON', () => req('POST', '/v1/Account/GetAccount', { ...authed(), 'content-type': 'application/json' }, '{"__proto__": {"x": 1}}'), 400, 'InvalidRequest', /./],
    ['no token', () => req('POST', '/v1/Account/GetAccount', { 'content-type': 'application/json' }, '{}'), 401, 'Unauthorized', /bearer/],
    ['a malformed percent-encoding', () => req('GET', '/v1/%zz'), 400, 'InvalidRequest', /percent-encoded/],
    ['unparsable HTTP', () => 'GARBAGE\r\n\r\n', 400, 'InvalidRequest', /malformed HTTP request/],
    ['an unsupported HTTP version', () => 'GET / HTTP/3.0\r\nhost: x\r\n\r\n', 400, 'InvalidRequest', /malformed HTTP request/],
    ['Content-Length and Transfer-Encoding both', () => 'POST /v1/Account/GetAccount HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 2\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n', 400, 'InvalidRequest', /malformed HTTP request/],
    ['headers too large (431)', () => req('GET', '/health', { 'x-big': 'a'.repeat(20_000) }), 431, 'InvalidRequest', /headers too large/],
    ['an unknown docs file', () => req('GET', '/docs/static/nope.js'), 404, 'NotFound', /./],
    ['a docs file with an unsatisfiable Range (416)', () => req('GET', '/docs/static/index.css', { range: 'bytes=99999999-' }), 416, 'InvalidRequest', /./],
    ['gzip content encoding', () => req('POST', '/v1/Account/GetAccount', { ...authed(), 'content-type': 'application/json', 'content-encoding': 'gzip' }, '{}'), 400, 'InvalidRequest', /./],
  ];

  it.each(cases)('%s', async (_name, request, status, error, message) => {
    const r = await raw(port, request());
    expect({ status: r.status, body: r.body }).toMatchObject({ status });
    expect(r.headers['content-type'], JSON.stringify(r)).toMatch(/^application\/json/);
    const body = JSON.parse(r.body);
    expect(body, r.body).toMatchObject({ success: false, error });
    expect(body.message).toMatch(message);
    expect(Object.keys(body).sort()).toEqual(['error', 'message', 'success']);
  });

  it('a JSON call still takes application/json (with a charset too); /connect/token still takes a form', async () => {
    for (const ct of ['application/json', 'application/json; charset=utf-8', 'Application/JSON']) {
      const r = await raw(port, req('POST', '/v1/Account/GetAccount', { ...authed(), 'content-type': ct }, '{"emailAddress":"dispatch-a@example.test"}'));
      expect(r.status, r.body).toBe(200);
      expect(JSON.parse(r.body)).toMatchObject({ success: true, isExisting: true });
    }
    expect((await t.token('tenant-b')).length).toBeGreaterThan(10); // form-encoded
  });

  it('security headers on the docs page and the API; no X-Powered-By', async () => {
    for (const path of ['/docs/', '/docs/static/index.html', '/docs/json', '/health', '/nope']) {
      const r = await raw(port, req('GET', path));
      expect(r.status, path).toBeLessThan(500);
      const csp = r.headers['content-security-policy'] ?? '';
      expect(csp, path).toContain("default-src 'self'");
      expect(csp, path).toContain("script-src 'self'");
      expect(csp, path).toContain("frame-ancestors 'none'");
      expect(csp, path).toContain("object-src 'none'");
      expect(csp, path).not.toContain('unsafe-inline');
      expect(r.headers['x-content-type-options'], path).toBe('nosniff');
      expect(r.headers['x-frame-options'], path).toBe('DENY');
      expect(r.headers['referrer-policy'], path).toBe('no-referrer');
      expect(r.headers['x-powered-by'], path).toBeUndefined();
    }
  });

  it.skipIf(!fs.existsSync('/usr/bin/chromium') && process.env.LOCKER_REQUIRE_SERVICES !== '1')('the docs page (Swagger UI) works in headless Chromium under its CSP, with no violation', async () => {
    const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'] });
    try {
      const page = await browser.newPage();
      const violations: string[] = [];
      page.on('console', (m) => {
        if (/Content Security Policy|Refused to/i.test(m.text())) violations.push(m.text());
      });
      await page.addInitScript(() => {
        document.addEventListener('securitypolicyviolation', (e) => console.error(`Refused to (CSP violation) ${e.violatedDirective} ${e.blockedURI}`));
      });
      await page.goto(`http://127.0.0.1:${port}/docs/`);
      await expect.poll(() => page.locator('.swagger-ui .info .title').textContent(), { timeout: 10_000 }).toContain('Locker Shipment and Account Integration API');
      await expect.poll(() => page.locator('.opblock-summary-path').count()).toBeGreaterThan(10);
      expect(violations).toEqual([]);
    } finally {
      await browser.close();
    }
  });
});
