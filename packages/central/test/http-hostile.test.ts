// Hostile HTTP clients: a URL whose percent-encoding is malformed gets the envelope (not fastify's
// own error body), and a client that sends headers but never finishes its body is answered 408 and
// disconnected after http.requestTimeoutMs (on a real socket: inject() has no timeouts).
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestService, type TestService } from './support/harness';

describe('hostile HTTP requests', () => {
  let t: TestService;
  let port: number;
  beforeAll(async () => {
    t = await createTestService('sqlite', { config: { http: { requestTimeoutMs: 500 } } });
    await t.app.listen({ host: '127.0.0.1', port: 0 });
    port = (t.app.server.address() as net.AddressInfo).port;
  });
  afterAll(async () => {
    await t.close();
  });

  it.each(['/v1/%', '/v1/%zz', '/docs/%', '/v1/PickupPoints/%E0%A4%A'])('a malformed percent-encoding (%s) is 400 InvalidRequest with the envelope', async (url) => {
    const tok = await t.token('tenant-a');
    const r = await t.app.inject({ method: 'POST', url, headers: { authorization: `Bearer ${tok}`, 'content-type': 'application/json' }, payload: '{}' });
    expect(r.statusCode).toBe(400);
    expect(r.headers['content-type']).toMatch(/^application\/json/);
    const body = JSON.parse(r.body);
    expect(body).toEqual({ success: false, error: 'InvalidRequest', message: expect.stringContaining('percent-encoded') });
    expect(r.body).not.toContain('FST_');
  });

  it('a client that sends headers and never finishes its body is answered 408 and disconnected after http.requestTimeoutMs', async () => {
    const sock = net.connect(port, '127.0.0.1');
    await new Promise<void>((r) => sock.once('connect', () => r()));
    let data = '';
    sock.on('data', (d) => (data += d.toString()));
    sock.on('error', () => {});
    const t0 = Date.now();
    // /connect/token needs no bearer token, so the request is not refused before its body is read
    sock.write('POST /connect/token HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\ngrant_type=client_');
    const closed = await Promise.race([new Promise<boolean>((r) => sock.once('close', () => r(true))), new Promise<boolean>((r) => setTimeout(() => r(false), 5000))]);
    sock.destroy();
    expect(closed).toBe(true);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(400);
    expect(data).toMatch(/^HTTP\/1\.1 408/);
    expect(JSON.parse(data.slice(data.indexOf('\r\n\r\n') + 4))).toEqual({ success: false, error: 'InvalidRequest', message: 'request not received completely within 500 ms' });
  });

  it('a request that completes in time is answered normally', async () => {
    const r = await fetch(`http://127.0.0.1:${port}/health`);
    expect(r.status).toBe(200);
  });
});
