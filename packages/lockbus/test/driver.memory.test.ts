// LockBus against an in-memory transport and a tiny fake board (unit level). The same
// scenarios run against the real simulator over a pseudo-terminal and TCP in
// driver.sim.test.ts.
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { LockBus, LockBusManager, MemoryTransport, dialects, type DialectName, type LockBusOptions } from '../src/index';
import { FakeBoards, record, waitFor } from './helpers/fake-board';

const logger = pino({ level: 'silent' });
const fast = {
  pollIntervalMs: 20,
  replyTimeoutMs: 40,
  quietMs: 5,
  maxDrainMs: 200,
  releaseGraceMs: 30,
  jamWindowMs: 300,
  doorLeftOpenMs: null,
  reconnect: { initialMs: 10, maxMs: 40 },
  logger,
} satisfies Partial<LockBusOptions>;

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

async function setup(dialect: DialectName = 'kerong-cu16', extra: Partial<LockBusOptions> = {}, boards = [{ address: 1, locks: 4 }]) {
  const [host, dev] = MemoryTransport.pair();
  await dev.open();
  const fake = new FakeBoards(dialects[dialect], dev, boards);
  const bus = new LockBus({ name: 'b1', transport: host, dialect, boards, ...fast, ...extra });
  const events = record(bus, ['unlockSent', 'doorOpened', 'doorClosed', 'itemPlaced', 'itemRemoved', 'jam', 'unlockUnobserved', 'forcedOpen', 'boardOffline', 'boardOnline', 'portOpened', 'portClosed', 'doorLeftOpen']);
  cleanups.push(() => bus.stop());
  return { host, dev, fake, bus, events };
}

const names = (events: [string, any][]) => events.map(([n]) => n);

describe('LockBus over memory', () => {
  it('polls, unlocks, and reports door opened, item placed, door closed', async () => {
    const { fake, bus, events } = await setup();
    await bus.start();
    await waitFor(bus, 'boardOnline');
    expect(bus.locks(1).map((l) => l.door)).toEqual(['closed', 'closed', 'closed', 'closed']);
    const opened = waitFor(bus, 'doorOpened', (e) => e.lock === 2);
    const r = await bus.unlock(1, 2);
    expect(r.reply).toBeNull(); // CU16 does not answer unlocks
    const ev = await opened;
    expect(ev).toMatchObject({ bus: 'b1', board: 1, lock: 2, commanded: true });
    expect(bus.locks(1)[1]).toMatchObject({ door: 'open', latch: 'released' });
    fake.lock(1, 2).item = true;
    await waitFor(bus, 'itemPlaced', (e) => e.lock === 2);
    fake.closeDoor(1, 2);
    await waitFor(bus, 'doorClosed', (e) => e.lock === 2);
    expect(names(events)).toEqual(['portOpened', 'boardOnline', 'unlockSent', 'doorOpened', 'itemPlaced', 'doorClosed']);
    expect(fake.count('unlock')).toBe(1);
    expect(fake.overlap).toBe(false);
  });

  it('applies closed-low polarity', async () => {
    const { fake, bus } = await setup('kerong-cu16', { polarity: 'closed-low' });
    fake.closedHigh = false;
    await bus.start();
    await waitFor(bus, 'boardOnline');
    expect(bus.locks(1).map((l) => l.door)).toEqual(['closed', 'closed', 'closed', 'closed']);
    fake.openDoor(1, 4);
    const f = await waitFor(bus, 'forcedOpen');
    expect(f).toMatchObject({ lock: 4, reason: 'door' });
  });

  it('8A/80: unlock is answered; the answer is returned', async () => {
    const { bus } = await setup('generic-8a80', {}, [{ address: 3, locks: 8 }]);
    await bus.start();
    await waitFor(bus, 'boardOnline');
    const r = await bus.unlock(3, 5);
    expect(r.reply).toEqual({ kind: 'unlockAck', board: 3, lock: 5, bit: false });
    await waitFor(bus, 'doorOpened', (e) => e.lock === 5);
  });

  it('stuck latch -> jam (latch-not-released); jammed door -> jam (door-did-not-open)', async () => {
    const { fake, bus } = await setup();
    fake.faults.stuck.add('1/1');
    fake.faults.jammed.add('1/2');
    fake.pulseMs = 20;
    await bus.start();
    await waitFor(bus, 'boardOnline');
    const jams: any[] = [];
    bus.on('jam', (e) => jams.push(e));
    await bus.unlock(1, 1);
    await bus.unlock(1, 2);
    await waitFor(bus, 'jam', () => jams.length === 2, 3000);
    expect(jams.map((j) => [j.lock, j.cause]).sort()).toEqual([
      [1, 'latch-not-released'],
      [2, 'door-did-not-open'],
    ]);
    expect(fake.count('unlock')).toBe(2);
  });

  it('an unlock is never re-sent: not after a lost answer, a jam, a reconnect or more polling', async () => {
    const { host, dev, fake, bus } = await setup('generic-8a80', {}, [{ address: 1, locks: 8 }]);
    fake.faults.stuck.add('1/1');
    await bus.start();
    await waitFor(bus, 'boardOnline');
    fake.faults.noReply = true;
    const r = await bus.unlock(1, 1);
    expect(r.replyError).toBe('NO_REPLY');
    fake.faults.noReply = false;
    await waitFor(bus, 'jam');
    const closed = waitFor(bus, 'portClosed');
    dev.vanish();
    host.vanish();
    await closed;
    host.restore();
    await waitFor(bus, 'portOpened');
    await waitFor(bus, 'pollCycle');
    await waitFor(bus, 'pollCycle');
    expect(fake.count('unlock')).toBe(1);
    const unlockFrames = host.written.filter((b) => b[0] === 0x8a);
    expect(unlockFrames.length).toBe(1);
  });

  // A write that broke off may have reached the board whole (the adapter vanishing mid-drain): the
  // unlock counts as sent, is never repeated, and is watched without a jam window.
  it('a write that fails before the frame left resolves WRITE_FAILED, is not repeated, and the shut door is unlockUnobserved, no jam', async () => {
    const { host, fake, bus, events } = await setup();
    await bus.start();
    await waitFor(bus, 'boardOnline');
    const orig = host.write.bind(host);
    let calls = 0;
    host.write = async (d: Buffer) => {
      if (d[2] === 0x31) {
        calls++;
        throw Object.assign(new Error('EIO'), { code: 'EIO' });
      }
      return orig(d);
    };
    const unobserved = waitFor(bus, 'unlockUnobserved', (e) => e.lock === 1, 2000);
    const r = await bus.unlock(1, 1);
    expect(r).toMatchObject({ reply: null, replyError: 'WRITE_FAILED' });
    expect(r.sentAt).toBeGreaterThan(0);
    expect(await unobserved).toMatchObject({ board: 1, lock: 1 });
    await new Promise((res) => setTimeout(res, fast.jamWindowMs + 100));
    expect(calls).toBe(1);
    expect(fake.count('unlock')).toBe(0);
    expect(events.filter(([n]) => n === 'unlockSent').map(([, e]) => e)).toMatchObject([{ board: 1, lock: 1, uncertain: true }]);
    expect(names(events)).not.toContain('jam');
  });

  it('a write that breaks off after the frame left: the door it opened is the unlock\'s, not forced', async () => {
    const { host, fake, bus, events } = await setup();
    await bus.start();
    await waitFor(bus, 'boardOnline');
    const orig = host.write.bind(host);
    host.write = async (d: Buffer) => {
      await orig(d);
      if (d[2] === 0x31) throw Object.assign(new Error('EIO'), { code: 'EIO' });
    };
    const opened = waitFor(bus, 'doorOpened', (e) => e.lock === 2);
    const r = await bus.unlock(1, 2);
    expect(r).toMatchObject({ replyError: 'WRITE_FAILED' });
    expect(await opened).toMatchObject({ commanded: true });
    expect(fake.count('unlock')).toBe(1);
    fake.closeDoor(1, 2);
    await waitFor(bus, 'doorClosed', (e) => e.lock === 2);
    expect(names(events)).not.toContain('forcedOpen');
    expect(names(events)).not.toContain('jam');
  });

  it('a write that never drains resolves WRITE_FAILED after writeTimeoutMs and the bus carries on', async () => {
    const { host, fake, bus } = await setup('kerong-cu16', { writeTimeoutMs: 50 });
    await bus.start();
    await waitFor(bus, 'boardOnline');
    const orig = host.write.bind(host);
    host.write = (d: Buffer) => (d[2] === 0x31 ? new Promise<void>(() => undefined) : orig(d));
    expect(await bus.unlock(1, 3)).toMatchObject({ replyError: 'WRITE_FAILED' });
    host.write = orig;
    await waitFor(bus, 'pollCycle');
    fake.openDoor(1, 4);
    await waitFor(bus, 'doorOpened', (e) => e.lock === 4);
  });

  it('a throwing event listener does not count as a failed poll or stop the bus', async () => {
    const { fake, bus, events } = await setup();
    await bus.start();
    await waitFor(bus, 'boardOnline');
    const opened = waitFor(bus, 'doorOpened');
    bus.on('doorOpened', () => {
      throw new Error('listener bug');
    });
    fake.openDoor(1, 1);
    await opened;
    fake.closeDoor(1, 1);
    await waitFor(bus, 'doorClosed');
    expect(names(events).filter((n) => n === 'boardOffline')).toEqual([]);
  });

  it('unlock while the port is down rejects NOT_SENT (nothing written, safe to retry)', async () => {
    const { host, bus } = await setup();
    await bus.start();
    await waitFor(bus, 'boardOnline');
    const closed = waitFor(bus, 'portClosed');
    host.vanish();
    await closed;
    await expect(bus.unlock(1, 1)).rejects.toMatchObject({ code: 'NOT_SENT' });
    expect(host.written.filter((b) => b[2] === 0x31)).toHaveLength(0);
  });

  it('board off the bus: offline after 3 failed polls, doors unknown, then back online', async () => {
    const { fake, bus } = await setup();
    await bus.start();
    await waitFor(bus, 'boardOnline');
    fake.faults.offline.add(1);
    const off = await waitFor(bus, 'boardOffline');
    expect(off).toMatchObject({ board: 1, failures: 3, error: 'NO_REPLY' });
    expect(bus.locks(1)[0]!.door).toBe('unknown');
    fake.faults.offline.delete(1);
    await waitFor(bus, 'boardOnline');
    expect(bus.locks(1)[0]!.door).toBe('closed');
  });

  it('bad checksums count as failed polls (BAD_CHECKSUM) and garbage before answers is tolerated', async () => {
    const { fake, bus } = await setup();
    fake.faults.garbage = true;
    await bus.start();
    await waitFor(bus, 'boardOnline');
    const ok = await bus.readStatus(1);
    expect(ok.closed).toEqual([true, true, true, true]);
    fake.faults.badChecksum = true;
    const off = await waitFor(bus, 'boardOffline');
    expect(off.error).toBe('BAD_CHECKSUM');
    await expect(bus.readStatus(1)).rejects.toMatchObject({ code: 'BAD_CHECKSUM' });
  });

  it('tolerates an echoing adapter (CU16 and 8A/80)', async () => {
    for (const [dialect, addr] of [
      ['kerong-cu16', 1],
      ['generic-8a80', 2],
    ] as const) {
      const { fake, bus } = await setup(dialect, {}, [{ address: addr, locks: 8 }]);
      fake.faults.echo = true;
      await bus.start();
      await waitFor(bus, 'boardOnline');
      fake.lock(addr, 3).doorOpen = true;
      fake.lock(addr, 3).latched = false;
      await waitFor(bus, 'doorOpened');
      const st = await bus.readStatus(addr);
      expect(st.closed.slice(0, 4)).toEqual([true, true, false, true]);
      await bus.stop();
    }
  });

  it('8A/80: an answer byte-identical to the request is not lost to the echo filter', async () => {
    const { fake, bus } = await setup('generic-8a80', {}, [{ address: 1, locks: 8 }]);
    fake.faults.stuck.add('1/1'); // stays latched: feedback 11 -> answer == request bytes
    await bus.start();
    await waitFor(bus, 'boardOnline');
    const r = await bus.unlock(1, 1);
    expect(r.reply).toEqual({ kind: 'unlockAck', board: 1, lock: 1, bit: true });
  });

  it('a late answer is drained and does not confuse the next transaction', async () => {
    const { fake, bus } = await setup('kerong-cu16', { polling: false }, [
      { address: 1, locks: 4 },
      { address: 2, locks: 4 },
    ]);
    await bus.start();
    fake.lock(2, 1).latched = false;
    fake.faults.lateMs = 55; // after the 40 ms timeout, inside the drain window
    await expect(bus.readStatus(1)).rejects.toMatchObject({ code: 'NO_REPLY' });
    fake.faults.lateMs = 0;
    const st = await bus.readStatus(2);
    expect(st.closed).toEqual([false, true, true, true]);
  });

  it('8A/80: a 32-channel read-all answer is framed by the configured channel count', async () => {
    const { fake, bus } = await setup('generic-8a80', { polling: false }, [{ address: 1, locks: 32 }]);
    const closed = [1, 2, 5, 6, 25, 32];
    for (let l = 1; l <= 32; l++) fake.lock(1, l).latched = closed.includes(l); // 80 01 81 00 00 33 33 00
    await bus.start();
    const st = await bus.readStatus(1);
    expect(st.reply.kind === 'status' && st.reply.locks.length).toBe(32);
    expect(st.closed.flatMap((c, i) => (c ? [i + 1] : []))).toEqual(closed);
  });

  it('a late answer is never taken for the next request to the same board (spec 4.3)', async () => {
    // quiet 25 ms: the late answer (50 ms) comes 10 ms after the 40 ms timeout, inside the
    // silence the driver waits for after the timeout (not after its own request).
    const { fake, bus } = await setup('kerong-cu16', { polling: false, quietMs: 25 }, [{ address: 1, locks: 4 }]);
    await bus.start();
    fake.faults.lateMs = 50;
    await expect(bus.readStatus(1)).rejects.toMatchObject({ code: 'NO_REPLY' }); // answer says: all closed
    fake.faults.lateMs = 20; // the real answer would come after the stale one
    fake.openDoor(1, 2);
    const st = await bus.readStatus(1);
    expect(st.closed).toEqual([true, false, true, true]);
  });

  it('a bus scan holds the bus while the boards answer: the next request is written after the answers', async () => {
    const { dev, bus } = await setup('kerong-cu16', { polling: false, scanWindowMs: 25, quietMs: 25 }, [{ address: 1, locks: 4 }]);
    const scanFrame = dialects['kerong-cu16'].encodeRequest({ kind: 'scan' });
    const answers = [0, 1, 2, 3].map((b) => dialects['kerong-cu16'].encodeReply({ kind: 'status', board: b, locks: Array(16).fill(true), items: null }));
    dev.on('data', (c) => {
      if (!c.equals(scanFrame)) return;
      answers.forEach((a, i) => setTimeout(() => void dev.write(a), 10 + i * 8)); // the last at ~34 ms, after the 25 ms window
    });
    const wire: string[] = [];
    bus.on('frame', (f) => wire.push(`${f.dir}:${f.hex}`));
    await bus.start();
    const scan = bus.transact({ kind: 'scan' });
    const st = bus.readStatus(1);
    await scan;
    expect((await st).closed).toEqual([true, true, true, true]);
    const statusTx = wire.indexOf(`tx:${dialects['kerong-cu16'].encodeRequest({ kind: 'status', board: 1 }).toString('hex')}`);
    const rxBefore = wire.slice(0, statusTx).filter((w) => w.startsWith('rx:')).map((w) => w.slice(3)).join('');
    expect(rxBefore).toBe(answers.map((a) => a.toString('hex')).join(''));
  });

  it('one transaction at a time: unlocks jump the queue but never overlap a pending answer', async () => {
    const boards = Array.from({ length: 6 }, (_, i) => ({ address: i, locks: 16 }));
    const { fake, bus } = await setup('kerong-cu16', { pollIntervalMs: 0 }, boards);
    fake.faults.lateMs = 3;
    await bus.start();
    await Promise.all(Array.from({ length: 10 }, (_, i) => bus.unlock(i % 6, (i % 16) + 1)));
    await waitFor(bus, 'pollCycle');
    expect(fake.overlap).toBe(false);
    expect(fake.count('unlock')).toBe(10);
  });

  it('the port vanishing is survived: back-off reopen, polling carries on, no crash', async () => {
    const { host, fake, bus, events } = await setup();
    await bus.start();
    await waitFor(bus, 'boardOnline');
    const closed = waitFor(bus, 'portClosed');
    const offline = waitFor(bus, 'boardOffline');
    host.vanish();
    await closed;
    await offline;
    expect(bus.locks(1)[0]!.door).toBe('unknown');
    await new Promise((r) => setTimeout(r, 60)); // several failed reopen attempts
    host.restore();
    await waitFor(bus, 'boardOnline');
    fake.openDoor(1, 1);
    await waitFor(bus, 'doorOpened');
    expect(names(events).filter((n) => n === 'portOpened').length).toBe(2);
  });

  it('a board outside the dialect range (CU16 15: address F0 is the whole bus) is BAD_CONFIG at construction', () => {
    const [host] = MemoryTransport.pair();
    expect(() => new LockBus({ name: 'x', transport: host, dialect: 'kerong-cu16', boards: [{ address: 15 }], ...fast })).toThrow(
      expect.objectContaining({ code: 'BAD_CONFIG' }),
    );
    expect(() => new LockBus({ name: 'x', transport: host, dialect: 'generic-8a80', boards: [{ address: 0 }], ...fast })).toThrow(expect.objectContaining({ code: 'BAD_CONFIG' }));
  });

  it('start() with failIfPortMissing rejects PORT_OPEN_FAILED; without, it keeps retrying', async () => {
    const [host] = MemoryTransport.pair();
    host.available = false;
    const strict = new LockBus({ name: 'x', transport: host, dialect: 'kerong-cu16', boards: [{ address: 0 }], failIfPortMissing: true, ...fast });
    await expect(strict.start()).rejects.toMatchObject({ code: 'PORT_OPEN_FAILED' });
    const lenient = new LockBus({ name: 'y', transport: host, dialect: 'kerong-cu16', boards: [{ address: 0 }], ...fast });
    cleanups.push(() => lenient.stop());
    await lenient.start();
    const opened = waitFor(lenient, 'portOpened');
    host.available = true;
    await opened;
  });

  it('several buses at once through LockBusManager', async () => {
    const [h1, d1] = MemoryTransport.pair();
    const [h2, d2] = MemoryTransport.pair();
    await d1.open();
    await d2.open();
    const f1 = new FakeBoards(dialects['kerong-cu16'], d1, [{ address: 0, locks: 16 }]);
    const f2 = new FakeBoards(dialects['generic-8a80'], d2, [{ address: 1, locks: 8 }]);
    const m = new LockBusManager(
      [
        { name: 'left', transport: h1, dialect: 'kerong-cu16', boards: [{ address: 0 }], ...fast },
        { name: 'right', transport: h2, dialect: 'generic-8a80', boards: [{ address: 1, locks: 8 }], polarity: 'closed-high', ...fast },
      ],
      logger,
    );
    cleanups.push(() => m.stop());
    const online = new Set<string>();
    m.on('boardOnline', (e) => online.add(e.bus));
    await m.start();
    await waitFor(m, 'boardOnline', () => online.size === 2);
    const opened: string[] = [];
    m.on('doorOpened', (e) => opened.push(`${e.bus}/${e.board}/${e.lock}`));
    await Promise.all([m.unlock('left', 0, 16), m.unlock('right', 1, 8)]);
    await waitFor(m, 'doorOpened', () => opened.length === 2);
    expect(opened.sort()).toEqual(['left/0/16', 'right/1/8']);
    expect(f1.count('unlock') + f2.count('unlock')).toBe(2);
    expect(() => m.bus('nope')).toThrow(expect.objectContaining({ code: 'UNKNOWN_BUS' }));
  });

  it('LockBusManager re-emits unlockUnobserved as { bus, board, lock, at, afterMs, item } after itemPlaced', async () => {
    const [h1, d1] = MemoryTransport.pair();
    await d1.open();
    const f1 = new FakeBoards(dialects['kerong-cu16'], d1, [{ address: 0, locks: 16 }]);
    const m = new LockBusManager([{ name: 'left', transport: h1, dialect: 'kerong-cu16', boards: [{ address: 0 }], ...fast }], logger);
    cleanups.push(() => m.stop());
    const seen = record(m, ['itemPlaced', 'unlockUnobserved', 'doorOpened', 'doorClosed', 'jam', 'forcedOpen']);
    await m.start();
    await waitFor(m, 'boardOnline');
    await m.unlock('left', 0, 3);
    f1.faults.noReply = true; // before the next poll is written: the door cycle goes unseen
    await waitFor(m, 'boardOffline');
    f1.lock(0, 3).item = true;
    f1.closeDoor(0, 3);
    const settled = waitFor(m, 'unlockUnobserved');
    f1.faults.noReply = false;
    const e = await settled;
    expect(e).toEqual({ bus: 'left', board: 0, lock: 3, at: expect.any(Number), afterMs: expect.any(Number), item: true });
    expect(seen.map(([n]) => n)).toEqual(['itemPlaced', 'unlockUnobserved']);
  });

  it('setPulse is sent to a board coming online when pulseMs is set (CU16)', async () => {
    const { fake, bus } = await setup('kerong-cu16', { pulseMs: 120 });
    await bus.start();
    await waitFor(bus, 'boardOnline');
    await waitFor(bus, 'pollCycle');
    await waitFor(bus, 'pollCycle');
    expect(fake.pulseMs).toBe(120);
    expect(fake.count('setPulse')).toBe(1);
  });
});
