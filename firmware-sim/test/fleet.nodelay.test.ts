// The fleet simulator's terminals speak MQTT as the agent does, Nagle's algorithm off included
// (why: packages/common/src/mqtt-socket.ts): otherwise the fleet bench would measure a simulated
// terminal's packets waiting behind its PUBACKs instead of the central service. Measured on a
// terminal's own client against a real broker (test-support/nagle.ts).
import { terminalClientSuite } from '../../test-support/nagle';
import { SimTerminal, type TerminalObserver } from '../src/fleet/terminal';

/** an observer that takes note of nothing (not a thenable: `then` stays undefined) */
const ignore = new Proxy({}, { get: (_o, key) => (key === 'then' ? undefined : () => undefined) }) as TerminalObserver;

terminalClientSuite("a simulated terminal's client", async (url, id) => {
  const t = new SimTerminal({ id, secret: 'not-checked-by-this-broker' }, { url, keepaliveSeconds: 30, connectTimeoutMs: 5000, publishTimeoutMs: 10_000, syncRetryMs: 60_000, statusIntervalMs: 0, statusDebounceMs: 200, agentVersion: 'test' }, ignore);
  t.connect();
  for (let i = 0; i < 250 && !t.connected; i++) await new Promise((r) => setTimeout(r, 20));
  if (!t.connected || !t.client) {
    await t.stop(false);
    throw new Error('the simulated terminal did not connect within 5 s');
  }
  return { client: t.client, stop: () => t.stop(false) };
});
