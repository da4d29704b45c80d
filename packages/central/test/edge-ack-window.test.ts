// The central service's start-up and shutdown windows: the embedded broker listens before the edge
// sync runs and after it stopped. A terminal event published then must not be acknowledged (the
// agent would mark it sent and it would be lost); it is refused, the terminal sends it again, and
// once the sync runs it is stored. Invariant checked throughout: every event the broker
// acknowledged (PUBACK) is in edge_events.
import crypto from 'node:crypto';
import mqtt, { type MqttClient } from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestService, type TestService } from './support/harness';
import type { Worker } from '../src/context';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const P = 'locker/v1/t/term-a1';

describe('edge events during central start-up and shutdown (embedded broker)', () => {
  let t: TestService;
  let term: MqttClient;
  let bus: Worker;
  let sync: Worker;
  let seq = 0;
  const acked: string[] = [];
  const event = () => ({ v: 1, eventId: crypto.randomUUID(), seq: ++seq, terminalId: 'term-a1', at: new Date().toISOString(), type: 'forcedOpen', bus: 'bus0', board: 0, lock: 1, lockerUid: null, reason: 'test' });
  const stored = async () => (await t.ctx.db.kysely.selectFrom('edge_events').select('event_id').execute()).map((r) => r.event_id);
  /** publishes QoS 1 like the agent: resolves on the PUBACK; mqtt.js resends after a reconnect */
  const publish = (ev: { eventId: string }) => {
    let done = false;
    const p = term.publishAsync(`${P}/up/events`, JSON.stringify(ev), { qos: 1 }).then(() => {
      done = true;
      acked.push(ev.eventId);
    });
    return { p, done: () => done };
  };

  beforeAll(async () => {
    t = await createTestService('sqlite', { config: { mqtt: { mode: 'embedded', host: '127.0.0.1', port: 0 }, edge: { pollMs: 50 } }, startWorkers: false });
    bus = t.ctx.workers.find((w) => w.name === 'mqtt-embedded')!;
    sync = t.ctx.workers.find((w) => w.name === 'edge-sync')!;
    await bus.start(); // the broker listens; the edge sync has not started yet
    term = mqtt.connect(t.ctx.bus!.address()!, { clientId: 'term-a1', username: 'term-a1', password: 'terminal-secret-a1', reconnectPeriod: 100, connectTimeout: 3000 });
    await new Promise<void>((resolve) => term.once('connect', () => resolve()));
  });
  afterAll(async () => {
    term?.end(true);
    await t?.close();
  });

  it('an event published before the edge sync starts is not acknowledged; it is stored once the sync runs', async () => {
    const ev = event();
    const pub = publish(ev);
    await sleep(600);
    expect(pub.done()).toBe(false);
    expect(await stored()).not.toContain(ev.eventId);
    await sync.start();
    await pub.p; // acknowledged only after a resend the running sync stored
    expect(await stored()).toContain(ev.eventId);
  });

  it('an event published after the edge sync stopped is not acknowledged; stored when the sync runs again', async () => {
    await sync.stop();
    const ev = event();
    const pub = publish(ev);
    await sleep(600);
    expect(pub.done()).toBe(false);
    expect(await stored()).not.toContain(ev.eventId);
    await sync.start();
    await pub.p;
    const ids = await stored();
    expect(ids).toContain(ev.eventId);
    // no acknowledged event is missing, and each was stored once
    expect(acked).toHaveLength(2);
    for (const id of acked) expect(ids.filter((x) => x === id)).toHaveLength(1);
  });
});
