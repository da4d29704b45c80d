// The scale-out broker's rules (deploy/mosquitto.conf, deploy/mosquitto.acl) hold on a real
// Mosquitto: a private instance on a free port with a password file and the shipped configuration
// (support/mosquitto.ts), and the same checks the embedded broker passes — a terminal reaches only
// its own topics, every central user all of them, and nobody takes over another client's session.
import os from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type MqttClient } from 'mqtt';
import { topics } from '../src/mqtt/topics';
import { centralClientId } from '../src/mqtt/external';
import { MOSQUITTO, MOSQUITTO_PASSWD, connect, sleep, startMosquitto, type TestMosquitto } from './support/mosquitto';

const available = !!MOSQUITTO && !!MOSQUITTO_PASSWD;
const d = available || process.env.LOCKER_REQUIRE_SERVICES === '1' ? describe : describe.skip;

describe('centralClientId', () => {
  it('is the configured client id, else the user name (the session name under use_username_as_clientid), else locker-central-<hostname>', () => {
    expect(centralClientId({ clientId: 'explicit', username: 'central-1' }, 'h')).toBe('explicit');
    expect(centralClientId({ username: 'central-1' }, 'h')).toBe('central-1');
    expect(centralClientId({}, 'h')).toBe('locker-central-h');
  });
});

d(`deploy/mosquitto.conf + mosquitto.acl on a private Mosquitto${available ? '' : ' (SKIPPED: mosquitto not installed)'}`, () => {
  let broker: TestMosquitto;
  let url: string;
  const clients: MqttClient[] = [];
  const track = (c: MqttClient) => (clients.push(c), c);

  beforeAll(async () => {
    broker = await startMosquitto({
      users: [['central', 'central-secret'], ['central-1', 'central1-secret'], ['central-2', 'central2-secret'], ['term-a1', 'secret-a1'], ['term-b1', 'secret-b1']],
    });
    url = broker.url;
  });
  afterAll(async () => {
    for (const c of clients) c.end(true);
    await broker?.cleanup();
  });

  it('refuses anonymous clients and wrong passwords (and accepts the right one)', async () => {
    const ok = await connect(url, { clientId: 'term-a1', username: 'term-a1', password: 'secret-a1' });
    ok.end(true);
    await expect(connect(url, { clientId: 'anon' })).rejects.toThrow();
    await expect(connect(url, { clientId: 'term-a1', username: 'term-a1', password: 'wrong' })).rejects.toThrow();
  });

  it('lets the central users see terminal events and command terminals; confines terminals to their own topics', async () => {
    const central = track(await connect(url, { clientId: 'central-1', username: 'central-1', password: 'central1-secret' }));
    const central2 = track(await connect(url, { clientId: 'central-2', username: 'central-2', password: 'central2-secret' }));
    const a = track(await connect(url, { clientId: 'term-a1', username: 'term-a1', password: 'secret-a1' }));
    const b = track(await connect(url, { clientId: 'term-b1', username: 'term-b1', password: 'secret-b1' }));
    const centralGot: string[] = [];
    const central2Got: string[] = [];
    const aGot: string[] = [];
    const bGot: string[] = [];
    central.on('message', (t, p) => centralGot.push(`${t} ${p}`));
    central2.on('message', (t, p) => central2Got.push(`${t} ${p}`));
    a.on('message', (t, p) => aGot.push(`${t} ${p}`));
    b.on('message', (t, p) => bGot.push(`${t} ${p}`));
    await central.subscribeAsync('locker/v1/t/+/up/#', { qos: 1 });
    await central2.subscribeAsync('locker/v1/t/+/up/#', { qos: 1 });
    await a.subscribeAsync('locker/v1/t/term-a1/down/#', { qos: 1 });
    await b.subscribeAsync('locker/v1/t/term-b1/down/#', { qos: 1 });
    // term-a1 tries to read term-b1's commands (Mosquitto grants the SUBACK but delivers nothing)
    await a.subscribeAsync('locker/v1/t/term-b1/down/#', { qos: 1 }).catch(() => undefined);

    await a.publishAsync(topics.up('term-a1', 'events'), 'a-own', { qos: 1 });
    await a.publishAsync(topics.up('term-b1', 'events'), 'a-spoofs-b', { qos: 1 }).catch(() => undefined);
    await a.publishAsync(topics.down('term-b1', 'commands'), 'a-commands-b', { qos: 1 }).catch(() => undefined);
    await central.publishAsync(topics.down('term-b1', 'commands'), 'central-to-b', { qos: 1 });
    await sleep(400);

    expect(centralGot).toContain(`${topics.up('term-a1', 'events')} a-own`);
    expect(central2Got).toContain(`${topics.up('term-a1', 'events')} a-own`);
    expect(centralGot.some((m) => m.includes('a-spoofs-b'))).toBe(false);
    expect(bGot).toEqual([`${topics.down('term-b1', 'commands')} central-to-b`]);
    expect(aGot).toEqual([]);
    for (const c of [central, central2, a, b]) await c.endAsync();
  });

  it("does not let a terminal take over another terminal's connection by claiming its client id", async () => {
    const central = track(await connect(url, { clientId: 'central-1', username: 'central-1', password: 'central1-secret' }));
    const a = track(await connect(url, { clientId: 'term-a1', username: 'term-a1', password: 'secret-a1' }));
    const aGot: string[] = [];
    a.on('message', (t, p) => aGot.push(`${t} ${p}`));
    await a.subscribeAsync(topics.down('term-a1', '#'), { qos: 1 });
    let aClosed = false;
    a.on('close', () => (aClosed = true));

    // term-b1, with its own (valid) password, claims term-a1's client id
    const b = track(await connect(url, { clientId: 'term-a1', username: 'term-b1', password: 'secret-b1' }));
    const bGot: string[] = [];
    b.on('message', (t, p) => bGot.push(`${t} ${p}`));
    await sleep(300);
    await central.publishAsync(topics.down('term-a1', 'commands'), 'central-to-a', { qos: 1 });
    await sleep(300);

    expect(aClosed).toBe(false);
    expect(a.connected).toBe(true);
    expect(aGot).toEqual([`${topics.down('term-a1', 'commands')} central-to-a`]);
    expect(bGot).toEqual([]);
    for (const c of [central, a, b]) await c.endAsync();
  });

  it("does not let a terminal take over a central instance's connection or its persistent session (and the events queued in it)", async () => {
    const centralId = centralClientId({ username: 'central-1' });
    expect(centralId).toBe('central-1');
    const central = track(await connect(url, { clientId: centralId, username: 'central-1', password: 'central1-secret', clean: false }));
    await central.subscribeAsync('locker/v1/t/+/up/#', { qos: 1 });
    let centralClosed = false;
    central.on('close', () => (centralClosed = true));
    const a = track(await connect(url, { clientId: 'term-a1', username: 'term-a1', password: 'secret-a1' }));

    // connected: term-b1 claims the central's client id (and the id earlier versions derived from
    // the host name): the central stays connected
    for (const id of [centralId, `locker-central-${os.hostname()}`]) {
      const b = track(await connect(url, { clientId: id, username: 'term-b1', password: 'secret-b1', clean: false }));
      await sleep(200);
      await b.endAsync();
    }
    expect(centralClosed).toBe(false);
    expect(central.connected).toBe(true);

    // away: events queue in the central's session; term-b1 resuming "that session" must not take them
    await central.endAsync();
    await a.publishAsync(topics.up('term-a1', 'events'), 'queued-1', { qos: 1 });
    await a.publishAsync(topics.up('term-a1', 'events'), 'queued-2', { qos: 1 });
    const thiefGot: string[] = [];
    const thief = track(await connect(url, { clientId: centralId, username: 'term-b1', password: 'secret-b1', clean: false }, (t, p) => thiefGot.push(`${t} ${p}`)));
    await sleep(300);
    await thief.endAsync();

    const got: string[] = [];
    const back = track(await connect(url, { clientId: centralId, username: 'central-1', password: 'central1-secret', clean: false }, (_t, p) => got.push(p.toString())));
    for (let i = 0; i < 40 && got.length < 2; i++) await sleep(50);
    expect(thiefGot).toEqual([]);
    expect(got).toEqual(['queued-1', 'queued-2']);
    for (const c of [back, a]) await c.endAsync();
  });
});
