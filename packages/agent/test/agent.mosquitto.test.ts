// The agent against Mosquitto (the external broker of scale-out installs) at inject('mqttUrl'),
// skipped visibly when it is not reachable. The test is the central side: it pushes codes and
// receives the events; the simulator is on a real pty.
import crypto from 'node:crypto';
import mqtt, { type MqttClient } from 'mqtt';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { World, codeEntry, waitFor } from './support/world';

const url = inject('mqttUrl');
const d = url ? describe : describe.skip;

d(`agent + simulator + Mosquitto${url ? '' : ' (SKIPPED: MQTT broker not reachable)'}`, () => {
  const id = `term-mq-${crypto.randomBytes(4).toString('hex')}`;
  let w: World;
  let central: MqttClient;
  const got: { kind: string; body: any }[] = [];

  beforeAll(async () => {
    central = mqtt.connect(url!, { clientId: `central-test-${id}`, reconnectPeriod: 200 });
    await new Promise<void>((r) => central.once('connect', () => r()));
    central.on('message', (topic, payload) => {
      try {
        got.push({ kind: topic.split('/').pop()!, body: JSON.parse(payload.toString()) });
      } catch {
        /* the retained status cleared at the end */
      }
    });
    await central.subscribeAsync(`locker/v1/t/${id}/up/#`, { qos: 1 });
    w = await World.create({ terminal: { id, secret: 'any' }, mqtt: { url: url!, reconnectMs: 100, connectTimeoutMs: 2000, statusIntervalSeconds: 60, syncRetrySeconds: 1, keepaliveSeconds: 30, publishTimeoutMs: 15000 } });
  });
  afterAll(async () => {
    await w?.close();
    if (central) {
      await central.unsubscribeAsync(`locker/v1/t/${id}/up/#`);
      // clear the retained status this test left
      await central.publishAsync(`locker/v1/t/${id}/up/status`, '', { qos: 1, retain: true }).catch(() => undefined);
      await central.endAsync();
    }
  });

  it('codes down, a scanned drop-off code opens the lock, the dropOff event comes up', async () => {
    await waitFor(() => got.find((g) => g.kind === 'status' && g.body.state === 'online'), 'online status');
    const codes = [codeEntry('mq-1', 'DropOff', 'QR-MQ-1', { board: 1, lock: 4 })];
    await central.publishAsync(`locker/v1/t/${id}/down/codes`, JSON.stringify({ v: 1, type: 'snapshot', epoch: 'e-mq', version: 4, at: new Date().toISOString(), codes }), { qos: 1 });
    await waitFor(() => w.agent.state().codes.version === 4, 'codes applied');
    await w.sim.scanner('scan0').scan('QR-MQ-1');
    await waitFor(() => w.lock(1, 4).state.doorOpen, 'lock 1/4 open');
    await waitFor(() => got.some((g) => g.kind === 'events' && g.body.type === 'doorOpened'), 'doorOpened');
    w.lock(1, 4).putItem();
    w.lock(1, 4).closeDoor();
    const drop = await waitFor(() => got.find((g) => g.kind === 'events' && g.body.type === 'dropOff'), 'dropOff');
    expect(drop.body).toMatchObject({ terminalId: id, shipmentUid: 'ship-mq-1', board: 1, lock: 4 });
    const evs = got.filter((g) => g.kind === 'events').map((g) => g.body);
    const uniq = [...new Map(evs.map((e) => [e.eventId, e])).values()];
    expect(uniq.map((e) => e.seq)).toEqual(uniq.map((_, i) => i + 1));
    // the status names the journal the events come from: the central service takes it as live
    const status = got.find((g) => g.kind === 'status' && g.body.state === 'online')!;
    expect(typeof drop.body.journalId).toBe('string');
    expect(status.body.journal.id).toBe(drop.body.journalId);
  });
});
