// The agent as a real process (bin/locker-agent.js run --config FILE) against the simulator on a
// pty and the embedded broker: a power cut (kill -9) with unsent events in the journal loses
// nothing — the restarted agent delivers them, in order — and SIGTERM shuts down cleanly with a
// retained "offline" status.
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { World, waitFor } from './support/world';
import { NotifySocket, notifySocketAvailable } from '../../../test-support/notify-socket';

const BIN = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../bin/locker-agent.js');

function journal(file: string): { seq: number; event_id: string; type: string; sent_at: string | null }[] {
  if (!fs.existsSync(file)) return [];
  try {
    const db = new Database(file, { readonly: true, fileMustExist: true });
    try {
      return db.prepare('SELECT seq, event_id, type, sent_at FROM journal ORDER BY seq').all() as any[];
    } finally {
      db.close();
    }
  } catch {
    return []; // the agent is still creating it
  }
}

describe('agent process: power cut and graceful stop', () => {
  let w: World;
  let configFile: string;
  const children: ChildProcess[] = [];
  const stderr: string[] = [];

  const spawnAgent = (env: NodeJS.ProcessEnv = { NOTIFY_SOCKET: '' }) => {
    const child = spawn(process.execPath, [BIN, 'run', '--config', configFile], { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...env } });
    child.stderr!.on('data', (d) => stderr.push(String(d)));
    children.push(child);
    return child;
  };
  const exited = (c: ChildProcess) => new Promise<{ code: number | null; signal: string | null }>((r) => (c.exitCode !== null || c.signalCode !== null ? r({ code: c.exitCode, signal: c.signalCode }) : c.once('exit', (code, signal) => r({ code, signal }))));

  beforeAll(async () => {
    w = await World.create({}, { startAgent: false });
    configFile = path.join(w.dir, 'agent.json');
    fs.writeFileSync(configFile, JSON.stringify({ ...w.config, log: { level: 'error' } }));
  });
  afterAll(async () => {
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    await w?.close();
  });

  it('kill -9 with unsent events: after the restart they are all delivered, in order', async () => {
    await w.stopBroker(); // the central service is unreachable
    const dbFile = w.config.store.path;
    const first = spawnAgent();
    await waitFor(() => journal(dbFile).filter((r) => r.type === 'boardOnline').length === 2, 'boards online in the journal', 20_000);
    w.lock(0, 1).openDoor();
    w.lock(1, 3).openDoor();
    await waitFor(() => journal(dbFile).filter((r) => r.type === 'forcedOpen').length === 2, 'forced openings journalled');
    w.lock(0, 1).closeDoor();
    await waitFor(() => journal(dbFile).filter((r) => r.type === 'doorClosed').length === 1, 'door closed journalled');
    const before = journal(dbFile);
    expect(before.every((r) => r.sent_at === null)).toBe(true);
    first.kill('SIGKILL');
    expect((await exited(first)).signal).toBe('SIGKILL');

    await w.startBroker(w.brokerPort);
    const second = spawnAgent();
    await waitFor(() => w.events().length >= before.length, 'journalled events delivered after restart', 20_000);
    const got = w.events();
    expect(got.slice(0, before.length).map((e) => e.eventId)).toEqual(before.map((r) => r.event_id));
    expect(got.map((e) => e.seq)).toEqual(got.map((_, i) => i + 1));
    await waitFor(() => journal(dbFile).every((r) => r.sent_at !== null), 'journal marked sent');
    expect(second.exitCode).toBe(null);
  });

  it('SIGTERM: clean exit and a retained offline status', async () => {
    const child = children[children.length - 1]!;
    await waitFor(() => w.received.some((r) => r.kind === 'status' && r.body.state === 'online'), 'online status');
    child.kill('SIGTERM');
    const r = await exited(child);
    expect(r.code).toBe(0);
    const off = await waitFor(() => w.received.find((x) => x.kind === 'status' && x.body.state === 'offline'), 'offline status');
    expect(off.body).toMatchObject({ terminalId: 'term-a1', reason: 'shutdown' });
    expect(stderr.join('')).toBe('');
  });

  it.skipIf(!notifySocketAvailable())('systemd: READY=1 once running, WATCHDOG=1 pings while healthy, STOPPING=1 on SIGTERM, exit 0', async () => {
    const sock = new NotifySocket();
    await sock.start();
    try {
      const child = spawnAgent({ NOTIFY_SOCKET: sock.path, WATCHDOG_USEC: '1000000' }); // a ping every 500 ms
      await waitFor(() => sock.count('READY=1') === 1, 'READY=1', 20_000);
      expect(sock.messages.find((m) => m.includes('READY=1'))).toContain('STATUS=terminal term-a1 running');
      await waitFor(() => sock.count('WATCHDOG=1') >= 2, 'two WATCHDOG=1 pings', 5000);
      expect(sock.count('STOPPING=1')).toBe(0);
      child.kill('SIGTERM');
      expect(await exited(child)).toEqual({ code: 0, signal: null });
      await waitFor(() => sock.count('STOPPING=1') === 1, 'STOPPING=1', 5000);
      // READY came before any ping, STOPPING after all of them
      const order = sock.messages.map((m) => (m.includes('READY=1') ? 'R' : m.includes('STOPPING=1') ? 'S' : m.includes('WATCHDOG=1') ? 'W' : '')).filter(Boolean).join('');
      expect(order).toMatch(/^RW+S$/);
    } finally {
      await sock.stop();
    }
  });
});
