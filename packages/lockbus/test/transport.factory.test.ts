// parsePortUrl / createTransport / resolveBaudRate, and the driver's timings following the one
// baud rate the port is opened at.
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { LockBus, MemoryTransport, SerialTransport, TcpTransport, createTransport, parsePortUrl, resolveBaudRate } from '../src/index';

const logger = pino({ level: 'silent' });

describe('parsePortUrl', () => {
  it.each([
    ['/dev/ttyUSB0', { kind: 'serial', path: '/dev/ttyUSB0', baudRate: null }],
    ['/dev/ttyUSB0?baud=9600', { kind: 'serial', path: '/dev/ttyUSB0', baudRate: 9600 }],
    ['  /dev/ttyUSB0?baudRate=19200 ', { kind: 'serial', path: '/dev/ttyUSB0', baudRate: 19200 }],
    ['serial:///dev/ttyACM0?baud=115200', { kind: 'serial', path: '/dev/ttyACM0', baudRate: 115200 }],
    ['COM3', { kind: 'serial', path: 'COM3', baudRate: null }],
    ['tcp://10.0.0.7:4196', { kind: 'tcp', host: '10.0.0.7', port: 4196 }],
    ['tcp://gw.local:23', { kind: 'tcp', host: 'gw.local', port: 23 }],
    ['tcp://[::1]:4196', { kind: 'tcp', host: '::1', port: 4196 }],
  ])('%s', (url, want) => {
    expect(parsePortUrl(url)).toEqual(want);
  });

  it.each(['', '   ', 'tcp://host', 'tcp://:4196', 'tcp://h:0', 'tcp://h:70000', 'http://x/y', '?baud=9600', '/dev/x?baud=0', '/dev/x?baud=abc', '/dev/x?baud=9600.5'])(
    'rejects %j with BAD_URL',
    (url) => {
      expect(() => parsePortUrl(url)).toThrow(expect.objectContaining({ name: 'LockBusError', code: 'BAD_URL' }));
    },
  );
});

describe('createTransport', () => {
  it('serial with the baud rate of the url, else of the options', () => {
    const a = createTransport('/dev/ttyUSB9?baud=9600', { baudRate: 9600 });
    expect(a).toBeInstanceOf(SerialTransport);
    expect(a.description).toBe('serial:/dev/ttyUSB9@9600');
    expect(createTransport('/dev/ttyUSB9', { baudRate: 19200 }).description).toBe('serial:/dev/ttyUSB9@19200');
    expect(a.isOpen).toBe(false);
  });
  it('tcp', () => {
    const t = createTransport('tcp://127.0.0.1:4196');
    expect(t).toBeInstanceOf(TcpTransport);
    expect(t.description).toBe('tcp://127.0.0.1:4196');
  });
  it('serial without any baud rate: BAD_URL', () => {
    expect(() => createTransport('/dev/ttyUSB9')).toThrow(expect.objectContaining({ code: 'BAD_URL' }));
  });
});

describe('one baud rate for the port and the timings', () => {
  it('resolveBaudRate: url, else configured, else the dialect default; a contradiction is BAD_CONFIG', () => {
    expect(resolveBaudRate('/dev/ttyUSB0?baud=9600', undefined, 19200)).toBe(9600);
    expect(resolveBaudRate('/dev/ttyUSB0?baud=9600', 9600, 19200)).toBe(9600);
    expect(resolveBaudRate('/dev/ttyUSB0', 38400, 19200)).toBe(38400);
    expect(resolveBaudRate('/dev/ttyUSB0', undefined, 19200)).toBe(19200);
    expect(resolveBaudRate('tcp://h:1', 9600, 19200)).toBe(9600);
    expect(resolveBaudRate(undefined, undefined, 9600)).toBe(9600);
    expect(() => resolveBaudRate('/dev/ttyUSB0?baud=9600', 19200, 19200)).toThrow(expect.objectContaining({ code: 'BAD_CONFIG' }));
    expect(() => resolveBaudRate(undefined, -5, 9600)).toThrow(expect.objectContaining({ code: 'BAD_CONFIG' }));
  });

  it('a CU16 bus on /dev/x?baud=9600 opens at 9600 and gaps by 9600 (3.5 chars + 1 ms)', () => {
    const bus = new LockBus({ name: 'b', port: '/dev/ttyUSB9?baud=9600', dialect: 'kerong-cu16', boards: [{ address: 0 }], logger });
    expect(bus.baudRate).toBe(9600);
    expect(bus.gapMs).toBeCloseTo(3.5 * (10_000 / 9600) + 1, 6);
    expect((bus as unknown as { transport: { description: string } }).transport.description).toBe('serial:/dev/ttyUSB9@9600');
  });

  it('defaults: the dialect baud rate; baudRate option; explicit gapMs wins', () => {
    const mk = (extra: object) => new LockBus({ name: 'b', transport: new MemoryTransport(), dialect: 'kerong-cu16', boards: [{ address: 0 }], logger, ...extra });
    expect(mk({}).gapMs).toBeCloseTo(3.5 * (10_000 / 19200) + 1, 6);
    expect(mk({ baudRate: 9600 }).gapMs).toBeCloseTo(3.5 * (10_000 / 9600) + 1, 6);
    expect(mk({ gapMs: 7 }).gapMs).toBe(7);
    const g = new LockBus({ name: 'g', port: '/dev/ttyUSB9', dialect: 'generic-8a80', boards: [{ address: 1 }], logger });
    expect(g.gapMs).toBeCloseTo(3.5 * (10_000 / 9600) + 1, 6);
  });

  it('a baudRate option that contradicts the port string is BAD_CONFIG', () => {
    expect(() => new LockBus({ name: 'b', port: '/dev/ttyUSB9?baud=9600', baudRate: 19200, dialect: 'kerong-cu16', boards: [{ address: 0 }], logger })).toThrow(
      expect.objectContaining({ code: 'BAD_CONFIG' }),
    );
  });
});
