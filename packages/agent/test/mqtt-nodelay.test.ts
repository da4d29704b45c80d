// Nagle's algorithm is off on the agent's MQTT socket (why: packages/common/src/mqtt-socket.ts): a
// packet that follows one the broker does not answer (a PUBACK of a code push) leaves at once.
// Measured on the agent's own link (EdgeLink) against a real broker (test-support/nagle.ts).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import type { MqttClient } from 'mqtt';
import { terminalClientSuite } from '../../../test-support/nagle';
import { EdgeLink } from '../src/edge-link';
import { AgentStore } from '../src/store';

terminalClientSuite("the agent's link", async (url, id) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'agent-nodelay-'));
  const store = new AgentStore(path.join(dir, 'agent.db'));
  store.open();
  const at = new Date().toISOString();
  const link = new EdgeLink({
    url,
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
  const stop = async () => {
    await link.stop();
    store.close();
    fs.rmSync(dir, { recursive: true, force: true });
  };
  const connected = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the link did not connect within 10 s')), 10_000);
    link.once('connected', () => (clearTimeout(timer), resolve()));
  });
  await link.start();
  await connected.catch(async (e: unknown) => {
    await stop();
    throw e;
  });
  // the probe drives the link's own client (private: the link publishes only journal rows and statuses)
  return { client: (link as unknown as { client: MqttClient }).client, stop };
});
