// unplug()/replug() over a real pty and over TCP, TCP gateway mode, and wire timing at the
// configured baud rate (a lower bound only: a reply never arrives before its wire time).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { dialects } from '@locker/lockbus';
import { Simulator, wireTimeMs, type SimBus } from '@locker/firmware-sim';
import { SerialHost, TcpHost, bytes, sleep, spaced } from './helpers';

const cu16 = dialects['kerong-cu16'];

async function until(cond: () => boolean, timeoutMs = 3000): Promise<boolean> {
  const deadline = performance.now() + timeoutMs;
  while (!cond()) {
    if (performance.now() > deadline) return false;
    await sleep(10);
  }
  return true;
}

describe('unplug and replug over a pty', () => {
  const sim = new Simulator({
    realTiming: false,
    buses: [{ name: 'usb0', link: { kind: 'pty' }, dialect: 'kerong-cu16', boards: [{ address: 0 }] }],
  });
  let bus: SimBus;
  beforeAll(async () => {
    await sim.start();
    bus = sim.bus('usb0');
  });
  afterAll(() => sim.stop());

  it('the device path vanishes, the open port dies, and the device returns at the same path', async () => {
    const path = bus.path!;
    const host = await SerialHost.open(path);
    let closed = false;
    host.onClose(() => (closed = true));
    expect(spaced(await host.transact('02 00 30 03 35', 9))).toBe('02 00 35 FF FF 00 00 03 38');

    await bus.unplug();
    expect(fs.existsSync(path)).toBe(false);
    expect(bus.plugged).toBe(false);
    // The agent's open file descriptor sees the device go away (EIO -> close) once it touches it.
    host.write(bytes('02 00 30 03 35'));
    expect(await until(() => closed || !host.isOpen)).toBe(true);
    await expect(SerialHost.open(path)).rejects.toThrow();

    // State survives the unplug (the boards did not lose power).
    bus.lock(0, 7).putItem();
    await bus.replug();
    expect(bus.path).toBe(path);
    expect(fs.existsSync(path)).toBe(true);
    const again = await SerialHost.open(path);
    const rep = cu16.decodeReply(await again.transact('02 00 30 03 35', 9));
    expect(rep.kind === 'status' && rep.items![6]).toBe(true);
    await again.close();
    await host.close();
  });
});

describe('explicit pty paths', () => {
  it('replaces a dangling link but refuses the live device of another simulator', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sim-path-'));
    const p = path.join(dir, 'ttyUSB0');
    fs.symlinkSync('/dev/pts/999999', p); // left behind by a dead socat
    const mk = () =>
      new Simulator({ realTiming: false, buses: [{ name: 'x', link: { kind: 'pty', path: p }, dialect: 'kerong-cu16', boards: [{ address: 0 }] }] });
    const first = mk();
    await first.start();
    expect(fs.realpathSync(p)).toMatch(/^\/dev\/pts\/\d+$/);
    const second = mk();
    await expect(second.start()).rejects.toMatchObject({ code: 'SIM_PATH_IN_USE' });
    expect(fs.existsSync(p)).toBe(true); // the first simulator's device is untouched
    const host = await SerialHost.open(p);
    expect(cu16.decodeReply(await host.transact('02 00 30 03 35', 9))).toMatchObject({ kind: 'status', board: 0 });
    await host.close();
    await first.stop();
    expect(fs.existsSync(p)).toBe(false);
  });
});

describe('TCP gateway mode', () => {
  const sim = new Simulator({
    realTiming: false,
    buses: [{ name: 'gw', link: { kind: 'tcp', port: 0 }, dialect: 'kerong-cu16', boards: [{ address: 0 }, { address: 2 }] }],
  });
  let bus: SimBus;
  beforeAll(async () => {
    await sim.start();
    bus = sim.bus('gw');
  });
  afterAll(() => sim.stop());

  it('listens on a free port and has no tty path', () => {
    expect(bus.path).toBeNull();
    expect(bus.tcpPort).toBeGreaterThan(0);
  });

  it('answers status and unlock the same way as over a pty', async () => {
    const host = await TcpHost.connect(bus.tcpPort!);
    let rep = cu16.decodeReply(await host.transact('02 20 30 03 55', 9));
    expect(rep).toMatchObject({ kind: 'status', board: 2 });
    host.write(bytes('02 21 31 03 57')); // unlock board 2 lock 2
    rep = cu16.decodeReply(await host.transact('02 20 30 03 55', 9));
    expect(rep.kind === 'status' && rep.locks[1]).toBe(false);
    expect(bus.lock(2, 2).state.doorOpen).toBe(true);
    host.clear();
    host.write(bytes('02 10 30 03 45')); // board 1 is not on this bus
    await sleep(150);
    expect(host.received.length).toBe(0);
    await host.close();
  });

  it('faults apply over TCP too (echo + garbage)', async () => {
    const host = await TcpHost.connect(bus.tcpPort!);
    bus.faults.set({ echo: true, garbageBeforeReply: true });
    const got = await host.transact('02 00 30 03 35', 5 + 4 + 9);
    expect(spaced(got.subarray(0, 5))).toBe('02 00 30 03 35');
    expect(cu16.createParser('replies').push(got.subarray(5)).filter((p) => p.ok)).toHaveLength(1);
    bus.faults.clear();
    await host.close();
  });

  it('unplug drops the connection and refuses new ones; replug listens again on the same port', async () => {
    const port = bus.tcpPort!;
    const host = await TcpHost.connect(port);
    let closed = false;
    host.onClose(() => (closed = true));
    await bus.unplug();
    expect(await until(() => closed)).toBe(true);
    await expect(TcpHost.connect(port)).rejects.toThrow(/ECONNREFUSED/);
    await bus.replug();
    expect(bus.tcpPort).toBe(port);
    const again = await TcpHost.connect(port);
    expect(cu16.decodeReply(await again.transact('02 00 30 03 35', 9))).toMatchObject({ kind: 'status', board: 0 });
    await again.close();
  });
});

describe('wire timing', () => {
  // 1200 baud makes the wire time large compared with scheduling noise: 5 + 9 bytes = 116.7 ms.
  const BAUD = 1200;
  const sim = new Simulator({
    realTiming: true,
    buses: [{ name: 'slow', link: { kind: 'pty' }, dialect: 'kerong-cu16', baudRate: BAUD, boards: [{ address: 0 }] }],
  });
  beforeAll(() => sim.start());
  afterAll(() => sim.stop());

  it('a status reply never arrives before the request and reply have crossed the wire', async () => {
    const host = await SerialHost.open(sim.bus('slow').path!, BAUD);
    for (let i = 0; i < 3; i++) {
      host.clear();
      const t0 = performance.now();
      host.write(bytes('02 00 30 03 35'));
      await host.waitBytes(9);
      const last = host.arrivals[host.arrivals.length - 1]!.at;
      const first = host.arrivals[0]!.at;
      expect(last - t0).toBeGreaterThanOrEqual(wireTimeMs(5 + 9, BAUD));
      // the first byte of the reply cannot come before the request plus one reply byte
      expect(first - t0).toBeGreaterThanOrEqual(wireTimeMs(5 + 1, BAUD));
    }
    await host.close();
  });

  it('wireTimeMs follows 10 bits a byte', () => {
    expect(wireTimeMs(9, 19200)).toBeCloseTo(4.6875, 4);
    expect(wireTimeMs(1, 9600)).toBeCloseTo(1.0417, 3);
  });
});
