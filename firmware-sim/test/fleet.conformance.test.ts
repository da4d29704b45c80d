// The fleet simulator against the real central service (embedded broker, SQLite in a temp folder,
// free ports), at small N: the generated provisioning file applied with `locker-central provision`
// (as an operator would), then the fleet's terminals must
// - all connect and hold exactly the codes the central service has for their pick up point;
// - receive a booking made through the HTTP API at the right terminal (and only there);
// - have their events acknowledged and applied exactly once (edge_events, applied_seq), also
//   when the acknowledgements were lost and the events re-sent after a reconnect;
// - answer a remote unlock (UnlockShipmentLocker succeeds through the simulated terminal);
// and a terminal with a wrong secret is reported as refused.
import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashCode } from '@locker/common';
import { Fleet, generateFleetSite, readFleetTerminals, siteToYaml, type FleetSite } from '../src';
import { loadConfig } from '../../packages/central/src/config';
import { CentralService } from '../../packages/central/src/service';
import { createLogger } from '../../packages/central/src/logger';
import { currentCodes } from '../../packages/central/src/edge/codes';
import { preparedReader } from '../../packages/central/src/db/prepared-read';
import type { AppContext } from '../../packages/central/src/context';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const CENTRAL_BIN = path.join(ROOT, 'packages/central/bin/locker-central.js');

async function until(cond: () => boolean | Promise<boolean>, what: string, ms = 20_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('fleet simulator: protocol conformance against the real central service', () => {
  let dir: string;
  let svc: CentralService;
  let ctx: AppContext;
  let base: string;
  let token: string;
  let site: FleetSite;
  let fleet: Fleet;
  let toUser: string;
  let bookedAtPup1: string;
  const pepper = crypto.randomBytes(32).toString('base64url');

  const api = async (p: string, body: unknown): Promise<any> => {
    const r = await fetch(`${base}${p}`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` }, body: JSON.stringify(body) });
    const b = (await r.json()) as any;
    if (r.status !== 200 || b.success !== true) throw new Error(`${p}: ${r.status} ${JSON.stringify(b)}`);
    return b;
  };
  const book = async (pupUid: string): Promise<string> => (await api('/v1/Logistics/CreateLocalShipment', { ToUserUid: toUser, PupUid: pupUid, Dimension: { width: 30, height: 10, length: 40 }, AllowLargerLockers: true, AllowOverflowLockers: false })).shipmentUid;
  /** what the central service holds for a PUP: code id -> hash */
  const centralCodes = async (pupUid: string) => new Map((await currentCodes(preparedReader(ctx.db), pupUid)).map((c) => [c.id, c.hash]));

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-conf-'));
    site = generateFleetSite({ terminals: 12, pups: 4, lockersPerPup: 4, prefix: 'conf-' }).site;
    const file = path.join(dir, 'fleet.yaml');
    fs.writeFileSync(file, siteToYaml(site));
    const dbUrl = path.join(dir, 'central.db');
    // provisioned as an operator does it: the CLI, with the service's pepper (fast digests)
    const env = { ...process.env, LOCKER_DATABASE_URL: dbUrl, LOCKER_MQTT_TERMINAL_SECRET_PEPPER: pepper, LOCKER_LOG_LEVEL: 'warn' };
    const prov = spawnSync(process.execPath, [CENTRAL_BIN, 'provision', file], { env, encoding: 'utf8', timeout: 60_000 });
    expect(prov.status, prov.stderr).toBe(0);
    expect(prov.stdout).toMatch(/created terminal conf-11/);

    const config = loadConfig({
      env: {},
      overrides: {
        database: { url: dbUrl },
        log: { level: 'silent' },
        environment: 'staging',
        mqtt: { mode: 'embedded', host: '127.0.0.1', port: 0, terminalSecretPepper: pepper },
        edge: { pollMs: 100, commandTimeoutMs: 5000 },
        http: { host: '127.0.0.1', port: 0, rateLimitPerMinute: 0, unauthenticatedRateLimitPerMinute: 0 },
      },
    });
    svc = new CentralService({ config, log: createLogger({ level: 'silent' }), startWorkers: true });
    ctx = await svc.start();
    base = await svc.listen();
    const tenant = site.tenants[0]!;
    const tr = await fetch(`${base}/connect/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ grant_type: 'client_credentials', client_id: tenant.clientId, client_secret: tenant.clientSecret, scope: 'integration_api' }),
    });
    token = ((await tr.json()) as { access_token: string }).access_token;
    expect(token).toBeTruthy();
    toUser = (await api('/v1/Account/CreateOrGetAccount', { emailAddress: 'fleet-user@example.test', firstName: 'Fleet', lastName: 'User', pickUpPointUid: site.pickupPoints[0]!.uid })).userUid;
    // codes before the fleet connects: they must come with the first snapshot
    await book(site.pickupPoints[0]!.uid);
    bookedAtPup1 = await book(site.pickupPoints[1]!.uid);

    const terminals = readFleetTerminals(file);
    expect(terminals).toHaveLength(12);
    // the last terminal with a wrong (but well-formed, high-entropy) secret
    terminals[11] = { ...terminals[11]!, secret: crypto.randomBytes(32).toString('base64url') };
    fleet = new Fleet({ url: ctx.bus!.address()!, terminals, connectRate: 0, reconnectMs: 300, reconnectMaxMs: 1000, publishTimeoutMs: 2000, syncRetryMs: 1000, statusIntervalMs: 0 });
    fleet.start();
    await fleet.waitFor((m) => m.inSync >= 11, 30_000, '11 terminals in sync');
  });

  afterAll(async () => {
    await fleet?.stop();
    await svc?.stop();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('every terminal with the right secret connects and holds exactly the codes the central service has for its pick up point', async () => {
    const m = fleet.metrics();
    expect(m.connected).toBe(11);
    expect(m.inSync).toBe(11);
    for (const t of fleet.terminals.slice(0, 11)) {
      const pup = site.terminals.find((x) => x.id === t.id)!.pupUid;
      const want = await centralCodes(pup);
      expect(t.epoch, t.id).not.toBeNull();
      expect(new Map(t.codes), t.id).toEqual(want);
    }
    // the first two points have a booking each: 4 codes (drop-off and pick-up, PIN and QR)
    expect(fleet.terminal('conf-0')!.codes.size).toBe(4);
    expect(fleet.terminal('conf-2')!.codes.size).toBe(0);
    // what the central service recorded as pushed and online matches what the terminals hold
    const rows = await ctx.db.kysely.selectFrom('edge_terminals').select(['terminal_id', 'epoch', 'codes_version', 'online']).execute();
    for (const t of fleet.terminals.slice(0, 11)) {
      const r = rows.find((x) => x.terminal_id === t.id)!;
      expect({ epoch: r.epoch, version: Number(r.codes_version), online: Number(r.online) }, t.id).toEqual({ epoch: t.epoch, version: t.version, online: 1 });
    }
  });

  it('reports the terminal refused for its wrong secret', async () => {
    const m = await fleet.waitFor((x) => x.refusedTerminals.length > 0, 10_000, 'the refusal');
    expect(m.neverConnected).toBe(1);
    expect(m.refusedTerminals[0]!.id).toBe('conf-11');
    // CONNACK 4 (bad user name or password), or 5 once the broker throttles its retries
    expect([4, 5]).toContain(m.refusedTerminals[0]!.code);
    expect(m.allInSyncMs).toBeNull();
  });

  it('a booking made through the HTTP API reaches the terminals of its pick up point, and no other', async () => {
    const pup = site.pickupPoints[2]!.uid;
    const holders = fleet.terminals.filter((t) => site.terminals.find((x) => x.id === t.id)!.pupUid === pup && t.id !== 'conf-11');
    const others = fleet.terminals.filter((t) => !holders.includes(t));
    const before = new Map(others.map((t) => [t.id, new Map(t.codes)]));
    const snapshots0 = holders.map((t) => t.snapshots);
    const shipmentUid = await book(pup);
    const access = (await api('/v1/Logistics/GetShipmentAccessConfig', { shipmentUid })).items as { usage: string; type: string; value: string }[];
    const hashes = access.filter((a) => a.usage === 'DropOff' || a.usage === 'PickUp').map((a) => hashCode(a.value));
    expect(hashes).toHaveLength(4);
    expect(holders.length).toBeGreaterThan(0);
    for (const t of holders) await until(() => hashes.every((h) => [...t.codes.values()].includes(h)), `the new codes at ${t.id}`);
    for (const t of holders) expect(new Map(t.codes)).toEqual(await centralCodes(pup));
    for (const t of others) expect(new Map(t.codes), t.id).toEqual(before.get(t.id));
    expect(fleet.metrics().codes.fromDeltas).toBeGreaterThanOrEqual(4 * holders.length);
    // cancelled: the delta revokes its codes at the terminal
    await api('/v1/Logistics/CancelShipment', { shipmentUid });
    for (const t of holders) await until(() => !hashes.some((h) => [...t.codes.values()].includes(h)), `the codes revoked at ${t.id}`);
    for (const t of holders) expect(new Map(t.codes)).toEqual(await centralCodes(pup));
    expect(fleet.metrics().syncRequests).toBe(0); // every delta fitted: no gap, no snapshot asked for
    // a booking and its cancellation travel as deltas. The statuses the terminal sends meanwhile
    // (each change announced 200 ms later, as the agent does) may cross a push and cost a snapshot
    // now and then (a status naming an older version gets one), but the exchange must settle: no
    // ping-pong of snapshots and statuses, and the terminal ends on the version the central has
    await new Promise((r) => setTimeout(r, 1500));
    const settled = holders.map((t) => t.snapshots);
    for (const [i, n] of settled.entries()) expect(n - snapshots0[i]!, holders[i]!.id).toBeLessThanOrEqual(2);
    await new Promise((r) => setTimeout(r, 1000));
    expect(holders.map((t) => t.snapshots)).toEqual(settled);
    for (const t of holders) {
      const row = await ctx.db.kysely.selectFrom('edge_terminals').select(['epoch', 'codes_version']).where('terminal_id', '=', t.id).executeTakeFirstOrThrow();
      expect({ epoch: t.epoch, version: t.version }, t.id).toEqual({ epoch: row.epoch, version: Number(row.codes_version) });
    }
  });

  const dbEvents = async (id: string) => {
    const rows = await ctx.db.kysely.selectFrom('edge_events').select(['event_id', 'seq', 'processed', 'journal_id']).where('terminal_id', '=', id).execute();
    const term = await ctx.db.kysely.selectFrom('edge_terminals').select(['applied_seq', 'journal_id', 'live_journal_id', 'last_seq']).where('terminal_id', '=', id).executeTakeFirstOrThrow();
    return { rows, applied: Number(term.applied_seq), journal: term.journal_id, live: term.live_journal_id };
  };

  it('events published with seq are acknowledged and applied exactly once', async () => {
    const t = fleet.terminal('conf-3')!;
    for (let i = 0; i < 50; i++) fleet.journalDoorEvent(t.id);
    await until(() => t.acked === 50, 'acks of 50 events');
    const { rows, applied, journal, live } = await dbEvents(t.id);
    expect(journal).toBe(t.journalId);
    expect(live).toBe(t.journalId); // its status names the journal it writes
    expect(applied).toBe(50);
    expect(rows).toHaveLength(50);
    expect(rows.map((r) => Number(r.seq)).sort((a, b) => a - b)).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
    expect(rows.every((r) => Number(r.processed) === 1)).toBe(true);
    // door events move the locker's observed state
    const obs = await ctx.db.kysely.selectFrom('lock_observations').select(['door', 'seq']).where('terminal_id', '=', t.id).execute();
    expect(obs).toHaveLength(1);
    expect(obs[0]).toMatchObject({ door: 'closed' });
    expect(Number(obs[0]!.seq)).toBe(50);
  });

  it('events re-sent after a reconnect (their acknowledgements lost) are not applied twice', async () => {
    const t = fleet.terminal('conf-4')!;
    t.ignoreAcks = true;
    const published0 = fleet.metrics().events.published;
    for (let i = 0; i < 20; i++) fleet.journalDoorEvent(t.id);
    // stored and applied centrally, but the terminal took no acknowledgement
    await until(async () => (await dbEvents(t.id)).applied === 20, 'the central applied 20');
    expect(t.acked).toBe(0);
    const resent0 = fleet.metrics().events.resent;
    const connections = t.connections;
    t.ignoreAcks = false;
    t.dropConnection();
    await until(() => t.connections > connections && t.acked === 20, 'reconnected and acknowledged', 20_000);
    const m = fleet.metrics();
    expect(m.events.resent - resent0).toBeGreaterThanOrEqual(20);
    expect(m.events.published - published0).toBeGreaterThanOrEqual(40);
    const { rows, applied } = await dbEvents(t.id);
    expect(applied).toBe(20);
    expect(rows).toHaveLength(20);
    expect(new Set(rows.map((r) => r.event_id)).size).toBe(20);
    // the terminal is in sync again after the reconnect
    await until(() => t.inSync, 'in sync after the reconnect');
  });

  it('a remote unlock through the API is answered by the simulated terminal, once', async () => {
    const shipmentUid = bookedAtPup1;
    const answered0 = fleet.metrics().commands.answered;
    await api('/v1/Logistics/UnlockShipmentLocker', { shipmentUid, unlockGoal: 'DropOff' });
    const m = fleet.metrics();
    expect(m.commands.answered - answered0).toBe(1);
    expect(m.commands.duplicates).toBe(0);
    // the terminal journals the unlock as the agent does; the central service stores it
    await until(async () => (await ctx.db.kysely.selectFrom('edge_events').select('event_id').where('type', '=', 'unlockSent').execute()).length === 1, 'the unlockSent event stored');
  });

  it('the fleet is in sync with the central service at the end; no malformed message was received', async () => {
    const m = await fleet.waitFor((x) => x.events.backlog === 0, 10_000, 'every event acknowledged');
    expect(m.droppedMessages).toBe(0);
    expect(m.events.acked).toBe(m.events.journalled);
    expect(m.inSync).toBe(11);
  });
});
