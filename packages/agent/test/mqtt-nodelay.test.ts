// Nagle's algorithm is off on the agent's MQTT socket (why: packages/common/src/mqtt-socket.ts): a
// packet that follows one the broker does not answer (a PUBACK of a code push) leaves at once.
// Measured on the agent's own link (EdgeLink) against a real broker (test-support/nagle.ts).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterAll, describe, it } from 'vitest';
import type { MqttClient } from 'mqtt';
import { edgeTopics } from '@locker/common';
import { clientProbe, expectNotHeld, gapsBehindUnansweredPacket, startArrivalBroker } from '../../../test-support/nagle';
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
    const connected = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('the link did not connect within 10 s')), 10_000);
      link.once('connected', () => (clearTimeout(timer), resolve()));
    });
    await link.start();
    cleanups.push(() => link.stop());
    await connected;
    // the probe drives the link's own client (private: the link publishes only journal rows and
    // statuses), on the terminal's own events topic (no central service reads it here)
    const client = (link as unknown as { client: MqttClient }).client;
    expectNotHeld(await gapsBehindUnansweredPacket(clientProbe(client, edgeTopics.up(id, 'events'), broker.arrivals)));
  }, 30_000);
});
