// The external broker client never logs (or shows) the password in the broker URL.
import crypto from 'node:crypto';
import { Writable } from 'node:stream';
import { describe, expect, inject, it } from 'vitest';
import { ExternalBroker, maskUrl } from '../src/mqtt/external';
import { createLogger } from '../src/logger';

describe('external broker URL in logs', () => {
  it('maskUrl hides the password and keeps the rest', () => {
    expect(maskUrl('mqtts://central:s3cr3t-pw@broker.example:8883/x')).toBe('mqtts://central:***@broker.example:8883/x');
    expect(maskUrl('mqtt://127.0.0.1:1883')).toBe('mqtt://127.0.0.1:1883');
    expect(maskUrl('not a url')).toBe('(invalid url)');
  });

  const url = inject('mqttUrl');
  it.skipIf(!url)('connecting logs the URL with the password masked; address() shows no password', async () => {
    const lines: string[] = [];
    const destination = new Writable({
      write(chunk, _enc, cb) {
        lines.push(String(chunk));
        cb();
      },
    });
    const u = new URL(url!);
    u.username = 'central';
    u.password = 's3cr3t-pw-in-url';
    const bus = new ExternalBroker({ url: u.toString(), log: createLogger({ level: 'info', destination }), clientId: `central-test-${crypto.randomBytes(6).toString('hex')}` });
    try {
      await bus.start();
    } catch (e) {
      // a broker that insists on real credentials: the error must not carry the password either
      expect((e as Error).message).not.toContain('s3cr3t-pw-in-url');
      return;
    } finally {
      await bus.stop();
    }
    const text = lines.join('');
    expect(text).toContain('connected to external MQTT broker');
    // masked by maskUrl, and the log redactor then takes the whole user info out of logged URLs
    expect(text).toMatch(/"url":"mqtt:\/\/(central:\*\*\*|\[redacted\])@127\.0\.0\.1/);
    expect(text).not.toContain('s3cr3t-pw-in-url');
    expect(bus.address()).not.toContain('s3cr3t-pw-in-url');
  });
});
