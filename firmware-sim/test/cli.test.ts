// The CLI as a child process: it starts, prints the device paths, and obeys commands on stdin.
import { afterEach, describe, expect, it } from 'vitest';
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { dialects } from '@locker/lockbus';
import { SerialHost, sleep } from './helpers';

const here = path.dirname(fileURLToPath(import.meta.url));
const BIN = path.resolve(here, '../bin/locker-sim.js');

class Cli {
  out = '';
  err = '';
  exit: Promise<number | null>;
  constructor(readonly child: ChildProcessWithoutNullStreams) {
    child.stdout.setEncoding('utf8');
    child.stderr.setEncoding('utf8');
    child.stdout.on('data', (d: string) => (this.out += d));
    child.stderr.on('data', (d: string) => (this.err += d));
    this.exit = new Promise((resolve) => child.once('exit', (code) => resolve(code)));
  }
  async waitOut(re: RegExp, timeoutMs = 20_000): Promise<RegExpMatchArray> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const m = this.out.match(re);
      if (m) return m;
      if (Date.now() > deadline) throw new Error(`timeout waiting for ${re}; stdout: ${this.out}\nstderr: ${this.err}`);
      await sleep(20);
    }
  }
  send(line: string): void {
    this.child.stdin.write(`${line}\n`);
  }
}

const running: Cli[] = [];
function start(args: string[]): Cli {
  const cli = new Cli(spawn(process.execPath, [BIN, ...args], { stdio: 'pipe' }));
  running.push(cli);
  return cli;
}

afterEach(async () => {
  for (const c of running.splice(0)) {
    if (c.child.exitCode === null) c.child.kill('SIGTERM');
    await c.exit;
  }
});

describe('locker-sim CLI', () => {
  it('starts with the default layout, prints the paths, obeys commands typed on stdin, and quits cleanly', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sim-cli-'));
    const cli = start(['--dir', dir, '--no-timing']);
    const busLine = await cli.waitOut(/bus bus0 \(kerong-cu16, 19200 baud, closed-high, boards 0,1\): (\S+)/);
    const scanLine = await cli.waitOut(/scanner scanner0 \(suffix CR\): (\S+)/);
    await cli.waitOut(/ready/);
    const busPath = busLine[1]!;
    expect(busPath).toBe(path.join(dir, 'bus0'));
    expect(fs.existsSync(busPath)).toBe(true);
    expect(fs.existsSync(scanLine[1]!)).toBe(true);

    const host = await SerialHost.open(busPath);
    const cu16 = dialects['kerong-cu16'];
    let rep = cu16.decodeReply(await host.transact('02 10 30 03 45', 9));
    expect(rep.kind === 'status' && rep.items![2]).toBe(false);

    // A person puts a parcel into board 1 lock 3 and forces lock 4 open, at the keyboard.
    cli.send('put 1 3');
    cli.send('open 1 4');
    await cli.waitOut(/board 1 lock 4: door open/);
    rep = cu16.decodeReply(await host.transact('02 10 30 03 45', 9));
    expect(rep.kind === 'status' && rep.items![2]).toBe(true);
    expect(rep.kind === 'status' && rep.locks[3]).toBe(false);

    // A fault typed at the REPL takes effect on the wire.
    cli.send('fault offline 1');
    await cli.waitOut(/faults: offline 1/);
    host.clear();
    host.write(Buffer.from('0210300345', 'hex'));
    await sleep(150);
    expect(host.received.length).toBe(0);

    // A scan typed at the REPL reaches the scanner device.
    const scanner = await SerialHost.open(scanLine[1]!, 9600);
    cli.send('scan -s crlf HELLO-1');
    await scanner.waitText('HELLO-1\r\n');

    cli.send('bogus');
    await cli.waitOut(/error \[SIM_BAD_COMMAND\]/);
    cli.send('quit');
    expect(await cli.exit).toBe(0);
    expect(fs.existsSync(busPath)).toBe(false); // socat gone with the simulator
    await host.close();
    await scanner.close();
  });

  it('takes buses from flags, including TCP gateway mode', async () => {
    const cli = start(['--no-timing', '--no-scanner', '--bus', 'generic-8a80:1-2:tcp=0:name=gw', '--no-repl']);
    const m = await cli.waitOut(/bus gw \(generic-8a80, 9600 baud, closed-high, boards 1,2\): tcp:\/\/127\.0\.0\.1:(\d+)/);
    expect(Number(m[1])).toBeGreaterThan(0);
    expect(cli.out).not.toMatch(/scanner/);
    cli.child.kill('SIGTERM');
    expect(await cli.exit).toBe(143);
  });

  it('leaves no socat behind even when killed with SIGKILL', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sim-cli-'));
    const cli = start(['--dir', dir, '--no-repl']);
    const busPath = (await cli.waitOut(/bus bus0 .*: (\S+)/))[1]!;
    const scanPath = (await cli.waitOut(/scanner scanner0 .*: (\S+)/))[1]!;
    expect(fs.existsSync(busPath)).toBe(true);
    cli.child.kill('SIGKILL');
    await cli.exit;
    const deadline = Date.now() + 5000;
    while ((fs.existsSync(busPath) || fs.existsSync(scanPath)) && Date.now() < deadline) await sleep(20);
    // socat removes its links when it exits: their absence shows the guard stopped it.
    expect(fs.existsSync(busPath)).toBe(false);
    expect(fs.existsSync(scanPath)).toBe(false);
  });

  it('rejects a bad flag with exit code 2 and a message', async () => {
    const cli = start(['--bus', 'nosuch-dialect:0']);
    expect(await cli.exit).toBe(2);
    expect(cli.err).toMatch(/unknown dialect "nosuch-dialect"/);
  });
});
