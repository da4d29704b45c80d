// ScannerReader: unit level (bytes fed directly, MemoryTransport) and over a REAL pseudo-terminal
// with the simulator's scanners and the real `serialport` package.
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { Simulator } from '@locker/firmware-sim';
import { KeypadInput, MemoryTransport, ScannerReader, type Credential } from '../src/index';
import { waitFor } from './helpers/fake-board';

const logger = pino({ level: 'silent' });
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function reader(opts: ConstructorParameters<typeof ScannerReader>[0] = {}) {
  const r = new ScannerReader({ logger, interByteTimeoutMs: 30, dedupeWindowMs: 200, ...opts });
  const got: Credential[] = [];
  r.on('credential', (c) => got.push(c));
  cleanups.push(() => r.stop());
  return { r, got };
}
const sleep = (ms: number) => new Promise((res) => setTimeout(res, ms));
const vals = (got: Credential[]) => got.map((c) => `${c.source}:${c.value}`);

describe('ScannerReader (unit)', () => {
  it('CR, LF and CRLF each end a read; CRLF counts once', async () => {
    const { r, got } = reader({ dedupeWindowMs: 0 });
    await r.start();
    r.feed(Buffer.from('AAA\rBBB\nCCC\r\nDDD\r\n'));
    expect(vals(got)).toEqual(['qr:AAA', 'qr:BBB', 'qr:CCC', 'qr:DDD']);
  });

  it('no suffix: the inter-byte timeout ends the read', async () => {
    const { r, got } = reader();
    await r.start();
    r.feed(Buffer.from('PARCEL-'));
    await sleep(10);
    r.feed(Buffer.from('42'));
    expect(got).toEqual([]);
    await sleep(60);
    expect(vals(got)).toEqual(['qr:PARCEL-42']);
  });

  it('a configured suffix is trusted from the first read: a slow chunk does not cut the code in two', async () => {
    const { r, got } = reader({ suffix: '\r', suffixedIdleTimeoutMs: 500 });
    await r.start();
    r.feed(Buffer.from('PARCEL-'));
    await sleep(80); // longer than the inter-byte timeout (30 ms)
    r.feed(Buffer.from('42\r'));
    expect(vals(got)).toEqual(['qr:PARCEL-42']);
    // unset: the first read (no suffix seen yet) is ended by the silence
    const auto = reader();
    await auto.r.start();
    auto.r.feed(Buffer.from('PARCEL-'));
    await sleep(80);
    auto.r.feed(Buffer.from('43\r'));
    expect(vals(auto.got)).toEqual(['qr:PARCEL-', 'qr:43']);
  });

  it("suffix '': silence ends every read, also after a stray CR", async () => {
    const { r, got } = reader({ suffix: '' });
    await r.start();
    r.feed(Buffer.from('AAA\r'));
    r.feed(Buffer.from('BB'));
    await sleep(80);
    expect(vals(got)).toEqual(['qr:AAA', 'qr:BB']);
  });

  it('a read split at every offset is reassembled', async () => {
    const { r, got } = reader({ dedupeWindowMs: 0 });
    await r.start();
    const data = Buffer.from('LOCKER-0001\r\n');
    for (let cut = 0; cut <= data.length; cut++) {
      r.feed(data.subarray(0, cut));
      r.feed(data.subarray(cut));
    }
    expect(vals(got)).toEqual(Array.from({ length: data.length + 1 }, () => 'qr:LOCKER-0001'));
  });

  it('the same code twice within the window is reported once; after the window again', async () => {
    let now = 1000;
    const { r, got } = reader({ now: () => now });
    await r.start();
    r.feed(Buffer.from('X1\rX1\r'));
    now += 150;
    r.feed(Buffer.from('X1\rY2\r'));
    now += 201;
    r.feed(Buffer.from('X1\r'));
    expect(vals(got)).toEqual(['qr:X1', 'qr:Y2', 'qr:X1']);
  });

  it('digits ending in # are a keypad PIN; presentPin and KeypadInput use the same event', async () => {
    const { r, got } = reader();
    await r.start();
    r.feed(Buffer.from('4711#\r'));
    expect(r.presentPin('12ab')).toBe(false);
    r.presentPin('2468');
    const kp = new KeypadInput(r);
    for (const k of ['1', '3', '5', 'Backspace', '7', 'Enter']) kp.key(k);
    for (const k of ['9', '*', '8', '#']) kp.key(k);
    expect(vals(got)).toEqual(['keypad:4711', 'keypad:2468', 'keypad:137', 'keypad:8']);
    expect(got.every((c) => c.reader === 'scanner')).toBe(true);
  });

  it('text is UTF-8 (also split inside a character), with a latin1 fallback for invalid UTF-8; encoding can be forced', async () => {
    const { r, got } = reader({ dedupeWindowMs: 0 });
    await r.start();
    const utf8 = Buffer.from('Zoë-4711\r', 'utf8');
    r.feed(utf8);
    r.feed(utf8.subarray(0, 3)); // 'Zo' + the first byte of ë
    r.feed(utf8.subarray(3));
    r.feed(Buffer.from('Zoë-4711\r', 'latin1')); // EB alone is not UTF-8: latin1
    expect(vals(got)).toEqual(['qr:Zoë-4711', 'qr:Zoë-4711', 'qr:Zoë-4711']);
    const l1 = reader({ dedupeWindowMs: 0, encoding: 'latin1' });
    await l1.r.start();
    l1.r.feed(utf8);
    expect(vals(l1.got)).toEqual(['qr:ZoÃ«-4711']);
  });

  it('trigger() writes the configured family\'s start / stop bytes; refuses without a family or a port', async () => {
    const [host, dev] = MemoryTransport.pair();
    await dev.open();
    const seen: string[] = [];
    dev.on('data', (c) => seen.push(c.toString('hex')));
    const { r } = reader({ transport: host, triggerFamily: 'honeywell' });
    await expect(r.trigger('start')).rejects.toMatchObject({ code: 'PORT_NOT_OPEN' });
    await r.start();
    await r.trigger('start');
    await r.trigger('stop');
    expect(seen).toEqual(['16540d', '16550d']);
    const dl = reader({ transport: MemoryTransport.pair()[0], triggerFamily: 'datalogic' });
    await dl.r.start();
    await dl.r.trigger('stop');
    await expect(reader().r.trigger('start')).rejects.toMatchObject({ code: 'UNSUPPORTED' });
  });

  it('control bytes are stripped, over-long reads dropped', async () => {
    const { r, got } = reader({ maxLength: 8 });
    await r.start();
    r.feed(Buffer.from('\x02AB\x00C\r'));
    r.feed(Buffer.from('0123456789ABCDEF\r'));
    r.feed(Buffer.from('OK\r'));
    expect(vals(got)).toEqual(['qr:ABC', 'qr:OK']);
  });

  it('reads through a transport and reopens it when it vanishes', async () => {
    const [host, dev] = MemoryTransport.pair();
    await dev.open();
    const { r, got } = reader({ transport: host, reconnect: { initialMs: 5, maxMs: 20 } });
    await r.start();
    await dev.write(Buffer.from('T1\r'));
    const closed = waitFor(r, 'portClosed');
    host.vanish();
    await closed;
    const opened = waitFor(r, 'portOpened');
    host.restore();
    await opened;
    await dev.write(Buffer.from('T2\r'));
    expect(vals(got)).toEqual(['qr:T1', 'qr:T2']);
  });
});

describe('ScannerReader over a real pty (simulated scanners)', () => {
  const suffixes = [
    ['CR', '\r'],
    ['LF', '\n'],
    ['CRLF', '\r\n'],
    ['no suffix', ''],
  ] as const;

  it.each(suffixes)('suffix %s: whole reads, reads split in chunks, repeats, keypad PINs', async (_n, suffix) => {
    const sim = new Simulator({ buses: [], scanners: [{ name: 'scan', link: { kind: 'pty' }, suffix, chunkGapMs: 10 }] });
    await sim.start();
    cleanups.push(() => sim.stop());
    const sc = sim.scanner('scan');
    const { r, got } = reader({ port: `${sc.path}?baud=9600`, interByteTimeoutMs: 60, dedupeWindowMs: 300 });
    await r.start();
    const next = () => waitFor<Credential>(r, 'credential');
    let p = next();
    await sc.scan('https://lk.example/p/ABC-123');
    expect(await p).toMatchObject({ source: 'qr', value: 'https://lk.example/p/ABC-123' });
    p = next();
    await sc.scan('PICKUP-98765', { chunks: 4 });
    expect(await p).toMatchObject({ source: 'qr', value: 'PICKUP-98765' });
    // the same code again at once: reported once
    await sc.scan('PICKUP-98765');
    await sleep(120);
    p = next();
    await sc.typePin('246810');
    expect(await p).toMatchObject({ source: 'keypad', value: '246810' });
    expect(vals(got)).toEqual(['qr:https://lk.example/p/ABC-123', 'qr:PICKUP-98765', 'keypad:246810']);
  });

  it('a non-ASCII code (UTF-8 from the scanner) arrives intact, whole and in chunks', async () => {
    const sim = new Simulator({ buses: [], scanners: [{ name: 'scan', link: { kind: 'pty' }, suffix: '\r', chunkGapMs: 10 }] });
    await sim.start();
    cleanups.push(() => sim.stop());
    const sc = sim.scanner('scan');
    const { r } = reader({ port: `${sc.path}?baud=9600`, interByteTimeoutMs: 60, dedupeWindowMs: 0 });
    await r.start();
    let p = waitFor<Credential>(r, 'credential');
    await sc.scan('Zoë-4711');
    expect(await p).toMatchObject({ source: 'qr', value: 'Zoë-4711' });
    p = waitFor<Credential>(r, 'credential');
    await sc.scan('Zoë-4711', { chunks: 9 }); // 9 bytes + CR in chunks of 1-2 bytes
    expect(await p).toMatchObject({ source: 'qr', value: 'Zoë-4711' });
  });
});
