// The central service as a real process (bin/locker-central.js serve) under a stand-in for
// systemd's notify socket: READY=1 once listening, WATCHDOG=1 pings, STOPPING=1 and exit 0 on
// SIGTERM, and a SIGTERM while it is still starting (migrations) is a graceful stop as well.
// The watchdog pings only while the service is healthy (its database answers).
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { systemdNotifier } from '@locker/common';
import { NotifySocket, notifySocketAvailable } from '../../../test-support/notify-socket';
import { createTestService } from './support/harness';

const BIN = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../bin/locker-central.js');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function waitFor<T>(fn: () => T | undefined | null | false, what: string, ms = 20_000): Promise<T> {
  const start = Date.now();
  for (;;) {
    const v = fn();
    if (v) return v;
    if (Date.now() - start > ms) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

describe.skipIf(!notifySocketAvailable())('central process under systemd (notify socket)', () => {
  const children: ChildProcess[] = [];
  const dirs: string[] = [];
  let sock: NotifySocket;
  afterEach(async () => {
    for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    await sock?.stop();
  });
  afterAll(() => {
    for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
  });

  const serve = async () => {
    sock = new NotifySocket();
    await sock.start();
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'central-proc-'));
    dirs.push(dir);
    const env: NodeJS.ProcessEnv = {};
    for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('LOCKER_')) env[k] = v;
    Object.assign(env, { LOCKER_DATABASE_URL: path.join(dir, 'central.db'), LOCKER_HTTP_PORT: '0', LOCKER_MQTT_MODE: 'off', LOCKER_LOG_LEVEL: 'info', NOTIFY_SOCKET: sock.path, WATCHDOG_USEC: '1000000' });
    const child = spawn(process.execPath, [BIN, 'serve'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(child);
    const out = { text: '' };
    child.stdout!.on('data', (d) => (out.text += String(d)));
    child.stderr!.on('data', (d) => (out.text += String(d)));
    const exited = new Promise<{ code: number | null; signal: string | null }>((r) => child.once('exit', (code, signal) => r({ code, signal })));
    return { child, out, exited };
  };

  it('READY=1 when listening, WATCHDOG=1 pings, STOPPING=1 and exit 0 on SIGTERM', async () => {
    const { child, exited, out } = await serve();
    await waitFor(() => sock.count('READY=1') === 1, `READY=1 (output: ${out.text})`);
    expect(sock.messages.find((m) => m.includes('READY=1'))).toMatch(/STATUS=listening on http:\/\/127\.0\.0\.1:\d+/);
    await waitFor(() => sock.count('WATCHDOG=1') >= 2, 'two WATCHDOG=1 pings', 5000);
    child.kill('SIGTERM');
    expect(await exited).toEqual({ code: 0, signal: null });
    await waitFor(() => sock.count('STOPPING=1') === 1, 'STOPPING=1', 5000);
  });

  it('SIGTERM while it is still starting (migrations): a graceful stop, STOPPING=1, no READY, exit 0', async () => {
    const { child, exited, out } = await serve();
    await waitFor(() => out.text.includes('migrations applied'), `migrations under way (output: ${out.text})`);
    child.kill('SIGTERM'); // before it listens
    expect(await exited).toEqual({ code: 0, signal: null });
    await waitFor(() => sock.count('STOPPING=1') === 1, 'STOPPING=1', 5000);
    expect(out.text).toContain('shutting down');
    expect(sock.count('READY=1')).toBe(0);
  });

  it('the watchdog pings only while the health check passes (async checks, an unhealthy database stops the pings)', async () => {
    sock = new NotifySocket();
    await sock.start();
    const t = await createTestService('sqlite');
    let closed = false;
    const n = systemdNotifier({ NOTIFY_SOCKET: sock.path, WATCHDOG_USEC: '1000000' });
    try {
      expect(await t.svc.healthy()).toBe(true);
      n.startWatchdog(() => t.svc.healthy());
      await waitFor(() => sock.count('WATCHDOG=1') >= 2, 'pings while healthy', 5000);
      await t.ctx.db.close(); // the database is gone
      closed = true;
      expect(await t.svc.healthy()).toBe(false);
      await sleep(700); // a ping already under way may still land
      const before = sock.count('WATCHDOG=1');
      await sleep(1600); // three more ticks
      expect(sock.count('WATCHDOG=1')).toBe(before);
    } finally {
      n.stop();
      if (!closed) await t.close();
    }
  });
});
