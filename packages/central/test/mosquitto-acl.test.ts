// The scale-out broker's rules (deploy/mosquitto.acl) hold on a real Mosquitto: a private instance
// on a free port with a password file, the ACL file from deploy/, and the same checks the
// embedded broker passes — a terminal reaches only its own topics, the central user all of them.
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import mqtt, { type MqttClient } from 'mqtt';
import { topics } from '../src/mqtt/topics';

const MOSQUITTO = ['/usr/sbin/mosquitto', '/usr/bin/mosquitto'].find((p) => fs.existsSync(p));
const PASSWD = ['/usr/bin/mosquitto_passwd', '/usr/sbin/mosquitto_passwd'].find((p) => fs.existsSync(p));
const ACL = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../deploy/mosquitto.acl');
const available = !!MOSQUITTO && !!PASSWD;
const d = available || process.env.LOCKER_REQUIRE_SERVICES === '1' ? describe : describe.skip;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(p));
    });
  });
}

async function connect(url: string, opts: mqtt.IClientOptions): Promise<MqttClient> {
  const c = mqtt.connect(url, { reconnectPeriod: 0, connectTimeout: 3000, ...opts });
  await new Promise<void>((resolve, reject) => {
    c.once('connect', () => resolve());
    c.once('error', reject);
    c.once('close', () => reject(new Error('closed before connect')));
  });
  return c;
}

d(`deploy/mosquitto.acl on a private Mosquitto${available ? '' : ' (SKIPPED: mosquitto not installed)'}`, () => {
  let dir: string;
  let broker: ChildProcess;
  let url: string;
  const clients: MqttClient[] = [];

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mosq-acl-'));
    // started as root, mosquitto drops to its own user: it must be able to read the files
    fs.chmodSync(dir, 0o755);
    const passwd = path.join(dir, 'passwd');
    fs.writeFileSync(passwd, '');
    for (const [u, p] of [['central', 'central-secret'], ['term-a1', 'secret-a1'], ['term-b1', 'secret-b1']]) {
      execFileSync(PASSWD!, ['-b', passwd, u!, p!]);
    }
    const port = await freePort();
    const conf = path.join(dir, 'mosquitto.conf');
    fs.writeFileSync(conf, [`listener ${port} 127.0.0.1`, 'allow_anonymous false', `password_file ${passwd}`, `acl_file ${ACL}`, 'persistence false', ''].join('\n'));
    fs.chmodSync(passwd, 0o644);
    fs.chmodSync(conf, 0o644);
    broker = spawn(MOSQUITTO!, ['-c', conf], { stdio: 'ignore' });
    url = `mqtt://127.0.0.1:${port}`;
    for (let i = 0; i < 100; i++) {
      const ok = await new Promise<boolean>((r) => net.connect(port, '127.0.0.1').once('connect', function (this: net.Socket) { this.destroy(); r(true); }).once('error', () => r(false)));
      if (ok) return;
      await sleep(50);
    }
    throw new Error(`private mosquitto did not come up on ${url}`);
  });
  afterAll(async () => {
    for (const c of clients) c.end(true);
    broker?.kill('SIGTERM');
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('refuses anonymous clients and wrong passwords (and accepts the right one)', async () => {
    const ok = await connect(url, { clientId: 'term-a1', username: 'term-a1', password: 'secret-a1' });
    ok.end(true);
    await expect(connect(url, { clientId: 'anon' })).rejects.toThrow();
    await expect(connect(url, { clientId: 'term-a1', username: 'term-a1', password: 'wrong' })).rejects.toThrow();
  });

  it('lets the central user see terminal events and command terminals; confines terminals to their own topics', async () => {
    const central = await connect(url, { clientId: 'central-1', username: 'central', password: 'central-secret' });
    const a = await connect(url, { clientId: 'term-a1', username: 'term-a1', password: 'secret-a1' });
    const b = await connect(url, { clientId: 'term-b1', username: 'term-b1', password: 'secret-b1' });
    clients.push(central, a, b);
    const centralGot: string[] = [];
    const aGot: string[] = [];
    const bGot: string[] = [];
    central.on('message', (t, p) => centralGot.push(`${t} ${p}`));
    a.on('message', (t, p) => aGot.push(`${t} ${p}`));
    b.on('message', (t, p) => bGot.push(`${t} ${p}`));
    await central.subscribeAsync('locker/v1/t/+/up/#', { qos: 1 });
    await a.subscribeAsync('locker/v1/t/term-a1/down/#', { qos: 1 });
    await b.subscribeAsync('locker/v1/t/term-b1/down/#', { qos: 1 });
    // term-a1 tries to read term-b1's commands (Mosquitto grants the SUBACK but delivers nothing)
    await a.subscribeAsync('locker/v1/t/term-b1/down/#', { qos: 1 }).catch(() => undefined);

    await a.publishAsync(topics.up('term-a1', 'events'), 'a-own', { qos: 1 });
    await a.publishAsync(topics.up('term-b1', 'events'), 'a-spoofs-b', { qos: 1 }).catch(() => undefined);
    await a.publishAsync(topics.down('term-b1', 'commands'), 'a-commands-b', { qos: 1 }).catch(() => undefined);
    await central.publishAsync(topics.down('term-b1', 'commands'), 'central-to-b', { qos: 1 });
    await sleep(400);

    expect(centralGot).toContain(`${topics.up('term-a1', 'events')} a-own`);
    expect(centralGot.some((m) => m.includes('a-spoofs-b'))).toBe(false);
    expect(bGot).toEqual([`${topics.down('term-b1', 'commands')} central-to-b`]);
    expect(aGot).toEqual([]);
  });
});
