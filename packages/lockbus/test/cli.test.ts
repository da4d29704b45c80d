// Wiring-check CLI against the simulator over a real pty (in-process main(); one spawn of the
// real bin for the exit code).
import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Simulator } from '@locker/firmware-sim';
import { EXIT, main, parseBoards, type CliDeps } from '../src/cli';
import { dialects } from '../src/index';
import { createTransport } from '../src/transport/factory';

/** the repository root (the bin is run from there, whatever the clone's path) */
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

describe('locker-lockbus CLI', () => {
  const sim = new Simulator({
    buses: [
      { name: 'cu', link: { kind: 'pty' }, dialect: 'kerong-cu16', boards: [{ address: 0 }, { address: 2 }] },
      { name: 'g', link: { kind: 'tcp', port: 0 }, dialect: 'generic-8a80', boards: [{ address: 4, locks: 12 }] },
    ],
  });
  beforeAll(() => sim.start());
  afterAll(() => sim.stop());
  beforeEach(() => {
    sim.bus('cu').reset();
    sim.bus('g').reset();
  });

  async function run(args: string[], deps?: CliDeps) {
    const lines: string[] = [];
    const code = await main(
      args,
      (s) => lines.push(s),
      (s) => lines.push(s),
      deps,
    );
    return { code, text: lines.join('\n') };
  }

  /**
   * The real pty, with the write of one unlock frame hooked: `before` runs before the frame is
   * written, and the write fails (EIO, as a USB adapter vanishing mid-drain) before the frame left
   * or after it did.
   */
  function hookUnlockWrite(board: number, lock: number, how: { breaks?: 'before' | 'after'; before?: () => void }): CliDeps {
    const frame = dialects['kerong-cu16'].encodeRequest({ kind: 'unlock', board, lock });
    return {
      createTransport(port, opts) {
        const t = createTransport(port, opts);
        const write = t.write.bind(t);
        t.write = async (d: Buffer) => {
          const ours = d.equals(frame);
          if (ours) how.before?.();
          if (ours && how.breaks === 'before') throw Object.assign(new Error('EIO: i/o error, write'), { code: 'EIO' });
          await write(d);
          if (ours && how.breaks === 'after') throw Object.assign(new Error('EIO: i/o error, write'), { code: 'EIO' });
        };
        return t;
      },
    };
  }

  it('scan lists the boards that answer, open locks and items', async () => {
    const cu = sim.bus('cu');
    cu.lock(0, 3).openDoor();
    cu.lock(0, 1).putItem();
    cu.lock(2, 10).putItem();
    const { code, text } = await run(['scan', '--port', cu.path!, '--dialect', 'kerong-cu16', '--boards', '0-3', '--timeout', '100']);
    expect(code).toBe(0);
    expect(text).toContain('board  0: answers (ok ok ok); 16 locks; open: 3; items: 1');
    expect(text).toContain('board  1: no answer');
    expect(text).toContain('board  2: answers (ok ok ok); 16 locks; open: none; items: 10');
    expect(text).toContain('board  3: no answer');
    expect(text).toContain('2 board(s) answer: 0, 2');
  });

  it('scan --json over TCP on an 8A/80 bus', async () => {
    const g = sim.bus('g');
    g.lock(4, 12).openDoor();
    const { code, text } = await run(['scan', '--port', `tcp://127.0.0.1:${g.tcpPort}`, '--dialect', 'generic-8a80', '--boards', '3,4', '--locks', '12', '--json', '--timeout', '100']);
    expect(code).toBe(0);
    const report = JSON.parse(text);
    expect(report.boards.map((b: { address: number; result: string }) => [b.address, b.result])).toEqual([
      [3, 'no-answer'],
      [4, 'answers'],
    ]);
    expect(report.boards[1].openLocks).toEqual([12]);
    expect(report.boards[1].items).toBeNull();
  });

  it('the baud rate of ?baud= in --port is the one reported and used; a contradicting --baud is refused', async () => {
    const cu = sim.bus('cu');
    const { code, text } = await run(['scan', '--port', `${cu.path!}?baud=9600`, '--dialect', 'kerong-cu16', '--boards', '0', '--json', '--timeout', '100']);
    expect(code).toBe(0);
    expect(JSON.parse(text).baudRate).toBe(9600);
    const bad = await run(['scan', '--port', `${cu.path!}?baud=9600`, '--baud', '19200', '--dialect', 'kerong-cu16', '--boards', '0']);
    expect(bad.code).toBe(2); // contradicting flags: a usage error
    expect(bad.text).toContain('says 9600 baud but 19200 is configured');
  });

  it('garbled answers are flagged as a possible duplicate address', async () => {
    const cu = sim.bus('cu');
    cu.faults.set({ badChecksum: true });
    // a generous reply timeout: on a loaded machine a short one turns late answers into NO_REPLY
    const { code, text } = await run(['scan', '--port', cu.path!, '--dialect', 'kerong-cu16', '--boards', '2', '--timeout', '600']);
    expect(code).toBe(0);
    expect(text).toMatch(/board {2}2: GARBLED \(BAD_CHECKSUM/);
    expect(text).toContain('same address');
  });

  it('scan finds nothing on a silent bus: exit 3', async () => {
    const cu = sim.bus('cu');
    cu.faults.set({ noReply: true });
    const { code, text } = await run(['scan', '--port', cu.path!, '--dialect', 'kerong-cu16', '--boards', '0-1', '--timeout', '60']);
    expect(code).toBe(EXIT.noAnswer);
    expect(code).toBe(3);
    expect(text).toContain('no board answers');
  });

  it('unlock opens the door and confirms it by polling', async () => {
    const cu = sim.bus('cu');
    const { code, text } = await run(['unlock', '--port', cu.path!, '--dialect', 'kerong-cu16', '--board', '2', '--lock', '7', '--watch', '3000']);
    expect(text).toContain('unlock sent to board 2 lock 7');
    expect(text).toContain('door 2/7 opened');
    expect(code).toBe(0);
    expect(cu.lock(2, 7).state.doorOpen).toBe(true);
  });

  it('unlock whose write broke off after the frame left: said so, not sent again, the door seen to open: exit 0', async () => {
    const cu = sim.bus('cu');
    const { code, text } = await run(['unlock', '--port', cu.path!, '--dialect', 'kerong-cu16', '--board', '2', '--lock', '7', '--watch', '3000'], hookUnlockWrite(2, 7, { breaks: 'after' }));
    expect(text).toContain('unlock to board 2 lock 7: the write broke off; the lock may or may not have pulsed (not sent again)');
    expect(text).not.toContain('unlock sent to board');
    expect(text).toContain('door 2/7 opened');
    expect(code).toBe(EXIT.ok);
    expect(cu.lock(2, 7).state.doorOpen).toBe(true);
  });

  it('unlock whose write broke off before the frame left: no jam claimed, the door found shut: exit 3', async () => {
    const cu = sim.bus('cu');
    const { code, text } = await run(['unlock', '--port', cu.path!, '--dialect', 'kerong-cu16', '--board', '0', '--lock', '5', '--watch', '3000'], hookUnlockWrite(0, 5, { breaks: 'before' }));
    expect(text).toContain('unlock to board 0 lock 5: the write broke off; the lock may or may not have pulsed (not sent again)');
    expect(text).toContain('door 0/5 found shut: the unlock was not seen to open it');
    expect(text).not.toContain('jam');
    expect(code).toBe(EXIT.noAnswer);
    expect(cu.lock(0, 5).state.doorOpen).toBe(false);
  });

  it('unlock to a board that drops off the bus as it is sent: no outcome, it stops waiting at --watch + 2 s: exit 3', async () => {
    const cu = sim.bus('cu');
    const started = Date.now();
    const { code, text } = await run(['unlock', '--port', cu.path!, '--dialect', 'kerong-cu16', '--board', '2', '--lock', '3', '--watch', '500'], hookUnlockWrite(2, 3, { before: () => cu.faults.set({ offlineBoards: [2] }) }));
    const took = Date.now() - started;
    expect(text).toContain('unlock sent to board 2 lock 3');
    expect(text).toContain('no outcome of 2/3 seen within 2500 ms');
    expect(code).toBe(EXIT.noAnswer);
    expect(cu.lock(2, 3).state.doorOpen).toBe(false);
    expect(took).toBeGreaterThanOrEqual(2500);
    expect(took).toBeLessThan(10_000);
  });

  it('a missing port: exit 1 with PORT_OPEN_FAILED', async () => {
    const { code, text } = await run(['scan', '--port', '/dev/does-not-exist-lockbus', '--dialect', 'kerong-cu16']);
    expect(code).toBe(1);
    expect(text).toContain('PORT_OPEN_FAILED');
  });

  it('usage errors: one line, exit 2; --help: exit 0', async () => {
    expect(await run([])).toEqual({ code: 2, text: 'locker-lockbus: a command is required: scan or unlock (see --help)' });
    expect(await run(['scan', '--port', 'x', '--dialect', 'nope'])).toEqual({ code: 2, text: 'locker-lockbus: unknown dialect nope: one of kerong-cu16, kerong-48, generic-8a80 (see --help)' });
    expect(await run(['scan', '--dialect', 'kerong-cu16'])).toEqual({ code: 2, text: 'locker-lockbus: --port is required (see --help)' });
    expect(await run(['scan', '--port', 'x', '--dialect', 'kerong-cu16', '--timeout', 'soon'])).toEqual({ code: 2, text: 'locker-lockbus: --timeout must be an integer 1..60000, got "soon" (see --help)' });
    expect(await run(['unlock', '--port', 'x', '--dialect', 'kerong-cu16', '--board', '0'])).toEqual({ code: 2, text: 'locker-lockbus: --lock is required (see --help)' });
    expect(await run(['scan', '--port', 'x', '--dialect', 'kerong-cu16', '--bogus'])).toEqual({ code: 2, text: 'locker-lockbus: unknown option --bogus (see --help)' });
    expect(await run(['scan', '--port'])).toEqual({ code: 2, text: "locker-lockbus: Option '--port <value>' argument missing (see --help)" });
    expect(await run(['scan', '--port', 'x', '--dialect', 'kerong-cu16', '--boards', '0-99'])).toEqual({ code: 2, text: 'locker-lockbus: board 15 outside 0..14 for kerong-cu16 (see --help)' });
    const help = await run(['--help']);
    expect(help.code).toBe(0);
    expect(help.text).toMatch(/^locker-lockbus: .*\n\nUsage:/);
    expect((await run(['scan', '--help'])).code).toBe(0);
    expect(parseBoards('0-2,5', dialects['kerong-cu16'])).toEqual([0, 1, 2, 5]);
    expect(() => parseBoards('0', dialects['generic-8a80'])).toThrow(/outside 1..31/);
  });

  it('the bin runs (exit code 3 on a silent bus)', async () => {
    const cu = sim.bus('cu');
    cu.faults.set({ noReply: true });
    const r = await promisify(execFile)(process.execPath, ['packages/lockbus/bin/locker-lockbus.js', 'scan', '--port', cu.path!, '--dialect', 'kerong-cu16', '--boards', '0', '--timeout', '50'], {
      cwd: ROOT,
    }).catch((e: { code: number; stdout: string }) => e);
    expect((r as { code?: number }).code).toBe(3);
    expect((r as { stdout: string }).stdout).toContain('board  0: no answer');
  });
});
