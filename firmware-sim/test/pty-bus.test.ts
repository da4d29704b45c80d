// The simulator driven over a REAL pseudo-terminal: the test opens the agent-side path with the
// `serialport` package and writes raw request bytes from the spec's vectors (lockbus.md §1).
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import pino from 'pino';
import { dialects } from '@locker/lockbus';
import { GARBAGE_BYTES, Simulator, liveSocatCount, type SimBus } from '@locker/firmware-sim';
import { SerialHost, bytes, sleep, spaced } from './helpers';

const cu16 = dialects['kerong-cu16'];
const STATUS_B0 = '02 00 30 03 35';
const STATUS_B1 = '02 10 30 03 45';

function decodeStatus(frame: Buffer) {
  const rep = cu16.decodeReply(frame);
  if (rep.kind !== 'status') throw new Error(`expected status, got ${rep.kind}`);
  return rep;
}

describe('CU16 bus over a socat pty', () => {
  const sim = new Simulator({
    realTiming: false,
    buses: [{ name: 'main', link: { kind: 'pty' }, dialect: 'kerong-cu16', boards: [{ address: 0 }, { address: 1 }] }],
  });
  let bus: SimBus;
  let host: SerialHost;

  beforeAll(async () => {
    await sim.start();
    bus = sim.bus('main');
    host = await SerialHost.open(bus.path!);
  });
  afterAll(async () => {
    await host?.close();
    await sim.stop();
  });
  beforeEach(() => {
    bus.reset();
    host.clear();
  });

  it('exposes a real tty path for the agent', () => {
    expect(bus.path).toMatch(/main$/);
    expect(fs.lstatSync(bus.path!).isSymbolicLink()).toBe(true);
    expect(fs.realpathSync(bus.path!)).toMatch(/^\/dev\/pts\/\d+$/);
  });

  it('answers a status read with the spec vector when lock 3 is open and items sit in locks 1 and 10', async () => {
    bus.lock(0, 3).pulse(500); // the board's own unlock pulse: the door springs open
    bus.lock(0, 1).putItem();
    bus.lock(0, 10).putItem();
    const reply = await host.transact(STATUS_B0, 9);
    expect(spaced(reply)).toBe('02 00 35 FB FF 01 02 03 37');
  });

  it('reports every lock closed and no items after power-on', async () => {
    const rep = decodeStatus(await host.transact(STATUS_B1, 9));
    expect(rep.board).toBe(1);
    expect(rep.locks.slice(0, 16).every(Boolean)).toBe(true);
    expect(rep.items!.slice(0, 16).some(Boolean)).toBe(false);
  });

  it('opens the door on an unlock (board 1 lock 5) and the next status shows it; closing relatches', async () => {
    const frames: string[] = [];
    const onFrame = (e: { hex: string; meaning: string }) => frames.push(`${e.hex} ${e.meaning}`);
    sim.on('frame', onFrame);
    host.write(bytes('02 14 31 03 4A'));
    // CU16 does not answer unlocks: confirm by polling, as the driver does.
    let rep = decodeStatus(await host.transact(STATUS_B1, 9));
    expect(rep.locks[4]).toBe(false);
    expect(rep.locks.filter((b, i) => i < 16 && !b)).toHaveLength(1);
    expect(bus.lock(1, 5).state).toEqual({ latched: false, doorOpen: true, item: false });
    expect(frames).toContain('02 14 31 03 4A unlock board 1 lock 5');
    bus.lock(1, 5).closeDoor();
    rep = decodeStatus(await host.transact(STATUS_B1, 9));
    expect(rep.locks[4]).toBe(true);
    sim.off('frame', onFrame);
  });

  it('item sensors follow put and take', async () => {
    bus.lock(1, 16).putItem();
    expect(decodeStatus(await host.transact(STATUS_B1, 9)).items![15]).toBe(true);
    bus.lock(1, 16).takeItem();
    expect(decodeStatus(await host.transact(STATUS_B1, 9)).items![15]).toBe(false);
  });

  it('unlock-all opens every door of the board', async () => {
    host.write(bytes('02 00 33 03 38'));
    const rep = decodeStatus(await host.transact(STATUS_B0, 9));
    expect(rep.locks.slice(0, 16).some(Boolean)).toBe(false);
    expect(bus.lock(1, 1).state.doorOpen).toBe(false); // other board untouched
  });

  it('stays silent for a board that is not on the bus', async () => {
    host.write(bytes('02 20 30 03 55'));
    await sleep(150);
    expect(host.received.length).toBe(0);
    // and still answers a board that is present afterwards
    expect(decodeStatus(await host.transact(STATUS_B0, 9)).board).toBe(0);
  });

  it('answers a whole-bus scan with one status frame per board present', async () => {
    const both = await host.transact('02 F0 32 03 27', 18);
    expect(decodeStatus(both.subarray(0, 9)).board).toBe(0);
    expect(decodeStatus(both.subarray(9, 18)).board).toBe(1);
  });

  it('acknowledges a set-pulse command and uses the new pulse time', async () => {
    const ack = await host.transact('02 00 37 00 37 03 73', 5);
    expect(cu16.decodeReply(ack)).toEqual({ kind: 'pulseAck', board: 0 });
    expect(bus.board(0).pulseMs).toBe(550);
  });

  it('ignores a request with a bad checksum', async () => {
    host.write(bytes('02 00 30 03 36'));
    await sleep(150);
    expect(host.received.length).toBe(0);
  });

  it('reassembles a request that arrives in pieces', async () => {
    host.write(bytes('02 00'));
    await sleep(20);
    host.write(bytes('30 03 35'));
    expect(decodeStatus(Buffer.from(await host.waitBytes(9))).board).toBe(0);
  });

  it('emits rx and tx frame events with hex and meaning', async () => {
    const seen: { dir: string; hex: string; meaning: string }[] = [];
    const fn = (e: { dir: string; hex: string; meaning: string }) => seen.push(e);
    sim.on('frame', fn);
    bus.lock(0, 3).openDoor();
    await host.transact(STATUS_B0, 9);
    sim.off('frame', fn);
    expect(seen[0]).toMatchObject({ dir: 'rx', hex: '02 00 30 03 35', meaning: 'read status of board 0' });
    expect(seen[1]).toMatchObject({ dir: 'tx', hex: '02 00 35 FB FF 00 00 03 34' });
    expect(seen[1]!.meaning).toContain('open 3');
  });

  describe('faults', () => {
    it('noReply: the board acts but nothing comes back', async () => {
      bus.faults.set({ noReply: true });
      host.write(bytes(STATUS_B0));
      host.write(bytes('02 00 31 03 36')); // unlock lock 1 still happens
      await sleep(200);
      expect(host.received.length).toBe(0);
      expect(bus.lock(0, 1).state.doorOpen).toBe(true);
      bus.faults.clear();
      expect(decodeStatus(await host.transact(STATUS_B0, 9)).locks[0]).toBe(false);
    });

    it('lateReplyMs: nothing for a while, then the full reply', async () => {
      bus.faults.set({ lateReplyMs: 400 });
      host.write(bytes(STATUS_B0));
      const t0 = performance.now();
      await sleep(150);
      expect(host.received.length).toBe(0);
      const reply = await host.waitBytes(9, 5000);
      expect(performance.now() - t0).toBeGreaterThanOrEqual(400);
      expect(decodeStatus(Buffer.from(reply)).board).toBe(0);
    });

    it('garbageBeforeReply: noise bytes precede a valid reply', async () => {
      bus.faults.set({ garbageBeforeReply: true });
      const got = await host.transact(STATUS_B0, GARBAGE_BYTES.length + 9);
      expect([...got.subarray(0, GARBAGE_BYTES.length)]).toEqual(GARBAGE_BYTES);
      const parsed = cu16.createParser('replies').push(got);
      expect(parsed.map((p) => p.ok)).toEqual([false, true]);
      expect(parsed[0]).toMatchObject({ ok: false, error: 'GARBAGE' });
    });

    it('badChecksum: the reply fails its checksum', async () => {
      bus.faults.set({ badChecksum: true });
      const got = await host.transact(STATUS_B0, 9);
      expect(got[8]).not.toBe(0x36);
      expect(() => cu16.decodeReply(got)).toThrow(expect.objectContaining({ code: 'BAD_CHECKSUM' }));
      expect(cu16.createParser('replies').push(got)).toEqual([{ ok: false, error: 'BAD_CHECKSUM', bytes: got }]);
    });

    it('stuckLatch: an unlock leaves the latch engaged and the door shut', async () => {
      bus.faults.set({ stuckLatch: [{ board: 0, lock: 2 }] });
      host.write(bytes('02 01 31 03 37')); // unlock board 0 lock 2
      await sleep(50);
      const rep = decodeStatus(await host.transact(STATUS_B0, 9));
      expect(rep.locks[1]).toBe(true);
      expect(bus.lock(0, 2).state).toMatchObject({ latched: true, doorOpen: false });
    });

    it('jammedDoor: the latch releases for the pulse but the door never opens, then relatches', async () => {
      bus.faults.set({ jammedDoor: [{ board: 0, lock: 4 }] });
      await host.transact('02 00 37 00 14 03 50', 5); // pulse 200 ms
      host.write(bytes('02 03 31 03 39')); // unlock board 0 lock 4
      const during = decodeStatus(await host.transact(STATUS_B0, 9));
      expect(during.locks[3]).toBe(false); // latch released...
      expect(bus.lock(0, 4).state.doorOpen).toBe(false); // ...but the door did not move
      // After the pulse the latch drops back onto the shut door.
      const deadline = performance.now() + 3000;
      let relatched = false;
      while (!relatched && performance.now() < deadline) {
        await sleep(50);
        relatched = decodeStatus(await host.transact(STATUS_B0, 9)).locks[3] === true;
      }
      expect(relatched).toBe(true);
      expect(bus.lock(0, 4).state.doorOpen).toBe(false);
      bus.lock(0, 4).openDoor(); // a person cannot pull it open either
      expect(bus.lock(0, 4).state.doorOpen).toBe(false);
    });

    it('offlineBoards: the board is silent and does not act; others still answer', async () => {
      bus.faults.set({ offlineBoards: [1] });
      host.write(bytes(STATUS_B1));
      host.write(bytes('02 14 31 03 4A'));
      await sleep(150);
      expect(host.received.length).toBe(0);
      expect(bus.lock(1, 5).state.doorOpen).toBe(false);
      expect(decodeStatus(await host.transact(STATUS_B0, 9)).board).toBe(0);
      bus.faults.set({ offlineBoards: [] });
      expect(decodeStatus(await host.transact(STATUS_B1, 9)).board).toBe(1);
    });

    it('echo: the host hears its own request before the reply', async () => {
      bus.faults.set({ echo: true });
      const got = await host.transact(STATUS_B0, 5 + 9);
      expect(spaced(got.subarray(0, 5))).toBe(STATUS_B0.toUpperCase());
      expect(decodeStatus(got.subarray(5)).board).toBe(0);
    });

    it('clear() turns every fault off', async () => {
      bus.faults.set({ noReply: true, echo: true, badChecksum: true });
      bus.faults.clear();
      expect(spaced(await host.transact(STATUS_B0, 9))).toBe('02 00 35 FF FF 00 00 03 38');
    });
  });

  it('logs every frame in hex with its meaning under ns sim.bus.<name>', async () => {
    const lines: Record<string, unknown>[] = [];
    const dest = { write: (s: string) => lines.push(JSON.parse(s)) };
    const logged = new Simulator({
      realTiming: false,
      logger: pino({ level: 'debug' }, dest),
      buses: [{ name: 'logged', link: { kind: 'pty' }, dialect: 'kerong-cu16', boards: [{ address: 0 }] }],
    });
    await logged.start();
    const h = await SerialHost.open(logged.bus('logged').path!);
    await h.transact(STATUS_B0, 9);
    await h.close();
    await logged.stop();
    const frames = lines.filter((l) => l.ns === 'sim.bus.logged' && typeof l.hex === 'string');
    expect(frames.map((l) => [l.dir, l.hex, l.meaning])).toEqual([
      ['rx', '02 00 30 03 35', 'read status of board 0'],
      ['tx', '02 00 35 FF FF 00 00 03 38', 'status of board 0: all closed, no items'],
    ]);
  });

  it('removes socat and its links on stop()', async () => {
    const other = new Simulator({
      realTiming: false,
      buses: [{ name: 'tmp', link: { kind: 'pty' }, dialect: 'kerong-cu16', boards: [{ address: 0 }] }],
    });
    const before = liveSocatCount();
    await other.start();
    const p = other.bus('tmp').path!;
    expect(liveSocatCount()).toBe(before + 1);
    expect(fs.existsSync(p)).toBe(true);
    await other.stop();
    expect(liveSocatCount()).toBe(before);
    expect(fs.existsSync(p)).toBe(false);
  });
});

describe('polarity and auto-close', () => {
  const sim = new Simulator({
    realTiming: false,
    buses: [
      {
        name: 'low',
        link: { kind: 'pty' },
        dialect: 'kerong-cu16',
        polarity: 'closed-low',
        autoCloseMs: 100,
        boards: [{ address: 0, locks: 12 }],
      },
    ],
  });
  let host: SerialHost;
  beforeAll(async () => {
    await sim.start();
    host = await SerialHost.open(sim.bus('low').path!);
  });
  afterAll(async () => {
    await host?.close();
    await sim.stop();
  });

  it('closed-low: closed locks read as 0 bits, an open one as 1', async () => {
    let rep = decodeStatus(await host.transact(STATUS_B0, 9));
    expect(rep.locks.slice(0, 12).every((b) => !b)).toBe(true);
    host.write(bytes('02 00 31 03 36'));
    rep = decodeStatus(await host.transact(STATUS_B0, 9));
    expect(rep.locks[0]).toBe(true);
  });

  it('autoCloseMs: an opened door closes by itself', async () => {
    host.write(bytes('02 01 31 03 37'));
    await sleep(20);
    expect(sim.bus('low').lock(0, 2).state.doorOpen).toBe(true);
    const deadline = performance.now() + 3000;
    while (sim.bus('low').lock(0, 2).state.doorOpen && performance.now() < deadline) await sleep(20);
    expect(sim.bus('low').lock(0, 2).state).toMatchObject({ doorOpen: false, latched: true });
    expect(decodeStatus(await host.transact(STATUS_B0, 9)).locks[1]).toBe(false);
  });

  it('ignores an unlock for a lock the board does not have', async () => {
    host.write(bytes('02 0F 31 03 45')); // lock 16 on a 12-lock board
    await sleep(50);
    expect(sim.bus('low').board(0).locks.every((l) => !l.state.doorOpen)).toBe(true);
  });
});
