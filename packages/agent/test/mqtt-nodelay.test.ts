// Nagle's algorithm is off on the agent's MQTT socket (packages/common/src/mqtt-socket.ts): a packet
// that follows one the broker does not answer (a PUBACK of a code push, a QoS 0 message) leaves at
// once instead of waiting for the broker's delayed TCP acknowledgement (40 ms or more). Measured on
// the agent's own link (EdgeLink) against a real broker, where each message arrives.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import type { MqttClient } from 'mqtt';
import { edgeTopics } from '@locker/common';
import { gapsBehindUnansweredPacket, median, startArrivalBroker } from '../../../test-support/nagle';
import { EdgeLink } from '../src/edge-link';
import { AgentStore } from '../src/store';

describe("the agent's link: a packet is not held behind an unanswered one", () => {
  const cleanups: (() => Promise<void> | void)[] = [];
  afterAll(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  it('B reaches the broker right after A (no 40 ms wait for the acknowledgement of A)', async () => {
    const broker = await startArrivalBroker();
    cleanups.push(() => broker.stop());
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'agent-nodelay-'));
    cleanups.push(() => fs.rmSync(dir, { recursive: true, force: true }));
    const store = new AgentStore(path.join(dir, 'agent.db'));
    store.open();
    cleanups.push(() => store.close());
    const id = 'term-nodelay';
    const at = new Date().toISOString();
    const link = new EdgeLink({
      url: broker.url,
      terminalId: id,
      secret: 'not-checked-by-this-broker',
      keepaliveSeconds: 30,
      reconnectMs: 1000,
      connectTimeoutMs: 5000,
      publishTimeoutMs: 10_000,
      store,
      log: pino({ level: 'silent' }),
      status: () => ({ v: 1, state: 'online', terminalId: id, agentVersion: 'test', startedAt: at, at, codes: { epoch: null, version: 0, count: 0 }, journal: { unsent: 0, lastSeq: 0 }, buses: [] }),
    });
    const connected = new Promise<void>((r) => link.once('connected', () => r()));
    await link.start();
    cleanups.push(() => link.stop());
    await connected;
    // the link's own client and socket; the probe's messages go to the terminal's own events topic (no central service reads it here)
    const client = (link as unknown as { client: MqttClient }).client;
    const topic = edgeTopics.up(id, 'events');
    const gaps = await gapsBehindUnansweredPacket({
      send: async (payload, qos) => void (await client.publishAsync(topic, payload, { qos })),
      arrival: (payload) => broker.arrivals.arrival(payload),
    });
    // with Nagle on the agent's socket: about 40 ms in every round
    expect(median(gaps), `gaps ${gaps.map((g) => g.toFixed(1)).join(', ')} ms`).toBeLessThan(15);
  }, 30_000);
});
