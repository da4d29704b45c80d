// No acknowledged terminal event is lost at the scale-out broker while a central instance is away:
// a private Mosquitto with deploy/mosquitto.conf as shipped (support/mosquitto.ts) and the central's
// real client (ExternalBroker, persistent session). Mosquitto PUBACKs a terminal's event at once; the
// central instance's session must hold all of them (its default queue holds 1000), across a broker
// restart too (persistence).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../src/logger';
import { ExternalBroker } from '../src/mqtt/external';
import { topics } from '../src/mqtt/topics';
import { MOSQUITTO, MOSQUITTO_PASSWD, connect, sleep, startMosquitto, type TestMosquitto } from './support/mosquitto';

const available = !!MOSQUITTO && !!MOSQUITTO_PASSWD;
const d = available || process.env.LOCKER_REQUIRE_SERVICES === '1' ? describe : describe.skip;
const log = createLogger({ level: 'silent' });

d(`events queued for an absent central instance (deploy/mosquitto.conf)${available ? '' : ' (SKIPPED: mosquitto not installed)'}`, () => {
  let broker: TestMosquitto;

  beforeAll(async () => {
    broker = await startMosquitto({ users: [['central-1', 'central1-secret'], ['term-a1', 'secret-a1']] });
  });
  afterAll(async () => {
    await broker?.cleanup();
  });

  const central = () => new ExternalBroker({ url: broker.url, username: 'central-1', password: 'central1-secret', log });

  /** the central instance comes (back), subscribes like the edge service and collects event ids until it has `want` */
  async function centralCollects(want: number, timeoutMs = 20_000): Promise<string[]> {
    const bus = central();
    const got: string[] = [];
    await bus.start();
    await bus.subscribe(topics.up('+', '#'), (_t, payload) => {
      got.push((JSON.parse(payload.toString()) as { eventId: string }).eventId);
    });
    for (let waited = 0; got.length < want && waited < timeoutMs; waited += 50) await sleep(50);
    await sleep(200); // nothing more than expected
    await bus.stop();
    return got;
  }

  async function terminalPublishes(prefix: string, n: number): Promise<string[]> {
    const term = await connect(broker.url, { clientId: 'term-a1', username: 'term-a1', password: 'secret-a1' });
    const ids: string[] = [];
    for (let i = 0; i < n; i++) {
      const eventId = `${prefix}-${String(i).padStart(5, '0')}`;
      ids.push(eventId);
      // every one acknowledged (PUBACK) by the broker: the agent marks it sent and forgets it
      await term.publishAsync(topics.up('term-a1', 'events'), JSON.stringify({ eventId, type: 'doorClosed', at: new Date().toISOString(), padding: 'x'.repeat(150) }), { qos: 1 });
    }
    await term.endAsync();
    return ids;
  }

  it('delivers every one of more than 1000 QoS 1 events acknowledged while the central instance was away', async () => {
    // the instance's persistent session exists (it has subscribed once), then it goes away
    const first = central();
    await first.start();
    await first.subscribe(topics.up('+', '#'), () => undefined);
    await first.stop();

    const sent = await terminalPublishes('away', 1200);
    const got = await centralCollects(sent.length);
    expect(got.length).toBe(sent.length);
    expect(new Set(got)).toEqual(new Set(sent));
  }, 60_000);

  it('keeps the queued events across a broker restart (persistence)', async () => {
    const sent = await terminalPublishes('restart', 50);
    await broker.stop(); // SIGTERM: Mosquitto writes its store
    await broker.start();
    const got = await centralCollects(sent.length);
    expect(new Set(got)).toEqual(new Set(sent));
  }, 60_000);
});
