// Issue 11 part 7, through the real edge path: a terminal (a raw MQTT client on the embedded broker)
// reports door, item and fault events; the central service keeps each locker's observed state
// (lock_observations), finds where it disagrees with the shipment holding the locker, logs each
// disagreement once, lists it with `locker-central disagreements` and serves it as the gauge
// locker_lock_disagreements on the operator metrics endpoint. Storage on both engines.
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { waitFor } from './support/wait';
import { connectScriptedTerminal, type ScriptedTerminal } from './support/scripted-terminal';
import { captureLog } from './support/log-capture';
import { PUP_A1, PUP_B1 } from './support/fixtures';
import { addUser, booking, ok } from './shipments-helpers';
import { createLogger } from '../src/logger';
import { DisagreementMonitor, currentDisagreements, recordObservation } from '../src/edge/observations';
import { MetricsServer } from '../src/ops/metrics';
import { loadConfig } from '../src/config';
import { main } from '../src/cli';

const A1_01 = 'a1000000000000000000000000000001';
const A1_02 = 'a1000000000000000000000000000002';
const A1_06 = 'a1000000000000000000000000000006'; // bus0 board 1 lock 1
const A1_07 = 'a1000000000000000000000000000007'; // bus0 board 1 lock 2

describeEngines('lock observations and disagreements over the edge path', (engine) => {
  let t: TestService;
  let tt: ScriptedTerminal;
  let user: string;
  let seq = 0;
  const P = 'locker/v1/t/term-a1';
  const db = () => t.ctx.db.kysely;
  const event = (type: string, fields: Record<string, unknown> = {}) => ({ v: 1, eventId: crypto.randomUUID(), seq: ++seq, terminalId: 'term-a1', at: t.clock.now().toISOString(), type, ...fields });
  /** publishes the events in order and waits until the edge sync processed the last one */
  const send = async (...events: ReturnType<typeof event>[]) => {
    for (const e of events) await tt.term.publishAsync(`${P}/up/events`, JSON.stringify(e), { qos: 1 });
    const last = events[events.length - 1]!;
    await waitFor(async () => (await db().selectFrom('edge_events').select('processed').where('event_id', '=', last.eventId).executeTakeFirst())?.processed, `event ${last.type} processed`);
  };
  const obs = (lockerUid: string) => db().selectFrom('lock_observations').selectAll().where('locker_uid', '=', lockerUid).executeTakeFirst();
  const lockAt = async (lockerUid: string) => {
    const l = await db().selectFrom('lockers').select(['bus', 'board_address', 'lock_number']).where('uid', '=', lockerUid).executeTakeFirstOrThrow();
    return { bus: l.bus, board: l.board_address, lock: l.lock_number };
  };
  const grace = () => t.ctx.config.edge.disagreementGraceSeconds * 1000;
  const now = () => currentDisagreements(db(), { now: t.clock.now(), graceMs: grace() });

  beforeAll(async () => {
    t = await createTestService(engine, {
      config: { mqtt: { mode: 'embedded', host: '127.0.0.1', port: 0 }, edge: { pollMs: 50, disagreementCheckSeconds: 3600 }, metrics: { enabled: true, host: '127.0.0.1', port: 0 } },
      startWorkers: true,
    });
    user = await addUser(t, PUP_A1);
    tt = await connectScriptedTerminal(t);
  });
  afterAll(async () => {
    tt?.close();
    await t?.close();
  });

  it('door and item events become the locker observation; a lock without lockerUid is found by bus/board/lock; board events cover the board', async () => {
    await send(
      event('doorOpened', { bus: 'bus0', board: 0, lock: 1, lockerUid: A1_01, commanded: true, item: false, sessionId: 's1' }),
      event('itemPlaced', { bus: 'bus0', board: 0, lock: 1, lockerUid: null, sessionId: 's1' }),
      event('doorClosed', { bus: 'bus0', board: 0, lock: 1, item: true, sessionId: 's1' }),
    );
    const o = await obs(A1_01);
    expect(o).toMatchObject({ pup_uid: PUP_A1, terminal_id: 'term-a1', door: 'closed', item: 1, left_open_at: null, jammed_at: null, board_offline_at: null });
    expect(Number(o!.seq)).toBe(seq);
    await send(event('boardOffline', { bus: 'bus0', board: 1, error: 'no reply' }));
    expect((await obs(A1_06))?.board_offline_at).toBeTruthy();
    expect((await obs(A1_07))?.board_offline_at).toBeTruthy();
    expect((await obs(A1_01))?.board_offline_at).toBeNull();
    await send(event('boardOnline', { bus: 'bus0', board: 1 }));
    expect((await obs(A1_06))?.board_offline_at).toBeNull();
    // an event for a lock no locker sits at is processed and records nothing
    await send(event('doorOpened', { bus: 'bus9', board: 0, lock: 1, lockerUid: null, commanded: false, item: null, sessionId: null }));
    expect(await db().selectFrom('lock_observations').select('locker_uid').execute()).toHaveLength(3);
  });

  it('only a newer event of the terminal replaces the observation (the recorder, on this engine)', async () => {
    const before = await obs(A1_01);
    const row = (s: number, type: string, fields: Record<string, unknown>) => ({ event_id: crypto.randomUUID(), seq: s, type, at: t.clock.now().toISOString(), received_at: t.clock.now().toISOString(), payload: JSON.stringify({ type, ...fields }) });
    const log = createLogger({ level: 'silent' });
    expect(await recordObservation(db(), log, 'term-a1', row(Number(before!.seq) - 1, 'itemRemoved', { bus: 'bus0', board: 0, lock: 1, lockerUid: A1_01 }))).toBe(true);
    expect(await obs(A1_01)).toEqual(before);
    expect(await recordObservation(db(), log, 'term-a1', row(Number(before!.seq), 'itemRemoved', { bus: 'bus0', board: 0, lock: 1, lockerUid: A1_01 }))).toBe(true);
    expect(await obs(A1_01)).toEqual(before);
    // a newer one does (through the edge path: the terminal's seq has no gap)
    await send(event('itemRemoved', { bus: 'bus0', board: 0, lock: 1, lockerUid: A1_01, sessionId: null }));
    expect(await obs(A1_01)).toMatchObject({ item: 0, event_id: expect.any(String) });
    expect(Number((await obs(A1_01))!.seq)).toBe(seq);
  });

  it('an item without its drop-off is a disagreement once the grace has passed, logged once, gone after the drop-off', async () => {
    const uid = (await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking() }))).shipmentUid as string;
    const s = await db().selectFrom('shipments').select('locker_uid').where('uid', '=', uid).executeTakeFirstOrThrow();
    const locker = s.locker_uid!;
    const at = await lockAt(locker);
    // the parcel goes in and the door shuts; the terminal's dropOff is not there yet
    await send(
      event('doorOpened', { ...at, lockerUid: locker, commanded: true, item: false, sessionId: 's2' }),
      event('itemPlaced', { ...at, lockerUid: locker, sessionId: 's2' }),
      event('doorClosed', { ...at, lockerUid: locker, item: true, sessionId: 's2' }),
    );
    expect((await now()).filter((d) => d.lockerUid === locker)).toEqual([]); // within the grace: the drop-off may be in flight
    t.clock.advance(grace() + 1000);
    const found = (await now()).filter((d) => d.lockerUid === locker);
    expect(found).toEqual([expect.objectContaining({ pupUid: PUP_A1, pupName: 'Alpha Station', lockerUid: locker, kind: 'item-without-dropoff', shipmentUid: uid, state: 'ReadyForDropoff' })]);

    const cap = captureLog();
    const monitor = new DisagreementMonitor({ ...t.ctx, log: createLogger({ level: 'info', destination: cap.destination }) });
    const first = await monitor.check();
    expect(first.appeared.map((d) => [d.lockerUid, d.kind])).toContainEqual([locker, 'item-without-dropoff']);
    await monitor.check();
    const warned = cap.entries.filter((e) => e.msg === 'lock disagreement' && e.locker === locker);
    expect(warned).toHaveLength(1); // once, however often it is looked at
    expect(warned[0]).toMatchObject({ level: 40, pup: PUP_A1, locker, kind: 'item-without-dropoff', shipment: uid, state: 'ReadyForDropoff' });
    expect(JSON.stringify(warned[0])).not.toContain('@'); // ids only: no user data
    expect(await db().selectFrom('lock_disagreements').select(['kind', 'shipment_uid']).where('locker_uid', '=', locker).execute()).toEqual([{ kind: 'item-without-dropoff', shipment_uid: uid }]);

    // the dropOff arrives: the shipment agrees with the door, the disagreement is gone
    const code = await db().selectFrom('access_codes').select('uid').where('shipment_uid', '=', uid).where('usage', '=', 'DropOff').where('type', '=', 'Qr').executeTakeFirstOrThrow();
    await send(event('dropOff', { sessionId: 's2', shipmentUid: uid, codeId: code.uid, lockerUid: locker, ...at, item: true }));
    expect((await db().selectFrom('shipments').select('state_code').where('uid', '=', uid).executeTakeFirstOrThrow()).state_code).toBe('ReadyForPickup');
    t.clock.advance(grace() + 1000);
    expect((await now()).filter((d) => d.lockerUid === locker)).toEqual([]);
    const after = await monitor.check();
    expect(after.resolved).toContainEqual({ lockerUid: locker, kind: 'item-without-dropoff' });
    expect(cap.entries.filter((e) => e.msg === 'lock disagreement resolved' && e.locker === locker)).toHaveLength(1);

    // the parcel is taken but no pickUp comes: empty but ReadyForPickup
    await send(
      event('doorOpened', { ...at, lockerUid: locker, commanded: true, item: true, sessionId: 's3' }),
      event('itemRemoved', { ...at, lockerUid: locker, sessionId: 's3' }),
      event('doorClosed', { ...at, lockerUid: locker, item: false, sessionId: 's3' }),
    );
    t.clock.advance(grace() + 1000);
    expect((await now()).filter((d) => d.lockerUid === locker).map((d) => d.kind)).toEqual(['empty-but-ready-for-pickup']);
  });

  it('a door left open and a jam are reported at once; the operator metrics endpoint serves the gauge per pick up point and kind', async () => {
    const a2 = await lockAt(A1_02);
    await send(event('doorOpened', { ...a2, lockerUid: A1_02, commanded: false, item: false, sessionId: null }), event('doorLeftOpen', { ...a2, lockerUid: A1_02, openMs: 125_000 }));
    const a6 = await lockAt(A1_06);
    await send(event('jam', { ...a6, lockerUid: A1_06, cause: 'door-did-not-open', afterMs: 3000, sessionId: null }));
    const kinds = (await now()).map((d) => `${d.lockerUid}/${d.kind}`);
    expect(kinds).toContain(`${A1_02}/door-left-open`);
    expect(kinds).toContain(`${A1_06}/jammed`);

    const metrics = t.ctx.workers.find((w) => w.name === 'metrics') as MetricsServer;
    expect(metrics).toBeInstanceOf(MetricsServer);
    const base = metrics.address()!;
    expect(base).not.toContain(`:${t.ctx.config.http.port}`);
    const res = await fetch(`${base}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    const text = await res.text();
    expect(text).toContain('# TYPE locker_lock_disagreements gauge');
    expect(text).toContain(`locker_lock_disagreements{pup="${PUP_A1}",kind="door-left-open"} 1\n`);
    expect(text).toContain(`locker_lock_disagreements{pup="${PUP_A1}",kind="jammed"} 1\n`);
    expect(text).toContain(`locker_lock_disagreements{pup="${PUP_A1}",kind="empty-but-ready-for-pickup"} 1\n`);
    expect(text).toContain(`locker_lock_disagreements{pup="${PUP_A1}",kind="item-without-shipment"} 0\n`);
    expect(text).toContain(`locker_lock_disagreements{pup="${PUP_B1}",kind="jammed"} 0\n`);
    expect((await fetch(`${base}/v1/Logistics/GetShipments`)).status).toBe(404);

    // the door shuts: the fault is gone
    await send(event('doorClosed', { ...a2, lockerUid: A1_02, item: false, sessionId: null }));
    expect(await (await fetch(`${base}/metrics`)).text()).toContain(`locker_lock_disagreements{pup="${PUP_A1}",kind="door-left-open"} 0\n`);
  });
});

describe('the metrics endpoint is off by default and never on the API port', () => {
  it('no metrics worker unless metrics.enabled; the API port is refused', async () => {
    expect(loadConfig({ env: {} }).metrics).toEqual({ enabled: false, host: '127.0.0.1', port: 9464 });
    const t = await createTestService('sqlite', { site: null });
    try {
      expect(t.ctx.workers.map((w) => w.name)).not.toContain('metrics');
    } finally {
      await t.close();
    }
    const config = loadConfig({ env: {}, overrides: { http: { port: 18080 }, metrics: { enabled: true, port: 18080 } } });
    await expect(new MetricsServer({ config, log: createLogger({ level: 'silent' }) } as never).start()).rejects.toThrow(/http\.port/);
  });
});

describe('locker-central disagreements', () => {
  let t: TestService;
  let dir: string;
  let cfgFile: string;
  const run = async (...args: string[]) => {
    let out = '';
    const spy = vi.spyOn(process.stdout, 'write').mockImplementation((chunk: any) => {
      out += String(chunk);
      return true;
    });
    try {
      await main(['disagreements', '--config', cfgFile, ...args]);
    } finally {
      spy.mockRestore();
    }
    return out;
  };

  beforeAll(async () => {
    t = await createTestService('sqlite');
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-cli-'));
    cfgFile = path.join(dir, 'central.json');
    fs.writeFileSync(cfgFile, JSON.stringify({ database: { url: t.ctx.config.database.url } }));
    // what the edge sync records: an item in A1-01 (no shipment), A1-02 left open, B1-01 jammed
    const at = '2026-03-01T11:00:00.000Z'; // after the site was provisioned (10:00)
    const row = (s: number, type: string, fields: Record<string, unknown>) => ({ event_id: crypto.randomUUID(), seq: s, type, at, received_at: at, payload: JSON.stringify(fields) });
    const log = createLogger({ level: 'silent' });
    await recordObservation(t.ctx.db.kysely, log, 'term-a1', row(1, 'doorClosed', { bus: 'bus0', board: 0, lock: 1, lockerUid: A1_01, item: true }));
    await recordObservation(t.ctx.db.kysely, log, 'term-a1', row(2, 'doorLeftOpen', { bus: 'bus0', board: 0, lock: 2, lockerUid: A1_02, openMs: 200_000 }));
    await recordObservation(t.ctx.db.kysely, log, 'term-b1', row(1, 'jam', { bus: 'bus0', board: 0, lock: 1, cause: 'door-did-not-open' }));
  });
  afterAll(async () => {
    await t?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('lists them per pick up point with the names of the point and the locker', async () => {
    const text = await run();
    expect(text).toMatch(/^Alpha Station \(aaaa0000000000000000000000000001\): 2 disagreements\n {2}A1-01 +item-without-shipment +since 2026-03-01T11:00:00\.000Z/);
    expect(text).toMatch(/\n {2}A1-02 +door-left-open +since 2026-03-01T11:00:00\.000Z/);
    expect(text).toMatch(/\nBeta Campus \(bbbb0000000000000000000000000001\): 1 disagreement\n {2}B1-01 +jammed /);
  });

  it('--pup limits it to one point; --json gives the records', async () => {
    expect(await run('--pup', PUP_B1)).toMatch(/^Beta Campus .*\n {2}B1-01 +jammed .*\n$/);
    expect(await run('--pup', 'aaaa0000000000000000000000000002')).toBe('no disagreements at pick up point aaaa0000000000000000000000000002\n');
    const json = JSON.parse(await run('--json', '--pup', PUP_A1));
    expect(json).toEqual([
      { pupUid: PUP_A1, pupName: 'Alpha Station', lockerUid: A1_01, lockerName: 'A1-01', kind: 'item-without-shipment', since: '2026-03-01T11:00:00.000Z' },
      { pupUid: PUP_A1, pupName: 'Alpha Station', lockerUid: A1_02, lockerName: 'A1-02', kind: 'door-left-open', since: '2026-03-01T11:00:00.000Z' },
    ]);
  });
});
