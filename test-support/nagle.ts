// A probe for Nagle's algorithm on an MQTT hop (why it matters: packages/common/src/mqtt-socket.ts).
//
// Each round: X (QoS 1, answered at once, so the receiving side's TCP then delays the
// acknowledgements it has no data for), then A (QoS 0: nothing answers it) and B in the next turn of
// the event loop. With Nagle on at the sending socket, B waits in the kernel until A is
// acknowledged, which the receiver delays by up to about 40 ms; with TCP_NODELAY, B follows A at
// once. Checked on this machine's kernel: without the option 40-48 ms between A and B in every round
// (bare Node and each hop below), with it 0-2 ms.
import net from 'node:net';
import { Aedes } from 'aedes';
import type { MqttClient } from 'mqtt';
import { edgeTopics } from '@locker/common';
import { afterAll, describe, expect, it } from 'vitest';

export interface NagleProbe {
  /** sends one message over the hop under test; resolves once the sender is done with it */
  send(payload: string, qos: 0 | 1): Promise<void>;
  /** resolves with performance.now() when the far side got the message with this payload */
  arrival(payload: string): Promise<number>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** B's arrival minus A's, per round, in ms */
export async function gapsBehindUnansweredPacket(p: NagleProbe, rounds = 12): Promise<number[]> {
  const gaps: number[] = [];
  for (let i = 0; i < rounds; i++) {
    const tag = `${Date.now().toString(36)}-${i}`;
    await Promise.all([p.arrival(`x-${tag}`), p.send(`x-${tag}`, 1)]);
    const a = p.arrival(`a-${tag}`);
    const b = p.arrival(`b-${tag}`);
    const sentA = p.send(`a-${tag}`, 0);
    // B in a later turn of the event loop, as a push follows a PUBACK: two packets written in one
    // turn may leave in one segment (mqtt.js corks its stream until the next tick)
    await new Promise((r) => setImmediate(r));
    const sentB = p.send(`b-${tag}`, 1);
    const [ta, tb] = await Promise.all([a, b, sentA, sentB]);
    gaps.push(tb - ta);
    await sleep(10);
  }
  return gaps;
}

/**
 * Most rounds (the upper median: 7 of 12) saw B right behind A. With Nagle on every round takes
 * about 40 ms; 25 ms leaves room for a loaded machine's scheduling.
 */
export function expectNotHeld(gaps: number[]): void {
  const s = [...gaps].sort((x, y) => x - y);
  expect(s[Math.floor(s.length / 2)]!, `gaps ${gaps.map((g) => g.toFixed(1)).join(', ')} ms`).toBeLessThan(25);
}

/** arrivals by payload: `note` where messages come in, `arrival` for the probe */
export class Arrivals {
  private readonly seen = new Map<string, number>();
  private readonly waiting = new Map<string, (t: number) => void>();

  note(payload: string): void {
    const t = performance.now();
    const w = this.waiting.get(payload);
    if (w) {
      this.waiting.delete(payload);
      w(t);
    } else this.seen.set(payload, t);
  }

  arrival(payload: string, timeoutMs = 5000): Promise<number> {
    const t = this.seen.get(payload);
    if (t !== undefined) {
      this.seen.delete(payload);
      return Promise.resolve(t);
    }
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(payload);
        reject(new Error(`no message ${payload} within ${timeoutMs} ms`));
      }, timeoutMs);
      timer.unref();
      this.waiting.set(payload, (at) => {
        clearTimeout(timer);
        resolve(at);
      });
    });
  }
}

/** the probe for a terminal's own mqtt.js client publishing to `topic`, its arrivals noted at the broker */
export function clientProbe(client: MqttClient, topic: string, arrivals: Arrivals): NagleProbe {
  return {
    send: async (payload, qos) => void (await client.publishAsync(topic, payload, { qos })),
    arrival: (payload) => arrivals.arrival(payload),
  };
}

/**
 * A plain aedes broker on a free port (no authentication, Nagle left on: it is the far side here)
 * that notes the arrival of every client's publish: for the hop from a terminal's client.
 */
export async function startArrivalBroker(): Promise<{ url: string; arrivals: Arrivals; stop(): Promise<void> }> {
  const aedes = await Aedes.createBroker();
  const arrivals = new Arrivals();
  aedes.on('publish', (packet, client) => {
    if (client) arrivals.note(packet.payload.toString());
  });
  const server = net.createServer((s) => aedes.handle(s as never));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as net.AddressInfo;
  return {
    url: `mqtt://127.0.0.1:${port}`,
    arrivals,
    async stop() {
      await new Promise<void>((r) => aedes.close(() => r()));
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

/**
 * One suite for every terminal-side client (the agent's link, the fleet simulator's terminal): the
 * client connects to a broker that notes arrivals, and what it sends after an unanswered packet
 * must not wait for the broker's delayed acknowledgement.
 */
export function terminalClientSuite(name: string, start: (url: string, terminalId: string) => Promise<{ client: MqttClient; stop(): Promise<void> | void }>): void {
  describe(`${name}: a packet is not held behind an unanswered one`, () => {
    const cleanups: (() => Promise<void> | void)[] = [];
    afterAll(async () => {
      for (const c of cleanups.reverse()) await c();
    });

    it('B reaches the broker right after A (no 40 ms wait for the acknowledgement of A)', async () => {
      const broker = await startArrivalBroker();
      cleanups.push(() => broker.stop());
      const id = 'term-nodelay';
      const t = await start(broker.url, id);
      cleanups.push(() => t.stop());
      // the terminal's own events topic (no central service reads it here)
      expectNotHeld(await gapsBehindUnansweredPacket(clientProbe(t.client, edgeTopics.up(id, 'events'), broker.arrivals)));
    }, 30_000);
  });
}
