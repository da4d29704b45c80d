// The wiring-check CLI beside a running agent (docs/lockbus.md, "Which to use when"): a real agent
// polls simulated boards over an RS485-over-TCP gateway and a serial pty; `locker-lockbus scan` on
// either port is refused with one line naming the agent's pid and the page's bus scan, exit 2, and
// never prints a board (two masters on one bus report boards that are not there). The serial port
// is refused by the OS lock too when the CLI looks in the wrong state directory. With the agent
// stopped its claims are gone and the same scan works; a claim left by a dead process is ignored.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Simulator } from '@locker/firmware-sim';
import { EXIT, main } from '../../lockbus/src/cli';
import { claimPorts, findPortHolder } from '@locker/lockbus';
import { Agent } from '../src/agent';
import { BUS_TIMING, agentConfig, silent, waitFor } from './support/world';

async function cli(args: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(args, (s) => out.push(s), (s) => err.push(s));
  return { code, out: out.join('\n'), err: err.join('\n') };
}

describe('locker-lockbus scan beside a running agent', () => {
  const sim = new Simulator({
    buses: [
      { name: 'gw', link: { kind: 'tcp', port: 0 }, dialect: 'kerong-cu16', boards: [{ address: 0 }, { address: 1 }] },
      { name: 'tty', link: { kind: 'pty' }, dialect: 'kerong-cu16', boards: [{ address: 0 }] },
    ],
    scanners: [{ name: 'scan0', link: { kind: 'pty' }, suffix: '\r' }],
  });
  let dir: string;
  let agent: Agent;
  let gw: string;
  let tty: string;
  const scan = (port: string, extra: string[] = []) => cli(['scan', '--port', port, '--dialect', 'kerong-cu16', '--boards', '0-4', '--timeout', '80', '--agent-state', dir, ...extra]);

  beforeAll(async () => {
    await sim.start();
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'agent-claims-'));
    gw = `tcp://127.0.0.1:${sim.bus('gw').tcpPort}`;
    tty = sim.bus('tty').path!;
    const cfg = agentConfig(dir, tty, sim.scanner('scan0').path, {
      buses: [
        { name: 'bus0', port: gw, dialect: 'kerong-cu16', boards: [{ address: 0 }, { address: 1 }], ...BUS_TIMING },
        { name: 'bus1', port: `${tty}?baud=19200`, dialect: 'kerong-cu16', boards: [{ address: 0 }], ...BUS_TIMING },
      ],
    });
    agent = new Agent({ config: cfg, log: silent });
    await agent.start();
    await waitFor(() => agent.buses.bus('bus0').boardOnline(0) && agent.buses.bus('bus1').boardOnline(0), 'agent polls both buses');
  });
  afterAll(async () => {
    await agent?.stop().catch(() => undefined);
    await sim.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('the gateway port the agent polls is refused: one line with the pid and the page, exit 2, no boards', async () => {
    const r = await scan(gw);
    expect(r.code).toBe(EXIT.inUse);
    expect(r.code).toBe(2);
    expect(r.err.split('\n')).toHaveLength(1);
    expect(r.err).toContain(`${gw} is held by the terminal agent (pid ${process.pid}, bus bus0)`);
    expect(r.err).toContain("bus scan on the agent's diagnostics page");
    expect(r.out).toBe('');
    expect(r.err).not.toMatch(/board\s+\d|board\(s\) answer|GARBLED/);
    // spelled differently (upper-case host), the same gateway
    expect((await scan(gw.replace('127.0.0.1', '127.0.0.1'.toUpperCase()))).code).toBe(2);
    // an unlock would be just as wrong (two masters; an opening the agent never journals)
    expect((await cli(['unlock', '--port', gw, '--dialect', 'kerong-cu16', '--board', '0', '--lock', '1', '--agent-state', dir])).code).toBe(2);
  });

  it('the serial port is refused by its claim, and by the OS lock when the CLI looks in another state directory', async () => {
    const r = await scan(tty);
    expect(r.code).toBe(2);
    expect(r.err).toContain('(pid');
    expect(r.out).toBe('');
    const elsewhere = fs.mkdtempSync(path.join(os.tmpdir(), 'no-agent-'));
    try {
      const r2 = await cli(['scan', '--port', tty, '--dialect', 'kerong-cu16', '--boards', '0-2', '--timeout', '80', '--agent-state', elsewhere]);
      expect(r2.code).toBe(2);
      expect(r2.err).toContain('is held by another process (the terminal agent?)');
      expect(r2.out).toBe('');
    } finally {
      fs.rmSync(elsewhere, { recursive: true, force: true });
    }
  });

  it('the agent stopped: its claims are gone and the same scan reports the two boards there are', async () => {
    await agent.stop();
    expect(findPortHolder([dir], gw)).toBeNull();
    const r = await scan(gw);
    expect(r.code).toBe(EXIT.ok);
    expect(r.out).toContain('2 board(s) answer: 0, 1');
    expect(r.out).not.toContain('GARBLED');
    const t = await scan(tty);
    expect(t.code).toBe(EXIT.ok);
    expect(t.out).toContain('1 board(s) answer: 0');
  });

  it('a claim left by a process that is gone (a crash, a reboot) does not refuse', async () => {
    claimPorts(dir, [{ bus: 'bus0', port: gw }]);
    expect(findPortHolder([dir], gw)?.pid).toBe(process.pid);
    const file = fs.readdirSync(path.join(dir, 'ports')).map((f) => path.join(dir, 'ports', f)).find((f) => fs.readFileSync(f, 'utf8').includes(gw))!;
    const claim = JSON.parse(fs.readFileSync(file, 'utf8'));
    fs.writeFileSync(file, JSON.stringify({ ...claim, pid: 2 ** 22 + 12345 })); // no such pid
    expect(findPortHolder([dir], gw)).toBeNull();
    if (claim.startTicks) {
      fs.writeFileSync(file, JSON.stringify({ ...claim, startTicks: '1' })); // this pid, but another process's start
      expect(findPortHolder([dir], gw)).toBeNull();
    }
    expect((await scan(gw)).code).toBe(EXIT.ok);
  });
});
