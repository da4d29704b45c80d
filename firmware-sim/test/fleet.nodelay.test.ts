// The fleet simulator's terminals speak MQTT as the agent does, Nagle's algorithm off included
// (why: packages/common/src/mqtt-socket.ts): otherwise the fleet bench would measure a simulated
// terminal's packets waiting behind its PUBACKs instead of the central service. Measured on a
// terminal's own client against a real broker (test-support/nagle.ts).
import { afterAll, describe, expect, it } from 'vitest';
import { edgeTopics } from '@locker/common';
import { clientProbe, expectNotHeld, gapsBehindUnansweredPacket, startArrivalBroker } from '../../test-support/nagle';
import { SimTerminal, type TerminalObserver } from '../src/fleet/terminal';

/** an observer that takes note of nothing (not a thenable: `then` stays undefined) */
const ignore = new Proxy({}, { get: (_o, key) => (key === 'then' ? undefined : () => undefined) }) as TerminalObserver;

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
    expectNotHeld(await gapsBehindUnansweredPacket(clientProbe(t.client!, edgeTopics.up(id, 'events'), broker.arrivals)));
  }, 30_000);
});
