// The other two dialects over a real pty, checked against the captures in lockbus.md §2 and §3.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dialects } from '@locker/lockbus';
import { Simulator } from '@locker/firmware-sim';
import { SerialHost, bytes, sleep, spaced } from './helpers';

describe('Kerong 48-lock board', () => {
  const sim = new Simulator({
    realTiming: false,
    buses: [{ name: 'k48', link: { kind: 'pty' }, dialect: 'kerong-48', boards: [{ address: 0, locks: 1 }, { address: 1 }] }],
  });
  let host: SerialHost;
  beforeAll(async () => {
    await sim.start();
    host = await SerialHost.open(sim.bus('k48').path!);
  });
  afterAll(async () => {
    await host?.close();
    await sim.stop();
  });

  it('reproduces the hardware capture (one closed lock with an item)', async () => {
    sim.bus('k48').lock(0, 1).putItem();
    const reply = await host.transact('02 00 00 60 03 65', 18);
    expect(spaced(reply)).toBe('02 00 00 75 01 00 00 00 00 00 01 00 00 00 00 00 03 7C');
  });

  it('unlock of lock index 1 opens lock 2 of a 48-lock board', async () => {
    host.write(bytes('02 01 01 61 03 68')); // board 1, lock index 1
    const rep = dialects['kerong-48'].decodeReply(await host.transact('02 01 00 60 03 66', 18));
    expect(rep.kind).toBe('status');
    if (rep.kind !== 'status') return;
    expect(rep.locks.slice(0, 48).filter((b) => !b)).toHaveLength(1);
    expect(rep.locks[1]).toBe(false);
    expect(sim.bus('k48').lock(1, 2).state.doorOpen).toBe(true);
  });
});

describe('generic 8A/80 board', () => {
  const sim = new Simulator({
    realTiming: false,
    buses: [
      { name: 'g', link: { kind: 'pty' }, dialect: 'generic-8a80', polarity: 'closed-low', boards: [{ address: 1 }, { address: 2, locks: 12 }] },
    ],
  });
  let host: SerialHost;
  beforeAll(async () => {
    await sim.start();
    host = await SerialHost.open(sim.bus('g').path!, 9600);
  });
  afterAll(async () => {
    await host?.close();
    await sim.stop();
  });

  it('read-all of an 8-channel board with every door shut answers 3 status bytes (spec vector)', async () => {
    expect(spaced(await host.transact('80 01 00 33 B2', 7))).toBe('80 01 00 00 00 33 B2');
  });

  it('answers unlocks with the feedback byte (spec vectors, closed-high)', async () => {
    // With closed-high polarity an opened door reads 00, as in the captures.
    const hi = new Simulator({
      realTiming: false,
      buses: [{ name: 'g2', link: { kind: 'pty' }, dialect: 'generic-8a80', boards: [{ address: 1 }, { address: 2, locks: 12 }] }],
    });
    await hi.start();
    const h = await SerialHost.open(hi.bus('g2').path!, 9600);
    expect(spaced(await h.transact('8A 01 01 11 9B', 5))).toBe('8A 01 01 00 8A');
    expect(spaced(await h.transact('8A 02 0C 11 95', 5))).toBe('8A 02 0C 00 84');
    expect(hi.bus('g2').lock(2, 12).state.doorOpen).toBe(true);
    await h.close();
    await hi.stop();
  });

  it('read-one reports a single channel; closed-low inverts the bits', async () => {
    const d = dialects['generic-8a80'];
    sim.bus('g').lock(2, 3).pulse(500);
    const open = d.decodeReply(await host.transact(d.encodeRequest({ kind: 'readLock', board: 2, lock: 3 }), 5));
    expect(open).toEqual({ kind: 'lockStatus', board: 2, lock: 3, bit: true });
    const shut = d.decodeReply(await host.transact(d.encodeRequest({ kind: 'readLock', board: 2, lock: 4 }), 5));
    expect(shut).toEqual({ kind: 'lockStatus', board: 2, lock: 4, bit: false });
  });

  it('stays silent for address 3, which is not on the bus', async () => {
    host.clear();
    host.write(dialects['generic-8a80'].encodeRequest({ kind: 'status', board: 3 }));
    await sleep(150);
    expect(host.received.length).toBe(0);
  });
});
