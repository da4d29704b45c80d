// The REPL commands against a running simulator (the same code the CLI runs for each typed line).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import { Simulator } from '@locker/firmware-sim';
import { runCommand, type CommandContext } from '@locker/firmware-sim';

describe('REPL commands', () => {
  const sim = new Simulator({
    realTiming: false,
    buses: [
      { name: 'a', link: { kind: 'pty' }, dialect: 'kerong-cu16', boards: [{ address: 0 }, { address: 1 }] },
      { name: 'b', link: { kind: 'tcp', port: 0 }, dialect: 'generic-8a80', boards: [{ address: 1 }] },
    ],
    scanners: [{ name: 'sc', link: { kind: 'pty' } }],
  });
  const ctx: CommandContext = { sim, bus: 'a', frames: false, quit: false };
  const run = (line: string) => runCommand(ctx, line);

  beforeAll(() => sim.start());
  afterAll(() => sim.stop());

  it('door and item commands change the lock state', async () => {
    expect(await run('pulse 0 2')).toBe('board 0 lock 2: door open');
    expect(await run('close 0 2')).toMatch(/door closed, latched/);
    await run('put 1 16');
    expect(sim.bus('a').lock(1, 16).state.item).toBe(true);
    await run('take 1 16');
    expect(sim.bus('a').lock(1, 16).state.item).toBe(false);
    expect(await run('open 0 5')).toMatch(/FORCED/);
    const status = await run('status');
    expect(status).toMatch(/board 0: 16 locks, pulse 500 ms; open: 5;/);
  });

  it('fault commands set and clear faults on the current bus', async () => {
    await run('fault stuck 0 3');
    await run('fault jam 1 4');
    await run('fault offline 1');
    await run('fault late 250');
    await run('fault noreply');
    await run('fault garbage on');
    await run('fault badsum');
    await run('fault echo');
    expect(sim.bus('a').faults.get()).toEqual({
      noReply: true,
      lateReplyMs: 250,
      garbageBeforeReply: true,
      badChecksum: true,
      stuckLatch: [{ board: 0, lock: 3 }],
      jammedDoor: [{ board: 1, lock: 4 }],
      offlineBoards: [1],
      echo: true,
    });
    expect(await run('pulse 0 3')).toMatch(/stuck/);
    await run('fault stuck 0 3 off');
    expect(sim.bus('a').faults.get().stuckLatch).toEqual([]);
    await run('clear');
    expect(await run('faults')).toBe('bus a faults: none');
  });

  it('use switches the bus the commands act on', async () => {
    expect(await run('use b')).toBe('current bus: b');
    await run('pulse 1 3');
    expect(sim.bus('b').lock(1, 3).state.doorOpen).toBe(true);
    await expect(run('use nosuch')).rejects.toMatchObject({ code: 'SIM_UNKNOWN_BUS' });
    ctx.bus = 'a';
  });

  it('unplug and replug by name', async () => {
    const p = sim.bus('a').path!;
    await run('unplug a');
    expect(fs.existsSync(p)).toBe(false);
    expect(await run('status a')).toMatch(/UNPLUGGED/);
    expect(await run('replug a')).toBe(`a back at ${p}`);
    expect(fs.existsSync(p)).toBe(true);
  });

  it('bad commands fail with SIM_BAD_COMMAND', async () => {
    for (const line of ['frob', 'open x 1', 'fault nope', 'scan', 'pin 12ab', 'fault noreply maybe']) {
      await expect(run(line), line).rejects.toMatchObject({ code: expect.stringMatching(/^SIM_/) });
    }
    await expect(run('open 0 17')).rejects.toMatchObject({ code: 'SIM_UNKNOWN_LOCK' });
    await expect(run('open 9 1')).rejects.toMatchObject({ code: 'SIM_UNKNOWN_BOARD' });
  });

  it('quit sets the quit flag', async () => {
    await run('quit');
    expect(ctx.quit).toBe(true);
  });
});
