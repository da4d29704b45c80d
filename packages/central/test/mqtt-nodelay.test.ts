// Nagle's algorithm is off on the central side's MQTT sockets (why: packages/common/src/mqtt-socket.ts):
// a message to a terminal that follows one nothing answered goes out at once. Measured on real
// sockets (test-support/nagle.ts): the embedded broker to a terminal, and the central's client
// through a private Mosquitto run with deploy/mosquitto.conf as shipped (its set_tcp_nodelay covers
// the broker-to-terminal hop).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MqttClient } from 'mqtt';
import { Arrivals, expectNotHeld, gapsBehindUnansweredPacket } from '../../../test-support/nagle';
import { createLogger } from '../src/logger';
import { EmbeddedBroker } from '../src/mqtt/embedded';
import { ExternalBroker } from '../src/mqtt/external';
import type { MessageBus } from '../src/mqtt/bus';
import { topics } from '../src/mqtt/topics';
import { createTestService, type TestService } from './support/harness';
import { MOSQUITTO, MOSQUITTO_PASSWD, connect, sleep, startMosquitto, type TestMosquitto } from './support/mosquitto';

const log = createLogger({ level: 'silent' });

/** the terminal subscribes to its down/ topics at QoS 1, so it answers X with a PUBACK at once */
async function terminalReceives(terminal: MqttClient, id: string): Promise<Arrivals> {
  const arrivals = new Arrivals();
  terminal.on('message', (_t, payload) => arrivals.note(payload.toString()));
  await terminal.subscribeAsync(topics.down(id, '#'), { qos: 1 });
  return arrivals;
}

function probe(bus: MessageBus, id: string, arrivals: Arrivals) {
  return { send: (payload: string, qos: 0 | 1) => bus.publish(topics.down(id, 'codes'), payload, { qos }), arrival: (payload: string) => arrivals.arrival(payload) };
}

describe('the embedded broker: a message to a terminal is not held behind an unanswered one', () => {
  let t: TestService;
  let bus: EmbeddedBroker;
  let terminal: MqttClient | undefined;
  beforeAll(async () => {
    t = await createTestService('sqlite');
    bus = new EmbeddedBroker({ host: '127.0.0.1', port: 0, db: t.ctx.db.kysely, log, storedBeforeAck: [] });
    await bus.start();
  });
  afterAll(async () => {
    terminal?.end(true);
    await bus?.stop();
    await t?.close();
  });

  it('B reaches the terminal right after A (no 40 ms wait for the acknowledgement of A)', async () => {
    terminal = await connect(bus.address()!, { clientId: 'term-a1', username: 'term-a1', password: 'terminal-secret-a1' });
    const arrivals = await terminalReceives(terminal, 'term-a1');
    const gaps = await gapsBehindUnansweredPacket(probe(bus, 'term-a1', arrivals));
    expectNotHeld(gaps);
  }, 30_000);
});

const available = !!MOSQUITTO && !!MOSQUITTO_PASSWD;
const d = available || process.env.LOCKER_REQUIRE_SERVICES === '1' ? describe : describe.skip;

d(`the central's client through Mosquitto (deploy/mosquitto.conf): a push is not held behind an unanswered packet${available ? '' : ' (SKIPPED: mosquitto not installed)'}`, () => {
  let broker: TestMosquitto;
  let bus: ExternalBroker | undefined;
  let terminal: MqttClient | undefined;
  beforeAll(async () => {
    broker = await startMosquitto({ users: [['central-1', 'central1-secret'], ['term-a1', 'secret-a1']] });
  });
  afterAll(async () => {
    terminal?.end(true);
    await bus?.stop();
    await broker?.cleanup();
  });

  it('B reaches the terminal right after A on both hops (central -> Mosquitto -> terminal)', async () => {
    bus = new ExternalBroker({ url: broker.url, username: 'central-1', password: 'central1-secret', log });
    await bus.start();
    terminal = await connect(broker.url, { clientId: 'term-a1', username: 'term-a1', password: 'secret-a1' });
    const arrivals = await terminalReceives(terminal, 'term-a1');
    const gaps = await gapsBehindUnansweredPacket(probe(bus, 'term-a1', arrivals));
    // fails with Nagle on the central's socket (Mosquitto delays its acknowledgement of A) or on
    // Mosquitto's (the terminal delays its acknowledgement of A)
    expectNotHeld(gaps);
  }, 30_000);

  it('and so after the client reconnected on a new socket (the broker restarted)', async () => {
    await broker.stop();
    await broker.start();
    for (let i = 0; i < 200 && !bus!.connected(); i++) await sleep(50);
    expect(bus!.connected()).toBe(true);
    terminal?.end(true);
    terminal = await connect(broker.url, { clientId: 'term-a1', username: 'term-a1', password: 'secret-a1' });
    const arrivals = await terminalReceives(terminal, 'term-a1');
    const gaps = await gapsBehindUnansweredPacket(probe(bus!, 'term-a1', arrivals));
    expectNotHeld(gaps);
  }, 30_000);
});
