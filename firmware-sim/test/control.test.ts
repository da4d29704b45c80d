// The control port (--control): the REPL's commands over TCP, one JSON answer per line, so that a
// program in another process can act at the locker and read the locks' state.
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { parseArgs } from '../src/config';
import { parseControlSpec } from '../src/control';
import { sleep } from './helpers';

const BIN = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../bin/locker-sim.js');

class Control {
  private buf = '';
  private readonly waiting: ((line: string) => void)[] = [];
  private readonly lines: string[] = [];
  private constructor(readonly sock: net.Socket) {
    sock.setEncoding('utf8');
    sock.on('data', (d: string) => {
      this.buf += d;
      let nl: number;
      while ((nl = this.buf.indexOf('\n')) >= 0) {
        const line = this.buf.slice(0, nl);
        this.buf = this.buf.slice(nl + 1);
        const w = this.waiting.shift();
        if (w) w(line);
        else this.lines.push(line);
      }
    });
  }
  static connect(port: number): Promise<Control> {
    return new Promise((resolve, reject) => {
      const s = net.connect(port, '127.0.0.1', () => resolve(new Control(s)));
      s.once('error', reject);
    });
  }
  next(): Promise<any> {
    const l = this.lines.shift();
    if (l !== undefined) return Promise.resolve(JSON.parse(l));
    return new Promise((r) => this.waiting.push((line) => r(JSON.parse(line))));
  }
  async cmd(line: string): Promise<any> {
    this.sock.write(`${line}\n`);
    return this.next();
  }
}

const children: ChildProcessWithoutNullStreams[] = [];
afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

async function startSim(args: string[]): Promise<{ child: ChildProcessWithoutNullStreams; out: () => string; control: number; tcp: number }> {
  const child = spawn(process.execPath, [BIN, ...args], { stdio: 'pipe' });
  children.push(child);
  let out = '';
  child.stdout.setEncoding('utf8');
  child.stdout.on('data', (d: string) => (out += d));
  child.stderr.on('data', (d) => (out += String(d)));
  const deadline = Date.now() + 30_000;
  while (!/ready/.test(out)) {
    if (Date.now() > deadline || child.exitCode !== null) throw new Error(`simulator did not start: ${out}`);
    await sleep(20);
  }
  return { child, out: () => out, control: Number(/control tcp:\/\/127\.0\.0\.1:(\d+)/.exec(out)![1]), tcp: Number(/tcp:\/\/127\.0\.0\.1:(\d+)\n/.exec(out)![1]) };
}

describe('simulator control port', () => {
  it('parses --control specs and refuses bad ones', () => {
    expect(parseControlSpec('7100')).toEqual({ host: '127.0.0.1', port: 7100 });
    expect(parseControlSpec('0')).toEqual({ host: '127.0.0.1', port: 0 });
    expect(parseControlSpec('0.0.0.0:7100')).toEqual({ host: '0.0.0.0', port: 7100 });
    expect(() => parseControlSpec('x')).toThrow(/--control x/);
    expect(() => parseControlSpec('70000')).toThrow(/--control/);
    expect(parseArgs(['--control', '0']).control).toBe('0');
    expect(parseArgs([]).control).toBe(null);
    expect(() => parseArgs(['--control', 'nope'])).toThrow(/--control nope/);
  });

  it('runs the REPL commands from another process, answers one JSON line each, reads lock state, and quits', async () => {
    const sim = await startSim(['--bus', 'kerong-cu16:0,1:tcp=0', '--no-timing', '--no-repl', '--control', '0']);
    expect(sim.out()).toMatch(/bus bus0 \(kerong-cu16, 19200 baud, closed-high, boards 0,1\): tcp:\/\/127\.0\.0\.1:\d+/);
    const c = await Control.connect(sim.control);
    expect(JSON.parse((await c.cmd('lock 0 1')).out)).toEqual({ bus: 'bus0', board: 0, lock: 1, latched: true, doorOpen: false, item: false });
    expect(await c.cmd('pulse 1 3')).toEqual({ ok: true, out: 'board 1 lock 3: door open' });
    expect(await c.cmd('put 1 3')).toEqual({ ok: true, out: 'board 1 lock 3: item present' });
    expect(JSON.parse((await c.cmd('lock 1 3')).out)).toMatchObject({ latched: false, doorOpen: true, item: true });
    expect(await c.cmd('close 1 3')).toEqual({ ok: true, out: 'board 1 lock 3: door closed, latched' });
    const all = JSON.parse((await c.cmd('locks')).out) as { board: number; lock: number; item: boolean }[];
    expect(all).toHaveLength(32);
    expect(all.filter((l) => l.item).map((l) => [l.board, l.lock])).toEqual([[1, 3]]);
    // errors are answers too, and the connection stays usable
    expect(await c.cmd('open 9 1')).toMatchObject({ ok: false, code: 'SIM_UNKNOWN_BOARD' });
    expect(await c.cmd('frobnicate')).toMatchObject({ ok: false, code: 'SIM_BAD_COMMAND' });
    expect(await c.cmd('lock 0')).toMatchObject({ ok: false, code: 'SIM_BAD_COMMAND' });
    expect((await c.cmd('status')).out).toContain('items: 3');
    // pipelined commands are answered in order
    c.sock.write('open 0 2\ntake 1 3\nlock 0 2\n');
    expect((await c.next()).out).toMatch(/FORCED/);
    expect((await c.next()).out).toBe('board 1 lock 3: empty');
    expect(JSON.parse((await c.next()).out)).toMatchObject({ doorOpen: true, latched: false });
    const exited = new Promise<number | null>((r) => sim.child.once('exit', (code) => r(code)));
    expect(await c.cmd('quit')).toEqual({ ok: true, out: 'bye' });
    expect(await exited).toBe(0);
  });
});
