// Who may use the diagnostics page: open to read on loopback, HTTP Basic with the technician
// password from the network, refused at start when reachable from the network without a password,
// the open action only with the password, and wrong passwords throttled per client address.
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { DiagnosticsServer, isLoopbackAddress } from '../src/diagnostics';
import type { LockRef } from '@locker/common';
import type { UnlockOutcome } from '../src/agent';

const PASSWORD = 'tech-password-1';
const basic = (password: string, user = 'technician') => `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;

function fakeAgent() {
  const opened: LockRef[] = [];
  return {
    opened,
    state: () => ({ terminalId: 'term-x', marker: 'state-of-term-x' }) as never,
    technicianOpen: async (at: LockRef): Promise<UnlockOutcome> => {
      opened.push(at);
      return { ok: true, alreadyOpen: false } as UnlockOutcome;
    },
  };
}

describe('diagnostics page access', () => {
  let server: DiagnosticsServer | null = null;
  afterEach(async () => {
    await server?.stop();
    server = null;
  });
  const start = async (host: string, password: string | null, agent = fakeAgent()) => {
    server = new DiagnosticsServer({ agent, host, port: 0, password, log: pino({ level: 'silent' }), maxWrongPerMinute: 3 });
    await server.start();
    return { agent, app: server.server! };
  };

  it('refuses to listen on a network address without a technician password (DIAGNOSTICS_UNPROTECTED)', async () => {
    const s = new DiagnosticsServer({ agent: fakeAgent(), host: '0.0.0.0', port: 0, password: null, log: pino({ level: 'silent' }) });
    await expect(s.start()).rejects.toMatchObject({ code: 'DIAGNOSTICS_UNPROTECTED', message: expect.stringContaining('diagnostics.technicianPassword') });
    expect(s.server).toBeNull();
  });

  it('loopback clients read without a password; network clients need HTTP Basic with the technician password', async () => {
    const { app } = await start('0.0.0.0', PASSWORD);
    for (const url of ['/', '/api/state']) {
      expect((await app.inject({ url, remoteAddress: '127.0.0.1' })).statusCode).toBe(200);
      const anon = await app.inject({ url, remoteAddress: '10.1.2.3' });
      expect(anon.statusCode).toBe(401);
      expect(anon.headers['www-authenticate']).toMatch(/^Basic realm=/);
      expect(anon.json()).toMatchObject({ ok: false, error: 'LOGIN_REQUIRED' });
      expect(anon.body).not.toContain('state-of-term-x');
      expect((await app.inject({ url, remoteAddress: '10.1.2.3', headers: { authorization: basic('wrong-password') } })).statusCode).toBe(401);
      expect((await app.inject({ url, remoteAddress: '10.1.2.3', headers: { authorization: 'Basic %%%' } })).statusCode).toBe(401);
    }
    const ok = await app.inject({ url: '/api/state', remoteAddress: '10.1.2.4', headers: { authorization: basic(PASSWORD, 'anyone') } });
    expect(ok.statusCode).toBe(200);
    expect(ok.json()).toMatchObject({ marker: 'state-of-term-x' });
  });

  it('throttles wrong passwords per client address: the locked-out client cannot log in, another client can', async () => {
    const { app } = await start('0.0.0.0', PASSWORD);
    for (let i = 0; i < 3; i++) expect((await app.inject({ url: '/', remoteAddress: '10.0.0.1', headers: { authorization: basic(`guess-${i}`) } })).statusCode).toBe(401);
    const locked = await app.inject({ url: '/', remoteAddress: '10.0.0.1', headers: { authorization: basic(PASSWORD) } });
    expect(locked.statusCode).toBe(429);
    expect(locked.headers['retry-after']).toBe('60');
    expect(locked.json()).toMatchObject({ error: 'THROTTLED' });
    expect((await app.inject({ url: '/', remoteAddress: '10.0.0.2', headers: { authorization: basic(PASSWORD) } })).statusCode).toBe(200);
  });

  it('the open action needs the password, is throttled per client, and opens nothing otherwise', async () => {
    const { app, agent } = await start('127.0.0.1', PASSWORD);
    const open = (password: string, remoteAddress: string) => app.inject({ method: 'POST', url: '/api/open', remoteAddress, payload: { bus: 'bus0', board: 0, lock: 5, password } });
    for (let i = 0; i < 3; i++) {
      const r = await open(`guess-${i}`, '127.0.0.9');
      expect(r.statusCode).toBe(401);
      expect(r.json()).toMatchObject({ error: 'WRONG_PASSWORD' });
    }
    const locked = await open(PASSWORD, '127.0.0.9');
    expect(locked.statusCode).toBe(429);
    expect(agent.opened).toEqual([]);
    const other = await open(PASSWORD, '127.0.0.1');
    expect(other.statusCode).toBe(200);
    expect(agent.opened).toEqual([{ bus: 'bus0', board: 0, lock: 5 }]);
    expect((await app.inject({ method: 'POST', url: '/api/open', remoteAddress: '127.0.0.1', payload: { bus: 'bus0', board: 'x' } })).json()).toMatchObject({ error: 'BAD_REQUEST' });
  });

  it('without a technician password (loopback only) the open action is disabled', async () => {
    const { app, agent } = await start('127.0.0.1', null);
    const r = await app.inject({ method: 'POST', url: '/api/open', remoteAddress: '127.0.0.1', payload: { bus: 'bus0', board: 0, lock: 5, password: 'anything-at-all' } });
    expect(r.statusCode).toBe(403);
    expect(r.json()).toMatchObject({ error: 'DISABLED' });
    expect(agent.opened).toEqual([]);
  });

  it('knows loopback addresses', () => {
    expect(['127.0.0.1', '127.3.2.1', '::1', '::ffff:127.0.0.1'].every(isLoopbackAddress)).toBe(true);
    expect(['10.0.0.1', '::ffff:10.0.0.1', '192.168.1.127', undefined].some(isLoopbackAddress)).toBe(false);
  });
});
