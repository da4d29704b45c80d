// The scale-out broker's limits (deploy/mosquitto.conf, as shipped) on a real Mosquitto: a terminal
// publishing QoS 2 or a packet over max_packet_size is disconnected and its message reaches no
// central instance; a large code snapshot a central instance publishes (1 MiB: a pick up point of
// some 4,000 valid codes) still reaches its terminal.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MqttClient } from 'mqtt';
import { MOSQUITTO, MOSQUITTO_PASSWD, connect, sleep, startMosquitto, type TestMosquitto } from './support/mosquitto';

const available = !!MOSQUITTO && !!MOSQUITTO_PASSWD;
const d = available || process.env.LOCKER_REQUIRE_SERVICES === '1' ? describe : describe.skip;
const MAX_PACKET = 4 * 1024 * 1024;

d(`deploy/mosquitto.conf limits on a private Mosquitto${available ? '' : ' (SKIPPED: mosquitto not installed)'}`, () => {
  let broker: TestMosquitto;
  let central: MqttClient;
  const got: string[] = [];
  const clients: MqttClient[] = [];
  beforeAll(async () => {
    broker = await startMosquitto({ users: [['central-1', 'central1-secret'], ['term-a1', 'secret-a1']] });
    central = await connect(broker.url, { clientId: 'central-1', username: 'central-1', password: 'central1-secret' }, (t, p) => got.push(`${t} ${p.length}`));
    await central.subscribeAsync('locker/v1/t/+/up/#', { qos: 1 });
  });
  afterAll(async () => {
    for (const c of [central, ...clients]) c?.end(true);
    await broker?.cleanup();
  });

  const terminal = async () => {
    const c = await connect(broker.url, { clientId: 'term-a1', username: 'term-a1', password: 'secret-a1' });
    clients.push(c);
    return c;
  };
  const closed = (c: MqttClient) => new Promise<boolean>((resolve) => {
    if (!c.connected) return resolve(true);
    const t = setTimeout(() => resolve(false), 3000);
    c.once('close', () => {
      clearTimeout(t);
      resolve(true);
    });
  });

  it('a terminal publishing QoS 2 is disconnected; nothing reaches the central instance', async () => {
    got.length = 0;
    const term = await terminal();
    const gone = closed(term);
    term.publish('locker/v1/t/term-a1/up/events', JSON.stringify({ v: 1, type: 'qos2' }), { qos: 2 });
    expect(await gone).toBe(true);
    await sleep(300);
    expect(got).toEqual([]);
  });

  it('a terminal sending a packet over max_packet_size is disconnected; nothing reaches the central instance', async () => {
    got.length = 0;
    const term = await terminal();
    const gone = closed(term);
    term.publish('locker/v1/t/term-a1/up/events', Buffer.alloc(MAX_PACKET + 1024, 0x61), { qos: 1 });
    expect(await gone).toBe(true);
    await sleep(300);
    expect(got).toEqual([]);
    // a legitimate event still goes through on a new connection
    const again = await terminal();
    await again.publishAsync('locker/v1/t/term-a1/up/events', JSON.stringify({ v: 1, type: 'doorOpened' }), { qos: 1 });
    for (let i = 0; i < 50 && got.length === 0; i++) await sleep(20);
    expect(got).toHaveLength(1);
  });

  it("a central instance's 1 MiB code snapshot reaches the terminal", async () => {
    const term = await terminal();
    const received: number[] = [];
    term.on('message', (_t, p) => received.push(p.length));
    await term.subscribeAsync('locker/v1/t/term-a1/down/#', { qos: 1 });
    await central.publishAsync('locker/v1/t/term-a1/down/codes', Buffer.alloc(1024 * 1024, 0x62), { qos: 1 });
    for (let i = 0; i < 100 && received.length === 0; i++) await sleep(20);
    expect(received).toEqual([1024 * 1024]);
  });
});
