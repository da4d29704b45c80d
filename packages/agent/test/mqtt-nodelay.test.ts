// Nagle's algorithm is off on the agent's MQTT socket (why: packages/common/src/mqtt-socket.ts): a
// packet that follows one the broker does not answer (a PUBACK of a code push) leaves at once.
// Measured on the agent's own link (EdgeLink) against a real broker (test-support/nagle.ts).
import type { MqttClient } from 'mqtt';
import { terminalClientSuite } from '../../../test-support/nagle';
import { bareLink } from './support/link';

terminalClientSuite("the agent's link", async (url, id) => {
  const { link, dispose: stop } = bareLink(url, id);
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
