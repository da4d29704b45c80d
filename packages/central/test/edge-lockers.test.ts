// down/lockers (docs/edge-protocol.md): the central service tells a terminal its pick up point's
// lockers (names, sizes, service state, where each lock sits, the holding shipment's state) after
// a status that shows another list held, and again whenever the list changes: a booking, a
// drop-off, a locker taken out of service. Nothing is pushed to a terminal that holds the current
// list. No personal data in it. Both engines, a terminal played by a raw MQTT client.
import type { MqttClient } from 'mqtt';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { LockersMessage } from '@locker/common';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { waitFor } from './support/wait';
import { connectScriptedTerminal, terminalStatus, type ScriptedTerminal } from './support/scripted-terminal';
import { PUP_A1 } from './support/fixtures';
import { addUser, booking, dropOff, lockerOf, ok } from './shipments-helpers';

describeEngines('locker list pushed to the terminal', (engine) => {
  let t: TestService;
  let term: MqttClient;
  let user: string;
  let tt: ScriptedTerminal;
  const P = 'locker/v1/t/term-a1';
  const lists = () => tt.got.filter((g) => g.kind === 'lockers').map((g) => g.body);
  const last = () => lists().at(-1);
  const status = (lockers: { epoch: string | null; version: number } | undefined) => ({ ...terminalStatus(0, null), ...(lockers ? { lockers } : {}) });

  beforeAll(async () => {
    t = await createTestService(engine, { config: { mqtt: { mode: 'embedded', host: '127.0.0.1', port: 0 }, edge: { pollMs: 50 } }, startWorkers: true });
    user = await addUser(t, PUP_A1);
    tt = await connectScriptedTerminal(t);
    term = tt.term;
  });
  afterAll(async () => {
    tt?.close();
    await t?.close();
  });

  it('an online status holding no list gets the lockers with names, sizes, service state and positions', async () => {
    await term.publishAsync(`${P}/up/status`, JSON.stringify(status({ epoch: null, version: 0 })), { qos: 1, retain: true });
    const msg = await waitFor(() => last(), 'lockers message');
    expect(LockersMessage.safeParse(msg).success).toBe(true);
    expect(msg.version).toBeGreaterThanOrEqual(1);
    expect(msg.lockers.map((l: any) => l.name)).toEqual(['A1-01', 'A1-02', 'A1-03', 'A1-04', 'A1-05', 'A1-06', 'A1-07']);
    expect(msg.lockers[0]).toEqual({
      uid: 'a1000000000000000000000000000001',
      name: 'A1-01',
      size: { code: 'S', width: expect.any(Number), height: expect.any(Number), length: expect.any(Number) },
      serviceState: 'active',
      bus: 'bus0',
      board: 0,
      lock: 1,
      shipmentState: null,
    });
    expect(msg.lockers.find((l: any) => l.name === 'A1-07').size.code).toBeNull();
    expect(msg.lockers.find((l: any) => l.name === 'A1-06')).toMatchObject({ board: 1, lock: 1 });
  });

  it('a status holding the current list gets none; one holding an older version gets it again', async () => {
    const cur = last();
    const n = lists().length;
    await term.publishAsync(`${P}/up/status`, JSON.stringify(status({ epoch: cur.epoch, version: cur.version })), { qos: 1 });
    await term.publishAsync(`${P}/up/status`, JSON.stringify(status(undefined)), { qos: 1 }); // an agent that does not take the list
    await new Promise((r) => setTimeout(r, 300));
    expect(lists().length).toBe(n);
    await term.publishAsync(`${P}/up/status`, JSON.stringify(status({ epoch: cur.epoch, version: cur.version - 1 })), { qos: 1 });
    const again = await waitFor(() => lists().length > n && last(), 'list again');
    expect(again).toMatchObject({ epoch: cur.epoch, version: cur.version, lockers: cur.lockers });
  });

  it('a booking and a drop-off push the new shipment state of the locker, with the next versions; no personal data', async () => {
    const before = last();
    const uid = (await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking() }))).shipmentUid as string;
    const lockerUid = (await lockerOf(t, uid))!;
    const booked = await waitFor(() => last()?.lockers.find((l: any) => l.uid === lockerUid)?.shipmentState === 'ReadyForDropoff' && last(), 'booked');
    expect(booked.version).toBe(before.version + 1);
    await dropOff(t, uid);
    const dropped = await waitFor(() => last()?.lockers.find((l: any) => l.uid === lockerUid)?.shipmentState === 'ReadyForPickup' && last(), 'dropped off');
    expect(dropped.version).toBe(booked.version + 1);
    const text = JSON.stringify(lists());
    expect(text).not.toContain(uid); // not even the shipment's id; no receiver, no codes
    expect(text).not.toContain('@');
  });

  it('a locker taken out of service is pushed (the marker poll sees the locker change)', async () => {
    const before = last();
    await t.ctx.db.kysely.updateTable('lockers').set({ active: 0, updated_at: new Date(Date.now() + 1000).toISOString() }).where('uid', '=', 'a1000000000000000000000000000005').execute();
    const out = await waitFor(() => last()?.lockers.find((l: any) => l.name === 'A1-05')?.serviceState === 'outOfService' && last(), 'out of service');
    expect(out.version).toBe(before.version + 1);
  });
});
