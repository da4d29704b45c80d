// Limits of the embedded broker on what a terminal may send: a packet size limit (checked when the
// packet's header arrives, before its payload is buffered), no QoS 2, retained only on up/status
// (its status and last will), and a cap on the subscriptions of one connection.
import net from 'node:net';
import mqtt, { type MqttClient } from 'mqtt';
import mqttPacket from 'mqtt-packet';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestService, type TestService } from './support/harness';
import { captureLog } from './support/log-capture';
import { EmbeddedBroker } from '../src/mqtt/embedded';
import { topics } from '../src/mqtt/topics';
import { createLogger } from '../src/logger';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const MAX = 64 * 1024;

async function connect(url: string, id: string): Promise<MqttClient> {
  const c = mqtt.connect(url, { clientId: id, username: id, password: `terminal-secret-${id.replace('term-', '')}`, reconnectPeriod: 0, connectTimeout: 5000 });
  await new Promise<void>((resolve, reject) => {
    c.once('connect', () => resolve());
    c.once('error', reject);
  });
  return c;
}

/** Publishes and reports whether the broker acknowledged it ('acked') or dropped the connection ('closed'). */
function publishOutcome(c: MqttClient, topic: string, payload: Buffer | string, opts: mqtt.IClientPublishOptions): Promise<'acked' | 'closed'> {
  return new Promise((resolve) => {
    c.once('close', () => resolve('closed'));
    c.publish(topic, payload, opts, (err) => {
      if (!err) resolve('acked');
    });
  });
}

describe('embedded broker: limits on terminal messages and subscriptions', () => {
  let t: TestService;
  let broker: EmbeddedBroker;
  let lines: any[] = [];
  const clients: MqttClient[] = [];
  const stored: string[] = [];
  beforeAll(async () => {
    t = await createTestService('sqlite');
    const log = captureLog();
    lines = log.entries;
    const sink = log.destination;
    broker = new EmbeddedBroker({ host: '127.0.0.1', port: 0, db: t.ctx.db.kysely, log: createLogger({ level: 'info', destination: sink }), maxMessageBytes: MAX, maxSubscriptions: 4 });
    await broker.start();
    await broker.subscribe('locker/v1/t/+/up/events', (_topic, p) => void stored.push(p.toString()), { beforeAck: true });
  });
  afterAll(async () => {
    for (const c of clients) c.end(true);
    await broker.stop();
    await t.close();
  });

  it('acknowledges a message just under the limit, and drops the connection on a larger one with MESSAGE_TOO_LARGE', async () => {
    const url = broker.address()!;
    const a = await connect(url, 'term-a1');
    clients.push(a);
    expect(await publishOutcome(a, topics.up('term-a1', 'status'), Buffer.alloc(MAX - 100, 'x'), { qos: 1 })).toBe('acked');
    for (const kind of ['status', 'events'] as const) {
      const c = await connect(url, 'term-a1');
      clients.push(c);
      expect(await publishOutcome(c, topics.up('term-a1', kind), Buffer.alloc(MAX + 1, 'x'), { qos: 1 })).toBe('closed');
    }
    expect(stored.some((s) => s.length > MAX)).toBe(false);
    const logged = lines.filter((l) => l.errorCode === 'MESSAGE_TOO_LARGE');
    expect(logged.length).toBeGreaterThanOrEqual(2);
    expect(logged[0]).toMatchObject({ level: 40, maxBytes: MAX });
  });

  it('refuses a large packet from its header, before the payload arrives', async () => {
    const url = new URL(broker.address()!);
    const sock = net.connect(Number(url.port), url.hostname);
    await new Promise<void>((r) => sock.once('connect', () => r()));
    const closed = new Promise<void>((r) => sock.once('close', () => r()));
    sock.on('error', () => {});
    sock.resume(); // read the CONNACK, so the end of the connection is seen
    sock.write(mqttPacket.generate({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: 4, clean: true, clientId: 'term-b1', keepalive: 30, username: 'term-b1', password: Buffer.from('terminal-secret-b1') }));
    await sleep(300);
    // the fixed header of a 20 MB PUBLISH, and only a few bytes of it
    const header = mqttPacket.generate({ cmd: 'publish', topic: topics.up('term-b1', 'events'), payload: Buffer.alloc(20 * 1024 * 1024), qos: 0, retain: false, dup: false }).subarray(0, 64);
    const before = lines.filter((l) => l.errorCode === 'MESSAGE_TOO_LARGE').length;
    sock.write(header);
    await Promise.race([closed, sleep(3000).then(() => Promise.reject(new Error('connection not dropped')))]);
    expect(lines.filter((l) => l.errorCode === 'MESSAGE_TOO_LARGE').length).toBe(before + 1);
  });

  it('refuses QoS 2 and retained publishes except on up/status', async () => {
    const url = broker.address()!;
    const q2 = await connect(url, 'term-a1');
    clients.push(q2);
    expect(await publishOutcome(q2, topics.up('term-a1', 'acks'), '{"v":1}', { qos: 2 })).toBe('closed');
    const r = await connect(url, 'term-a1');
    clients.push(r);
    expect(await publishOutcome(r, topics.up('term-a1', 'sync'), '{"v":1}', { qos: 1, retain: true })).toBe('closed');
    const ok = await connect(url, 'term-a1');
    clients.push(ok);
    expect(await publishOutcome(ok, topics.up('term-a1', 'status'), '{"v":1,"state":"online"}', { qos: 1, retain: true })).toBe('acked');
    expect(lines.some((l) => l.errorCode === 'QOS_NOT_ALLOWED')).toBe(true);
    expect(lines.some((l) => l.errorCode === 'RETAIN_NOT_ALLOWED')).toBe(true);
  });

  it('caps the distinct subscriptions of one connection', async () => {
    const a = await connect(broker.address()!, 'term-a1');
    clients.push(a);
    const filters = Array.from({ length: 10 }, (_, i) => topics.down('term-a1', `k${i}`));
    // mqtt.js rejects a SUBACK with any failure code; the granted list is on the error
    const granted = await a.subscribeAsync(filters, { qos: 1 }).catch((e: { packet?: { granted?: number[] } }) => (e.packet?.granted ?? []).map((qos) => ({ qos })));
    expect(granted.map((g) => g.qos)).toEqual([1, 1, 1, 1, 128, 128, 128, 128, 128, 128]);
    // a repeat of a granted one is fine; after an unsubscribe there is room again
    expect((await a.subscribeAsync(filters[0]!, { qos: 1 }))[0]!.qos).toBe(1);
    await a.unsubscribeAsync(filters[1]!);
    expect((await a.subscribeAsync(filters[5]!, { qos: 1 }))[0]!.qos).toBe(1);
    expect(lines.filter((l) => l.errorCode === 'TOO_MANY_SUBSCRIPTIONS')).toHaveLength(1);
  });
});
