// A private Mosquitto for tests: deploy/mosquitto.conf and deploy/mosquitto.acl as shipped, with only
// the listener (a free port on 127.0.0.1) and the file locations (a temporary directory) replaced,
// so the tests check the settings the scale-out layout runs with.
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import mqtt, { type MqttClient } from 'mqtt';

const DEPLOY = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../../deploy');
export const DEPLOY_CONF = path.join(DEPLOY, 'mosquitto.conf');
export const DEPLOY_ACL = path.join(DEPLOY, 'mosquitto.acl');
export const MOSQUITTO = ['/usr/sbin/mosquitto', '/usr/bin/mosquitto'].find((p) => fs.existsSync(p));
export const MOSQUITTO_PASSWD = ['/usr/bin/mosquitto_passwd', '/usr/sbin/mosquitto_passwd'].find((p) => fs.existsSync(p));

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(p));
    });
  });
}

/** onMessage is attached before CONNECT: a resumed session's queued messages follow the CONNACK at once. */
export async function connect(url: string, opts: mqtt.IClientOptions, onMessage?: (topic: string, payload: Buffer) => void): Promise<MqttClient> {
  const c = mqtt.connect(url, { reconnectPeriod: 0, connectTimeout: 3000, ...opts });
  if (onMessage) c.on('message', onMessage);
  await new Promise<void>((resolve, reject) => {
    c.once('connect', () => resolve());
    c.once('error', reject);
    c.once('close', () => reject(new Error('closed before connect')));
  });
  return c;
}

/** deploy/mosquitto.conf with the listener and file locations replaced. */
export function testConfig(port: number, dir: string, passwd: string): string {
  const replaced = /^\s*(listener|password_file|acl_file|persistence_location|log_dest)\b/;
  const kept = fs.readFileSync(DEPLOY_CONF, 'utf8').split('\n').filter((l) => !replaced.test(l));
  return [
    `listener ${port} 127.0.0.1`,
    `password_file ${passwd}`,
    `acl_file ${DEPLOY_ACL}`,
    `persistence_location ${dir}/`,
    ...kept,
    ...(process.env.MOSQ_DEBUG ? ['log_dest stderr', 'log_type all'] : []),
    '',
  ].join('\n');
}

export interface TestMosquitto {
  url: string;
  dir: string;
  passwd: string;
  /** stops the broker (SIGTERM: Mosquitto writes its persistence store) and waits for it */
  stop(): Promise<void>;
  /** starts it again on the same port with the same store */
  start(): Promise<void>;
  /** SIGKILL: a crash; what the broker took in since its last autosave is lost */
  kill(): Promise<void>;
  /** SIGHUP: Mosquitto reads the password and ACL files again */
  reload(): void;
  cleanup(): Promise<void>;
}

/** users: written with mosquitto_passwd; or pass passwdFile to use a file written elsewhere. */
export async function startMosquitto(opts: { users?: [string, string][]; passwdFile?: (dir: string) => string }): Promise<TestMosquitto> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mosq-test-'));
  // started as root, mosquitto drops to its own user: it must be able to read and write here
  fs.chmodSync(dir, 0o777);
  let passwd = path.join(dir, 'passwd');
  if (opts.passwdFile) passwd = opts.passwdFile(dir);
  else {
    fs.writeFileSync(passwd, '');
    for (const [u, p] of opts.users ?? []) execFileSync(MOSQUITTO_PASSWD!, ['-b', passwd, u, p]);
  }
  fs.chmodSync(passwd, 0o644);
  const port = await freePort();
  const conf = path.join(dir, 'mosquitto.conf');
  fs.writeFileSync(conf, testConfig(port, dir, passwd));
  fs.chmodSync(conf, 0o644);
  const url = `mqtt://127.0.0.1:${port}`;
  let proc: ChildProcess | null = null;
  let stderr = '';

  const start = async () => {
    stderr = '';
    const p = spawn(MOSQUITTO!, ['-c', conf], { stdio: ['ignore', 'ignore', 'pipe'] });
    p.stderr!.on('data', (b: Buffer) => {
      stderr += b.toString();
      if (process.env.MOSQ_DEBUG) process.stderr.write(b);
    });
    proc = p;
    for (let i = 0; i < 100; i++) {
      if (p.exitCode !== null) break;
      const ok = await new Promise<boolean>((r) => net.connect(port, '127.0.0.1').once('connect', function (this: net.Socket) { this.destroy(); r(true); }).once('error', () => r(false)));
      if (ok) return;
      await sleep(50);
    }
    throw new Error(`private mosquitto did not come up on ${url}: ${stderr}`);
  };
  /** SIGTERM: a clean stop (Mosquitto writes its persistence store); SIGKILL: a crash */
  const halt = (signal: 'SIGTERM' | 'SIGKILL') => async () => {
    const p = proc;
    proc = null;
    if (!p || p.exitCode !== null) return;
    await new Promise<void>((resolve) => {
      p.once('exit', () => resolve());
      p.kill(signal);
    });
  };
  const stop = halt('SIGTERM');
  const kill = halt('SIGKILL');
  await start();
  return {
    url,
    dir,
    passwd,
    stop,
    start,
    kill,
    reload: () => proc?.kill('SIGHUP'),
    cleanup: async () => {
      await stop();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
