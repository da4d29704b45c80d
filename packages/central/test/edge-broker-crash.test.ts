// Acknowledged means committed, with any broker (issue 11 part 5, docs/edge-protocol.md "Order and
// acknowledgement"). A private Mosquitto with deploy/mosquitto.conf as shipped (support/mosquitto.ts):
//
// - the terminal's link (the agent's EdgeLink and AgentStore) marks an event sent only when a
//   central instance acknowledged it on down/eventAcks after its database committed it, never on the
//   broker's PUBACK: a broker killed with SIGKILL while it holds queued events loses none of them;
// - two central instances on one PostgreSQL database behind the broker's MQTT 5 shared subscription
//   (mqtt.sharedGroup: each event goes to ONE of them) apply a terminal's events once each, in seq
//   order, whatever instance gets which event.
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { AgentStore } from '../../agent/src/store';
import { EdgeLink } from '../../agent/src/edge-link';
import { CentralService } from '../src/service';
import { createLogger } from '../src/logger';
import { loadConfig, type ConfigInput } from '../src/config';
import { createTestService, type TestService } from './support/harness';
import { waitFor } from './support/wait';
import { MOSQUITTO, MOSQUITTO_PASSWD, startMosquitto, type TestMosquitto } from './support/mosquitto';
import { PUP_A1 } from './support/fixtures';
import { addUser, booking, ok } from './shipments-helpers';

const available = !!MOSQUITTO && !!MOSQUITTO_PASSWD;
const d = available || process.env.LOCKER_REQUIRE_SERVICES === '1' ? describe : describe.skip;
const silent = pino({ level: process.env.DEBUG_LINK ? 'debug' : 'silent' });
const TERMINAL = { id: 'term-a1', secret: 'terminal-secret-a1' };

function terminalLink(url: string, store: AgentStore): EdgeLink {
  return new EdgeLink({
    url,
    terminalId: TERMINAL.id,
    secret: TERMINAL.secret,
    keepaliveSeconds: 5,
    reconnectMs: 100,
    reconnectMaxMs: 500,
    connectTimeoutMs: 2000,
    publishTimeoutMs: 2000,
    store,
    log: silent,
    status: () => ({
      v: 1,
      state: 'online',
      terminalId: TERMINAL.id,
      agentVersion: 'test',
      startedAt: new Date().toISOString(),
      at: new Date().toISOString(),
      codes: { epoch: null, version: 0, count: 0 },
      journal: { unsent: store.unsentCount(), lastSeq: store.lastSeq() },
      buses: [],
    }),
  });
}

d(`events through Mosquitto: acknowledged only when committed${available ? '' : ' (SKIPPED: mosquitto not installed)'}`, () => {
  let broker: TestMosquitto;
  let dir: string;

  beforeAll(async () => {
    broker = await startMosquitto({ users: [['central-1', 'central1-secret'], ['central-2', 'central2-secret'], [TERMINAL.id, TERMINAL.secret]] });
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'edge-broker-crash-'));
  });
  afterAll(async () => {
    await broker?.cleanup();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('a broker killed with events queued for the central service loses none: the terminal sends them again', { timeout: 120_000 }, async () => {
    const first = await createTestService('sqlite', {
      config: { mqtt: { mode: 'external', url: broker.url, username: 'central-1', password: 'central1-secret' }, edge: { pollMs: 100, retrySeconds: 0.5 }, ...(process.env.DEBUG_LINK ? { log: { level: 'debug' as const } } : {}) },
      startWorkers: true,
    });
    const extra: CentralService[] = [];
    const store = new AgentStore(path.join(dir, 'agent-crash.db'));
    store.open();
    const link = terminalLink(broker.url, store);
    try {
      await link.start();
      const ev = (i: number) => store.append('doorOpened', { bus: 'bus0', board: 0, lock: 1 + (i % 8), commanded: false, item: null, sessionId: null, n: i }, new Date());
      for (let i = 0; i < 3; i++) ev(i);
      link.kick();
      await waitFor(() => store.unsentCount() === 0, 'first events committed and acknowledged', 15_000);

      // the central instance goes away: its persistent session at the broker queues what comes
      await first.svc.stop();
      for (let i = 3; i < 23; i++) ev(i);
      link.kick();
      const last = store.lastSeq();
      await waitFor(() => link.publishedUpTo >= last, 'all published, the broker acknowledged (PUBACK)', 15_000);
      await new Promise((r) => setTimeout(r, 300));
      // a PUBACK is not a commit: nothing of it is marked sent
      expect(store.unsentCount()).toBe(20);

      // the broker crashes: what it queued since its last autosave is gone
      await broker.kill();
      await broker.start();
      const svc = new CentralService({ config: first.ctx.config, clock: first.clock, log: createLogger({ level: process.env.DEBUG_LINK ? 'debug' : 'silent' }), pgSchema: first.pgSchema, startWorkers: true });
      extra.push(svc);
      const ctx = await svc.start();
      await waitFor(() => store.unsentCount() === 0, 'everything committed and acknowledged after the crash', 30_000);
      const rows = await ctx.db.kysely.selectFrom('edge_events').select(['seq', 'processed']).where('terminal_id', '=', TERMINAL.id).orderBy('seq').execute();
      expect(rows.map((r) => Number(r.seq))).toEqual(Array.from({ length: 23 }, (_, i) => i + 1));
      expect(rows.every((r) => Number(r.processed) === 1)).toBe(true);
      const t = await ctx.db.kysely.selectFrom('edge_terminals').select(['applied_seq', 'journal_id']).where('terminal_id', '=', TERMINAL.id).executeTakeFirstOrThrow();
      expect({ applied: Number(t.applied_seq), journal: t.journal_id }).toEqual({ applied: 23, journal: store.journalId() });
    } finally {
      await link.stop();
      store.close();
      for (const s of extra) await s.stop();
      await first.close();
    }
  });

  const pgUrl = inject('pgUrl');
  it.skipIf(!pgUrl && process.env.LOCKER_REQUIRE_SERVICES !== '1')('two central instances on PostgreSQL behind a shared subscription: each event applied once, in seq order', { timeout: 120_000 }, async () => {
    const extConfig = (user: string, pass: string): ConfigInput['mqtt'] => ({ mode: 'external', url: broker.url, username: user, password: pass, sharedGroup: 'central' });
    const a: TestService = await createTestService('postgres', { config: { mqtt: extConfig('central-1', 'central1-secret'), edge: { pollMs: 100, retrySeconds: 0.3 } }, startWorkers: true });
    const configB = loadConfig({ env: {}, overrides: { ...(a.ctx.config as ConfigInput), mqtt: extConfig('central-2', 'central2-secret') } });
    const b = new CentralService({ config: configB, clock: a.clock, log: createLogger({ level: 'silent' }), pgSchema: a.pgSchema, startWorkers: true });
    const store = new AgentStore(path.join(dir, 'agent-shared.db'));
    store.open();
    const link = terminalLink(broker.url, store);
    try {
      const bctx = await b.start();
      const user = await addUser(a, PUP_A1);
      // shipments in flight: each gets its drop-off, then its pick-up, as door events of one journal
      const ships: { uid: string; drop: Record<string, unknown>; pick: Record<string, unknown> }[] = [];
      for (let i = 0; i < 6; i++) {
        const uid = (await ok(a.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking() }))).shipmentUid as string;
        const s = await a.ctx.db.kysely.selectFrom('shipments as s').innerJoin('lockers as l', 'l.uid', 's.locker_uid').select(['l.uid', 'l.bus', 'l.board_address', 'l.lock_number']).where('s.uid', '=', uid).executeTakeFirstOrThrow();
        const code = async (usage: string) => (await a.ctx.db.kysely.selectFrom('access_codes').select('uid').where('shipment_uid', '=', uid).where('usage', '=', usage).where('valid', '=', 1).executeTakeFirstOrThrow()).uid;
        const base = { shipmentUid: uid, lockerUid: s.uid, bus: s.bus, board: Number(s.board_address), lock: Number(s.lock_number) };
        ships.push({ uid, drop: { ...base, sessionId: crypto.randomUUID(), codeId: await code('DropOff'), item: true }, pick: { ...base, sessionId: crypto.randomUUID(), codeId: await code('PickUp'), item: false } });
      }
      for (const s of ships) {
        store.append('doorOpened', { bus: s.drop.bus, board: s.drop.board, lock: s.drop.lock, commanded: true }, new Date());
        store.append('dropOff', s.drop, new Date());
        store.append('pickUp', s.pick, new Date());
      }
      await link.start();
      await waitFor(() => store.unsentCount() === 0, 'every event committed and acknowledged', 30_000);
      // both instances took part: the broker split the events between them
      const received = (ctx: typeof bctx) => (ctx.workers.find((w) => w.name === 'edge-sync') as unknown as { eventsReceived: number }).eventsReceived;
      expect(received(a.ctx)).toBeGreaterThan(0);
      expect(received(bctx)).toBeGreaterThan(0);
      expect(received(a.ctx) + received(bctx)).toBeGreaterThanOrEqual(ships.length * 3);
      const byInstance = await a.ctx.db.kysely.selectFrom('edge_events').select(['seq', 'outcome', 'processed']).where('terminal_id', '=', TERMINAL.id).orderBy('seq').execute();
      expect(byInstance.length).toBe(ships.length * 3);
      expect(byInstance.every((r) => Number(r.processed) === 1)).toBe(true);
      for (const s of ships) {
        const hist = await bctx.db.kysely.selectFrom('shipment_transitions').select('to_state').where('shipment_uid', '=', s.uid).orderBy('seq').execute();
        expect(hist.map((h) => h.to_state)).toEqual(['ReadyForDropoff', 'ReadyForPickup', 'PickedUp']);
      }
      // no outcome says the order was wrong
      expect(byInstance.filter((r) => String(r.outcome).startsWith('rejected'))).toEqual([]);
    } finally {
      await link.stop();
      store.close();
      await b.stop();
      await a.close();
    }
  });
});
