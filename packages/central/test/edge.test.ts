// The central side of the edge sync against a terminal played by a raw MQTT client on the
// embedded broker: snapshot on status, deltas on change (versions +1, compare-and-set), snapshot
// on up/sync, events stored once (repeat by eventId ignored), malformed messages dropped, and the
// MqttTerminalGateway's answers (ok, timeout, hardware fault, offline). Both engines.
import crypto from 'node:crypto';
import type { MqttClient } from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashCode } from '@locker/common';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { waitFor } from './support/wait';
import { connectScriptedTerminal, terminalStatus, type ScriptedTerminal } from './support/scripted-terminal';
import { PUP_A1 } from './support/fixtures';
import { addUser, booking, codes, ok } from './shipments-helpers';
import { diffCodes, entryDigest } from '../src/edge/codes';

describe('code diff (pure)', () => {
  const e = (id: string, lock = 1) => ({ id, shipmentUid: 's', usage: 'DropOff' as const, type: 'Qr' as const, hash: hashCode(id), locker: { uid: 'l', bus: 'bus0', board: 0, lock } });
  it('new and changed entries are upserts, missing ones revoked', () => {
    const pushed = new Map([['a', entryDigest(e('a'))], ['b', entryDigest(e('b'))], ['c', entryDigest(e('c'))]]);
    const d = diffCodes(pushed, [e('a'), e('b', 2), e('d')]);
    expect(d.upserts.map((x) => x.id)).toEqual(['b', 'd']);
    expect(d.revoke).toEqual(['c']);
    expect(diffCodes(pushed, [e('a'), e('b'), e('c')])).toEqual({ upserts: [], revoke: [] });
  });
});

describeEngines('edge sync with a scripted terminal', (engine) => {
  let t: TestService;
  let term: MqttClient;
  let user: string;
  let tt: ScriptedTerminal;
  let got: ScriptedTerminal['got'];
  const P = 'locker/v1/t/term-a1';
  const status = (version: number, epoch: string | null) => terminalStatus(version, epoch);
  let seq = 0;
  const event = (type: string, fields: Record<string, unknown> = {}) => ({ v: 1, eventId: crypto.randomUUID(), seq: ++seq, terminalId: 'term-a1', at: new Date().toISOString(), type, ...fields });
  const lastCodes = () => tt.lastCodes();

  beforeAll(async () => {
    t = await createTestService(engine, { config: { mqtt: { mode: 'embedded', host: '127.0.0.1', port: 0 }, edge: { pollMs: 50, commandTimeoutMs: 400 } }, startWorkers: true });
    user = await addUser(t, PUP_A1);
    tt = await connectScriptedTerminal(t);
    term = tt.term;
    got = tt.got;
  });
  afterAll(async () => {
    tt?.close();
    await t?.close();
  });

  it('an online status with nothing held gets a snapshot; a change gets a delta with the next version', async () => {
    const uid1 = (await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking() }))).shipmentUid as string;
    await term.publishAsync(`${P}/up/status`, JSON.stringify(status(0, null)), { qos: 1, retain: true });
    const snap = await waitFor(() => lastCodes()?.type === 'snapshot' && lastCodes(), 'snapshot');
    const c1 = await codes(t, uid1);
    // drop-off and pick-up, PIN and QR, hashed; LinkCodes not sent; no clear value anywhere
    expect(snap.codes.filter((x: any) => x.shipmentUid === uid1).map((x: any) => `${x.usage}/${x.type}`).sort()).toEqual(['DropOff/Code', 'DropOff/Qr', 'PickUp/Code', 'PickUp/Qr']);
    expect(snap.codes.map((x: any) => x.hash)).toContain(hashCode(c1.dropQr!));
    expect(JSON.stringify(snap)).not.toContain(c1.dropQr!);
    expect(snap.codes[0].locker).toMatchObject({ bus: 'bus0', board: expect.any(Number), lock: expect.any(Number) });

    const uid2 = (await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking() }))).shipmentUid as string;
    const delta = await waitFor(() => lastCodes()?.type === 'delta' && lastCodes(), 'delta');
    expect(delta).toMatchObject({ epoch: snap.epoch, baseVersion: snap.version, version: snap.version + 1, revoke: [] });
    expect(delta.upserts.every((x: any) => x.shipmentUid === uid2)).toBe(true);
    expect(delta.upserts).toHaveLength(4);

    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: uid2 }));
    const revoke = await waitFor(() => lastCodes()?.version === snap.version + 2 && lastCodes(), 'revoking delta');
    expect(revoke.revoke.sort()).toEqual(delta.upserts.map((x: any) => x.id).sort());
  });

  it('a status with the current version gets nothing; a stale one and up/sync get a snapshot', async () => {
    const cur = lastCodes();
    // counted on down/codes only: the previous test's cancel also changes the locker list, and that
    // push (down/lockers, right after the revoking delta in the same job) may still be arriving here
    const codesGot = () => got.filter((g) => g.kind === 'codes').length;
    const n = codesGot();
    await term.publishAsync(`${P}/up/status`, JSON.stringify(status(cur.version, cur.epoch)), { qos: 1 });
    await new Promise((r) => setTimeout(r, 300));
    expect(codesGot()).toBe(n);
    await term.publishAsync(`${P}/up/sync`, JSON.stringify({ v: 1, requestId: 'r1', want: 'snapshot', reason: 'gap', have: { epoch: cur.epoch, version: cur.version - 1 } }), { qos: 1 });
    const snap = await waitFor(() => codesGot() > n && lastCodes()?.type === 'snapshot' && lastCodes(), 'snapshot after sync');
    expect(snap.version).toBe(cur.version + 1);
  });

  it('events: stored once by eventId, malformed dropped, a dropOff applies the transition', async () => {
    const uid = (await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking() }))).shipmentUid as string;
    const row = await t.ctx.db.kysely.selectFrom('access_codes').select(['uid', 'locker_uid']).where('shipment_uid', '=', uid).where('usage', '=', 'DropOff').where('type', '=', 'Qr').executeTakeFirstOrThrow();
    const opened = event('doorOpened', { bus: 'bus0', board: 0, lock: 1, lockerUid: row.locker_uid, commanded: true, item: false, sessionId: 's1' });
    await term.publishAsync(`${P}/up/events`, JSON.stringify(opened), { qos: 1 });
    await term.publishAsync(`${P}/up/events`, JSON.stringify(opened), { qos: 1 }); // a re-send after a reconnect
    await term.publishAsync(`${P}/up/events`, 'garbage', { qos: 1 });
    const drop = event('dropOff', { sessionId: 's1', shipmentUid: uid, codeId: row.uid, lockerUid: row.locker_uid, bus: 'bus0', board: 0, lock: 1, item: true });
    await term.publishAsync(`${P}/up/events`, JSON.stringify(drop), { qos: 1 });
    // the PUBACK came after the store: the rows are there now
    const rows = await t.ctx.db.kysely.selectFrom('edge_events').select(['event_id', 'type']).where('terminal_id', '=', 'term-a1').execute();
    expect(rows.map((r) => r.event_id).sort()).toEqual([opened.eventId, drop.eventId].sort());
    await waitFor(async () => (await t.ctx.db.kysely.selectFrom('edge_events').select('outcome').where('event_id', '=', drop.eventId).executeTakeFirstOrThrow()).outcome, 'dropOff processed');
    const ev = await t.ctx.db.kysely.selectFrom('edge_events').select(['outcome', 'processed']).where('event_id', '=', drop.eventId).executeTakeFirstOrThrow();
    expect(ev).toEqual({ outcome: 'DropOff:applied:ReadyForPickup', processed: 1 });
    // the same drop-off again (another event id): not applicable any more, recorded as such
    const again = event('dropOff', { sessionId: 's2', shipmentUid: uid, codeId: row.uid, lockerUid: row.locker_uid, bus: 'bus0', board: 0, lock: 1, item: true });
    await term.publishAsync(`${P}/up/events`, JSON.stringify(again), { qos: 1 });
    await waitFor(async () => (await t.ctx.db.kysely.selectFrom('edge_events').select('outcome').where('seq', '=', again.seq).where('terminal_id', '=', 'term-a1').executeTakeFirst())?.outcome?.startsWith('rejected:'), 'second drop-off rejected');
  });

  it('events with control characters in an id or a timestamp that is no time are dropped, and the next event still lands', async () => {
    const poison = [
      { ...event('doorClosed', { bus: 'bus0', board: 0, lock: 1, item: false }), eventId: 'evil\u0000id' },
      { ...event('doorClosed', { bus: 'bus0', board: 0, lock: 1, item: false }), at: 'not a time' },
      { ...event('doorClosed', { bus: 'bus0', board: 0, lock: 1, item: false }), at: '2026-03-01T10:00:00\u0000Z' },
    ];
    // each PUBACK arrives (nothing is retried forever; PostgreSQL cannot store U+0000)
    for (const p of poison) await term.publishAsync(`${P}/up/events`, JSON.stringify(p), { qos: 1 });
    const fine = event('doorClosed', { bus: 'bus0', board: 0, lock: 1, item: false });
    await term.publishAsync(`${P}/up/events`, JSON.stringify(fine), { qos: 1 });
    const ids = (await t.ctx.db.kysely.selectFrom('edge_events').select('event_id').where('terminal_id', '=', 'term-a1').execute()).map((r) => r.event_id);
    expect(ids).toContain(fine.eventId);
    for (const p of poison) expect(ids).not.toContain(p.eventId);
  });

  it('a terminal sequence number beyond 32 bits is stored (the journal row id is 64-bit), and the next event too', async () => {
    const far = { ...event('doorClosed', { bus: 'bus0', board: 0, lock: 1, item: false }), seq: 2 ** 31 + 5 };
    await term.publishAsync(`${P}/up/events`, JSON.stringify(far), { qos: 1 });
    const next = { ...event('doorClosed', { bus: 'bus0', board: 0, lock: 1, item: false }), seq: 2 ** 31 + 6 };
    await term.publishAsync(`${P}/up/events`, JSON.stringify(next), { qos: 1 });
    const rows = await t.ctx.db.kysely.selectFrom('edge_events').select(['event_id', 'seq']).where('event_id', 'in', [far.eventId, next.eventId]).orderBy('seq').execute();
    expect(rows.map((r) => [r.event_id, Number(r.seq)])).toEqual([
      [far.eventId, 2 ** 31 + 5],
      [next.eventId, 2 ** 31 + 6],
    ]);
    // last_seq (the highest seq stored) is written by the apply that follows the store
    const lastSeq = async () => Number((await t.ctx.db.kysely.selectFrom('edge_terminals').select('last_seq').where('terminal_id', '=', 'term-a1').executeTakeFirstOrThrow()).last_seq);
    expect(await waitFor(async () => (await lastSeq()) === 2 ** 31 + 6 || undefined, 'last_seq')).toBe(true);
    seq = 2 ** 31 + 6; // later events of this suite continue from here
  });

  it('gateway: ack ok -> unlocked, ack error -> UnlockFailed, no ack -> UnlockFailed; offline -> UnlockFailed', async () => {
    const uid = (await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking() }))).shipmentUid as string;
    let answer: 'ok' | 'fault' | 'unknown' | 'none' = 'ok';
    const commands: any[] = [];
    term.on('message', (topic, payload) => {
      if (!topic.endsWith('/down/commands')) return;
      const c = JSON.parse(payload.toString());
      commands.push(c);
      if (answer === 'none') return;
      const ack =
        answer === 'ok'
          ? { v: 1, commandId: c.commandId, ok: true, at: new Date().toISOString() }
          : { v: 1, commandId: c.commandId, ok: false, error: answer === 'unknown' ? 'OUTCOME_UNKNOWN' : 'HARDWARE_FAULT', message: 'write broke off', at: new Date().toISOString() };
      void term.publishAsync(`${P}/up/acks`, JSON.stringify(ack), { qos: 1 });
    });
    await ok(t.post('/v1/Logistics/UnlockShipmentLocker', { shipmentUid: uid, unlockGoal: 'DropOff' }));
    const locker = await t.ctx.db.kysely.selectFrom('shipments as s').innerJoin('lockers as l', 'l.uid', 's.locker_uid').select(['l.uid', 'l.bus', 'l.board_address', 'l.lock_number']).where('s.uid', '=', uid).executeTakeFirstOrThrow();
    expect(commands[0]).toMatchObject({ v: 1, type: 'unlock', lockerUid: locker.uid, bus: locker.bus, board: Number(locker.board_address), lock: Number(locker.lock_number), shipmentUid: uid });
    expect(Date.parse(commands[0].expiresAt)).toBeGreaterThan(Date.parse(commands[0].issuedAt));
    answer = 'fault';
    const r1 = await t.post('/v1/Logistics/UnlockShipmentLocker', { shipmentUid: uid, unlockGoal: 'DropOff' });
    expect(r1.body).toMatchObject({ success: false, error: 'UnlockFailed' });
    expect(r1.body.message).toContain('HARDWARE_FAULT');
    // the terminal's write to the lock broke off: not "failed" outright, the lock may have opened
    answer = 'unknown';
    const ru = await t.post('/v1/Logistics/UnlockShipmentLocker', { shipmentUid: uid, unlockGoal: 'DropOff' });
    expect(ru.body).toMatchObject({ success: false, error: 'UnlockFailed' });
    expect(ru.body.message).toContain('may or may not have opened');
    answer = 'none';
    const r2 = await t.post('/v1/Logistics/UnlockShipmentLocker', { shipmentUid: uid, unlockGoal: 'DropOff' });
    expect(r2.body).toMatchObject({ success: false, error: 'UnlockFailed' });
    expect(commands).toHaveLength(4);
    await term.publishAsync(`${P}/up/status`, JSON.stringify({ v: 1, state: 'offline', terminalId: 'term-a1', reason: 'shutdown' }), { qos: 1, retain: true });
    await waitFor(async () => (await t.ctx.db.kysely.selectFrom('edge_terminals').select('online').where('terminal_id', '=', 'term-a1').executeTakeFirstOrThrow()).online === 0, 'offline');
    const r3 = await t.post('/v1/Logistics/UnlockShipmentLocker', { shipmentUid: uid, unlockGoal: 'DropOff' });
    expect(r3.body).toMatchObject({ success: false, error: 'UnlockFailed' });
    expect(commands).toHaveLength(4); // offline: nothing was sent
  });
});
