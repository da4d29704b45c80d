// End to end at the locker: the central service (embedded MQTT broker, EdgeSync worker,
// MqttTerminalGateway) + the real terminal agent (packages/agent) + the firmware simulator on
// socat pseudo-terminals. A shipment created through the API is dropped off by scanning its
// drop-off QR at the simulated scanner and putting the item in, then picked up with its PIN;
// UnlockShipmentLocker opens the simulated door; with the terminal gone it answers UnlockFailed.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Simulator } from '@locker/firmware-sim';
import { hashCode as hashOf } from '@locker/common';
import { Agent } from '../../agent/src/agent';
import { AgentConfigSchema } from '../../agent/src/config';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { waitFor } from './support/wait';
import { PUP_A1 } from './support/fixtures';
import { addUser, booking, codes, fails, ok, stateOf, transitions } from './shipments-helpers';

describeEngines('edge sync end to end: central + agent + simulator', (engine) => {
  let t: TestService;
  let sim: Simulator;
  let agent: Agent;
  let dir: string;
  let user: string;

  beforeAll(async () => {
    t = await createTestService(engine, { config: { mqtt: { mode: 'embedded', host: '127.0.0.1', port: 0 }, edge: { pollMs: 100, commandTimeoutMs: 3000 } }, startWorkers: true });
    user = await addUser(t, PUP_A1);
    sim = new Simulator({
      buses: [{ name: 'bus0', link: { kind: 'pty' }, dialect: 'kerong-cu16', boards: [{ address: 0 }, { address: 1 }] }],
      scanners: [{ name: 'scan0', link: { kind: 'pty' }, suffix: '\r\n' }],
    });
    await sim.start();
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'edge-e2e-'));
    const config = AgentConfigSchema.parse({
      terminal: { id: 'term-a1', secret: 'terminal-secret-a1' },
      mqtt: { url: t.ctx.bus!.address()!, reconnectMs: 100, syncRetrySeconds: 1 },
      buses: [{ name: 'bus0', port: `${sim.bus('bus0').path}?baud=19200`, dialect: 'kerong-cu16', boards: [{ address: 0 }, { address: 1 }], pollMs: 40, replyTimeoutMs: 60, pulseMs: 300, jamWindowMs: 1500, doorLeftOpenMs: null }],
      scanners: [{ name: 'scan0', port: sim.scanner('scan0').path, suffix: '\r\n' }],
      store: { path: path.join(dir, 'agent.db') },
      diagnostics: { enabled: false },
    });
    agent = new Agent({ config, log: pino({ level: 'silent' }) });
    await agent.start();
    await waitFor(() => agent.state().codes.epoch !== null, 'first code snapshot at the terminal');
  });
  afterAll(async () => {
    await agent?.stop();
    await sim?.stop();
    await t?.close();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  const lockerAt = async (shipmentUid: string) => {
    const s = await t.ctx.db.kysely.selectFrom('shipments as s').innerJoin('lockers as l', 'l.uid', 's.locker_uid').select(['l.uid', 'l.bus', 'l.board_address', 'l.lock_number']).where('s.uid', '=', shipmentUid).executeTakeFirstOrThrow();
    return { uid: s.uid, board: Number(s.board_address), lock: Number(s.lock_number) };
  };
  const agentSawOpen = (board: number, lock: number) => waitFor(() => agent.buses.bus('bus0').locks(board)[lock - 1]!.door === 'open', `agent sees ${board}/${lock} open`);

  it('drop-off by QR scan, then pick-up by PIN: the shipment moves by door events', async () => {
    const uid = (await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking() }))).shipmentUid as string;
    expect(await stateOf(t, uid)).toBe('ReadyForDropoff');
    const c = await codes(t, uid);
    const at = await lockerAt(uid);
    // the new codes reach the terminal without anyone asking
    await waitFor(() => agent.store.findCodes(hashOf(c.dropQr!)).length === 1, 'drop-off code at the terminal');
    // and the locker list (down/lockers): the page's names, sizes and the booked locker's state
    await waitFor(() => agent.store.lockerInfo('bus0', 0, 1), 'locker list at the terminal');
    expect(agent.store.lockerInfo('bus0', 0, 1)).toMatchObject({ name: 'A1-01', size: { code: 'S' }, serviceState: 'active' });
    await waitFor(() => agent.store.lockerInfo('bus0', at.board, at.lock)?.shipmentState === 'ReadyForDropoff', 'booked state at the terminal');

    await sim.scanner('scan0').scan(c.dropQr!, { chunks: 2 });
    await waitFor(() => sim.bus('bus0').lock(at.board, at.lock).state.doorOpen, 'the booked locker opens');
    await agentSawOpen(at.board, at.lock);
    sim.bus('bus0').lock(at.board, at.lock).putItem();
    sim.bus('bus0').lock(at.board, at.lock).closeDoor();
    await waitFor(async () => (await stateOf(t, uid)) === 'ReadyForPickup', 'ReadyForPickup');
    await waitFor(() => agent.store.lockerInfo('bus0', at.board, at.lock)?.shipmentState === 'ReadyForPickup', 'dropped-off state at the terminal');
    const tr = await transitions(t, uid);
    expect(tr.map((x) => [x.to_state, x.cause])).toEqual([
      ['ReadyForDropoff', 'api'],
      ['ReadyForPickup', 'door'],
    ]);
    // the used drop-off code is revoked at the terminal
    await waitFor(() => agent.store.findCodes(hashOf(c.dropQr!)).length === 0, 'drop-off code revoked at the terminal');

    await sim.scanner('scan0').typePin(c.pickPin!);
    await waitFor(() => sim.bus('bus0').lock(at.board, at.lock).state.doorOpen, 'opens for pick-up');
    await agentSawOpen(at.board, at.lock);
    sim.bus('bus0').lock(at.board, at.lock).takeItem();
    sim.bus('bus0').lock(at.board, at.lock).closeDoor();
    await waitFor(async () => (await stateOf(t, uid)) === 'PickedUp', 'PickedUp');

    // every event stored once, in order, and acted on
    await waitFor(() => agent.state().journal.unsent === 0, 'journal drained');
    const evs = await t.ctx.db.kysely.selectFrom('edge_events').selectAll().where('terminal_id', '=', 'term-a1').orderBy('seq').execute();
    expect(evs.map((e) => Number(e.seq))).toEqual(evs.map((_, i) => i + 1));
    expect(evs.length).toBe(agent.state().journal.lastSeq);
    expect(evs.filter((e) => e.type === 'dropOff' || e.type === 'pickUp').map((e) => [e.type, e.outcome])).toEqual([
      ['dropOff', 'DropOff:applied:ReadyForPickup'],
      ['pickUp', 'PickUp:applied:PickedUp'],
    ]);
  });

  it('a wrong code opens nothing and changes nothing', async () => {
    const uid = (await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking() }))).shipmentUid as string;
    const at = await lockerAt(uid);
    const before = agent.state().journal.lastSeq;
    await sim.scanner('scan0').scan('NOT-A-REAL-CODE-123');
    await waitFor(() => agent.store.recent(5).some((r) => r.seq > before && r.type === 'credentialRefused'), 'refused');
    expect(sim.bus('bus0').lock(at.board, at.lock).state.doorOpen).toBe(false);
    expect(await stateOf(t, uid)).toBe('ReadyForDropoff');
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: uid }));
  });

  it('UnlockShipmentLocker opens the simulated door; with the terminal gone it is UnlockFailed', async () => {
    const uid = (await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking() }))).shipmentUid as string;
    const at = await lockerAt(uid);
    await ok(t.post('/v1/Logistics/UnlockShipmentLocker', { shipmentUid: uid, unlockGoal: 'DropOff' }));
    await waitFor(() => sim.bus('bus0').lock(at.board, at.lock).state.doorOpen, 'door open after the API unlock');
    await agentSawOpen(at.board, at.lock);
    sim.bus('bus0').lock(at.board, at.lock).closeDoor();

    await agent.stop();
    await waitFor(async () => (await t.ctx.db.kysely.selectFrom('edge_terminals').select('online').where('terminal_id', '=', 'term-a1').executeTakeFirstOrThrow()).online === 0, 'terminal known offline');
    await fails(t.post('/v1/Logistics/UnlockShipmentLocker', { shipmentUid: uid, unlockGoal: 'DropOff' }), 'UnlockFailed');
  });
});
