// ONE contract for every Transport implementation: memory, serial (the real `serialport` package
// over a socat pseudo-terminal) and TCP (an RS485-to-Ethernet gateway), the latter two against
// the simulator. The device end answers a CU16 status read of board 0 (all 16 locks closed).
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { Simulator } from '@locker/firmware-sim';
import { LockBusError, MemoryTransport, SerialTransport, TcpTransport, kerongCu16, type Transport } from '../src/index';
import { FakeBoards } from './helpers/fake-board';

interface Rig {
  transport: Transport;
  /** The device end goes away (adapter unplugged, gateway down). */
  vanish(): Promise<void>;
  restore(): Promise<void>;
  cleanup(): Promise<void>;
}

const logger = pino({ level: 'silent' });

async function simRig(kind: 'pty' | 'tcp'): Promise<Rig> {
  const sim = new Simulator({
    buses: [{ name: 'main', link: kind === 'pty' ? { kind: 'pty' } : { kind: 'tcp', port: 0 }, dialect: 'kerong-cu16', boards: [{ address: 0 }] }],
    logger,
  });
  await sim.start();
  const sb = sim.bus('main');
  const transport = kind === 'pty' ? new SerialTransport({ path: sb.path!, baudRate: sb.baudRate }) : new TcpTransport({ host: '127.0.0.1', port: sb.tcpPort!, connectTimeoutMs: 1000 });
  return {
    transport,
    vanish: () => sb.unplug(),
    restore: () => sb.replug(),
    cleanup: async () => {
      await transport.close();
      await sim.stop();
    },
  };
}

const rigs: [string, () => Promise<Rig>][] = [
  [
    'memory',
    async () => {
      const [host, dev] = MemoryTransport.pair();
      await dev.open();
      new FakeBoards(kerongCu16, dev, [{ address: 0, locks: 16 }]);
      return {
        transport: host,
        vanish: async () => dev.unplug(),
        restore: async () => dev.replug(),
        cleanup: () => host.close(),
      };
    },
  ],
  ['serial over a pty', () => simRig('pty')],
  ['tcp', () => simRig('tcp')],
];

const request = kerongCu16.encodeRequest({ kind: 'status', board: 0 });
const answer = kerongCu16.encodeReply({ kind: 'status', board: 0, locks: Array(16).fill(true), items: Array(16).fill(false) });

function readBytes(t: Transport, n: number, ms = 2000): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    let got = Buffer.alloc(0);
    const timer = setTimeout(() => {
      t.off('data', onData);
      reject(new Error(`only ${got.toString('hex')} within ${ms} ms`));
    }, ms);
    const onData = (c: Buffer) => {
      got = Buffer.concat([got, c]);
      if (got.length >= n) {
        clearTimeout(timer);
        t.off('data', onData);
        resolve(got);
      }
    };
    t.on('data', onData);
  });
}

function nextClose(t: Transport, ms = 3000): Promise<Error | undefined> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no close within ${ms} ms`)), ms);
    t.once('close', (e) => {
      clearTimeout(timer);
      resolve(e);
    });
  });
}

async function roundTrip(t: Transport): Promise<void> {
  const reply = readBytes(t, answer.length);
  await t.write(request);
  expect(await reply).toEqual(answer);
}

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe.each(rigs)('Transport contract: %s', (_name, make) => {
  async function rig(): Promise<Rig> {
    const r = await make();
    cleanups.push(() => r.cleanup());
    r.transport.on('error', () => undefined); // informational; the contract is on close / write / open
    return r;
  }

  it('open, write, read, close; open is idempotent; a write after close rejects PORT_NOT_OPEN', async () => {
    const { transport: t } = await rig();
    expect(t.isOpen).toBe(false);
    expect(typeof t.description).toBe('string');
    await expect(t.write(request)).rejects.toMatchObject({ name: 'LockBusError', code: 'PORT_NOT_OPEN' });
    await t.open();
    await t.open();
    expect(t.isOpen).toBe(true);
    await roundTrip(t);
    const closed = nextClose(t);
    await t.close();
    expect(await closed).toBeUndefined(); // a close we asked for carries no error
    expect(t.isOpen).toBe(false);
    await t.close(); // twice: no-op
    const err = await t.write(request).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LockBusError);
    expect(err).toMatchObject({ code: 'PORT_NOT_OPEN' });
  });

  it('reopen after close works', async () => {
    const { transport: t } = await rig();
    await t.open();
    await t.close();
    await t.open();
    expect(t.isOpen).toBe(true);
    await roundTrip(t);
  });

  it('the device end vanishing: close with PORT_LOST, writes PORT_NOT_OPEN, open PORT_OPEN_FAILED; back: reopen and talk', async () => {
    const r = await rig();
    const t = r.transport;
    await t.open();
    await roundTrip(t);
    const closed = nextClose(t);
    await r.vanish();
    const e = await closed;
    expect(e).toBeInstanceOf(LockBusError);
    expect(e).toMatchObject({ code: 'PORT_LOST' });
    expect(t.isOpen).toBe(false);
    await expect(t.write(request)).rejects.toMatchObject({ name: 'LockBusError', code: 'PORT_NOT_OPEN' });
    const openErr = await t.open().catch((err: unknown) => err);
    expect(openErr).toBeInstanceOf(LockBusError);
    expect(openErr).toMatchObject({ code: 'PORT_OPEN_FAILED' });
    expect(t.isOpen).toBe(false);
    await r.restore();
    await t.open();
    expect(t.isOpen).toBe(true);
    await roundTrip(t);
  });
});
