// The central logger's redaction: secrets and personal data never reach a log line, at the top of
// a logged object or nested below it; what operators need (ids, states, error codes) stays.
import { describe, expect, it } from 'vitest';
import { PERSONAL_KEYS, SECRET_KEYS } from '@locker/common';
import { createLogger } from '../src/logger';
import { captureLog } from './support/log-capture';

function capture() {
  const { destination, lines } = captureLog();
  return { log: createLogger({ level: 'trace', destination }), lines };
}

const SENTINEL = (k: string) => `SENTINEL-${k}-value`;

describe('central logger redaction', () => {
  const keys = [...SECRET_KEYS, ...PERSONAL_KEYS];

  it.each([
    ['top level', (k: string) => ({ [k]: SENTINEL(k) })],
    ['one level down', (k: string) => ({ shipment: { [k]: SENTINEL(k) } })],
    ['two levels down', (k: string) => ({ shipment: { receiver: { [k]: SENTINEL(k) } } })],
    ['three levels down', (k: string) => ({ msg: { shipment: { receiver: { [k]: SENTINEL(k) } } } })],
  ])('every secret and personal key is redacted %s', (_where, shape) => {
    const { log, lines } = capture();
    for (const k of keys) log.info(shape(k), 'entry');
    expect(lines).toHaveLength(keys.length);
    const all = lines.join('');
    for (const k of keys) expect(all, k).not.toContain(SENTINEL(k));
    expect(all.match(/\[redacted\]/g)).toHaveLength(keys.length);
  });

  it('the values an audit found in clear are redacted', () => {
    const { log, lines } = capture();
    log.info(
      {
        receiver: { address: { streetName: 'Keizersgracht', city: 'Amsterdam' }, fullName: 'Marieke Zwanenburg' },
        shipment: { receiver: { firstName: 'Marieke', emailAddress: 'marieke@example.test', phoneNumber: '+31687654321' } },
        terminalSecret: 'term-secret-123',
        technicianPassword: 'tech-pass-456',
        pin: '123456',
        qr: 'QR-unguessable-0123456789',
        code: '654321',
      },
      'audit',
    );
    for (const v of ['Keizersgracht', 'Amsterdam', 'Marieke', 'Zwanenburg', 'marieke@example.test', '+31687654321', 'term-secret-123', 'tech-pass-456', '123456', 'QR-unguessable', '654321']) {
      expect(lines[0], v).not.toContain(v);
    }
  });

  it('ids, states and error codes stay readable', () => {
    const { log, lines } = capture();
    const err = Object.assign(new Error('lock board did not answer'), { code: 'LOCK_TIMEOUT' });
    log.warn({ ns: 'central.shipments', shipment: 'shp-1', from: 'ReadyForDropoff', to: 'ReadyForPickup', errorCode: 'UnlockFailed', err }, 'unlock failed');
    const line = JSON.parse(lines[0]!);
    expect(line).toMatchObject({ shipment: 'shp-1', from: 'ReadyForDropoff', to: 'ReadyForPickup', errorCode: 'UnlockFailed', err: { code: 'LOCK_TIMEOUT', message: 'lock board did not answer' } });
  });

  it('matches keys in any letter case, inside arrays and five levels down', () => {
    const { log, lines } = capture();
    log.info({ Receivers: [{ EmailAddress: 'a@example.test' }, { contact: { PHONENUMBER: '+31600000001' } }], a: { b: { c: { d: { e: { password: 'deep-pass' } } } } } }, 'entry');
    for (const v of ['a@example.test', '+31600000001', 'deep-pass']) expect(lines[0], v).not.toContain(v);
  });

  it('redacts child logger bindings and leaves the caller\'s objects untouched', () => {
    const { log, lines } = capture();
    const receiver = { firstName: 'Marieke', uid: 'acc-1' };
    const logged = { receiver, list: [receiver] };
    log.child({ ns: 'central.accounts', emailAddress: 'bound@example.test' }).info(logged, 'entry');
    expect(lines[0]).not.toContain('bound@example.test');
    expect(lines[0]).not.toContain('Marieke');
    expect(JSON.parse(lines[0]!)).toMatchObject({ ns: 'central.accounts', receiver: { uid: 'acc-1', firstName: '[redacted]' } });
    expect(receiver).toEqual({ firstName: 'Marieke', uid: 'acc-1' });
    expect(logged.list[0]).toBe(receiver);
  });

  it('an error carrying a secret keeps its message and loses the secret; cycles do not hang', () => {
    const { log, lines } = capture();
    const err = Object.assign(new Error('connect refused'), { code: 'ECONNREFUSED', password: 'broker-pass' });
    const cyclic: Record<string, unknown> = { id: 'x', token: 'tok-123' };
    cyclic.self = cyclic;
    log.error({ err, cyclic }, 'broker');
    expect(lines[0]).not.toContain('broker-pass');
    expect(lines[0]).not.toContain('tok-123');
    expect(JSON.parse(lines[0]!)).toMatchObject({ err: { message: 'connect refused', code: 'ECONNREFUSED' }, cyclic: { id: 'x' } });
  });
});
