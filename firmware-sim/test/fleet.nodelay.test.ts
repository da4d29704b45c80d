// The fleet simulator's terminals speak MQTT as the agent does, Nagle's algorithm off included
// (packages/common/src/mqtt-socket.ts): otherwise a simulated terminal's events and acks would
// wait behind its PUBACKs for the broker's delayed TCP acknowledgement (40 ms or more), and the
// fleet bench would measure that instead of the central service. Measured on a terminal's own
// client against a real broker, where each message arrives.
import { afterAll, describe, expect, it } from 'vitest';
import type { MqttClient } from 'mqtt';
import { edgeTopics } from '@locker/common';
import { gapsBehindUnansweredPacket, median, startArrivalBroker } from '../../test-support/nagle';
import { SimTerminal, type TerminalObserver } from '../src/fleet/terminal';

/** an observer that takes note of nothing */
const ignore = new Proxy({}, { get: () => () => undefined }) as TerminalObserver;

describe("a simulated terminal's client: a packet is not held behind an unanswered one", () => {
  const cleanups: (() => Promise<void> | void)[] = [];
  afterAll(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  it('B reaches the broker right after A (no 40 ms wait for the acknowledgement of A)', async () => {
    const broker = await startArrivalBroker();
    cleanups.push(() => broker.stop());
    const id = 'sim-nodelay';
    const t = new SimTerminal({ id, secret: 'not-checked-by-this-broker' }, { url: broker.url, keepaliveSeconds: 30, connectTimeoutMs: 5000, publishTimeoutMs: 10_000, syncRetryMs: 60_000, statusIntervalMs: 0, statusDebounceMs: 200, agentVersion: 'test' }, ignore);
    t.connect();
    cleanups.push(() => t.stop(false));
    for (let i = 0; i < 250 && !t.connected; i++) await new Promise((r) => setTimeout(r, 20));
    expect(t.connected).toBe(true);
    const client = t.client as MqttClient;
    const topic = edgeTopics.up(id, 'events');
    const gaps = await gapsBehindUnansweredPacket({
      send: async (payload, qos) => void (await client.publishAsync(topic, payload, { qos })),
      arrival: (payload) => broker.arrivals.arrival(payload),
    });
    // with Nagle on the terminal's socket: about 40 ms in every round
    expect(median(gaps), `gaps ${gaps.map((g) => g.toFixed(1)).join(', ')} ms`).toBeLessThan(15);
  }, 30_000);
});
