// The scanner simulation over its own real pty: suffix styles, chunked delivery, keypad entry.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Simulator, type SimScanner } from '@locker/firmware-sim';
import { SerialHost } from './helpers';

describe('scanner on a pty', () => {
  const sim = new Simulator({
    buses: [],
    scanners: [
      { name: 'hw', link: { kind: 'pty' } }, // default suffix: CR
      { name: 'dl', link: { kind: 'pty' }, suffix: '\r\n', chunkGapMs: 20 },
      { name: 'raw', link: { kind: 'pty' }, suffix: '' },
    ],
  });
  const hosts: Record<string, SerialHost> = {};
  let hw: SimScanner;

  beforeAll(async () => {
    await sim.start();
    for (const n of ['hw', 'dl', 'raw']) hosts[n] = await SerialHost.open(sim.scanner(n).path, 9600);
    hw = sim.scanner('hw');
  });
  afterAll(async () => {
    for (const h of Object.values(hosts)) await h.close();
    await sim.stop();
  });

  it('each scanner has its own tty path', () => {
    const paths = ['hw', 'dl', 'raw'].map((n) => sim.scanner(n).path);
    expect(new Set(paths).size).toBe(3);
    for (const p of paths) expect(p).toMatch(/\/(hw|dl|raw)$/);
  });

  it.each([
    ['\r', 'CR'],
    ['\n', 'LF'],
    ['\r\n', 'CRLF'],
    ['', 'none'],
  ] as const)('sends the code followed by suffix %j (%s)', async (suffix, _name) => {
    const h = hosts.hw!;
    h.clear();
    await hw.scan('PKG-4711', { suffix });
    const want = `PKG-4711${suffix}`;
    await h.waitText(want);
    expect(h.received.toString('latin1')).toBe(want);
  });

  it('uses the configured suffix by default (CRLF scanner, suffix-less scanner)', async () => {
    hosts.dl!.clear();
    hosts.raw!.clear();
    await sim.scanner('dl').scan('ABC');
    await sim.scanner('raw').scan('XYZ');
    await hosts.dl!.waitText('ABC\r\n');
    await hosts.raw!.waitText('XYZ');
    expect(hosts.dl!.received.toString()).toBe('ABC\r\n');
    expect(hosts.raw!.received.toString()).toBe('XYZ');
  });

  it('delivers a chunked scan in several pieces', async () => {
    const h = hosts.dl!;
    h.clear();
    await sim.scanner('dl').scan('0123456789ABCDEF', { chunks: 4 });
    await h.waitText('0123456789ABCDEF\r\n');
    expect(h.received.toString()).toBe('0123456789ABCDEF\r\n');
    // 20 ms pauses between chunks: the host's reads see more than one piece.
    expect(h.arrivals.length).toBeGreaterThan(1);
  });

  it('keypad PIN entry: one write per key, then # and the suffix', async () => {
    const h = hosts.hw!;
    h.clear();
    await hw.typePin('4321');
    await h.waitText('4321#\r');
    expect(h.received.toString()).toBe('4321#\r');
    await expect(hw.typePin('12a')).rejects.toMatchObject({ code: 'SIM_BAD_COMMAND' });
  });

  it('records bytes the host sends to the scanner (software trigger)', async () => {
    hosts.hw!.write(Buffer.from([0x16, 0x54, 0x0d]));
    const deadline = performance.now() + 2000;
    while (hw.received.length === 0 && performance.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    expect(Buffer.concat(hw.received).toString('hex')).toBe('16540d');
  });

  it('refuses to scan while unplugged and works again after replug', async () => {
    await hw.unplug();
    await expect(hw.scan('X')).rejects.toMatchObject({ code: 'SIM_UNPLUGGED' });
    await hw.replug();
    await hosts.hw!.close();
    hosts.hw = await SerialHost.open(hw.path, 9600);
    await hw.scan('BACK');
    await hosts.hw.waitText('BACK\r');
  });
});
