// Door events ingested end to end on one central node (issue 15): the central service in this
// process (embedded broker aedes, SQLite in a temporary directory, synchronous=FULL as the default
// configuration has it, or PostgreSQL), a load generator of simulated terminals in another process
// (bench/edge-ingest-load.mjs: mqtt.js clients speaking the edge protocol). Not part of
// `npm run bench`; run by hand, wrapped in the bench lock on shared machines:
//
//   flock /tmp/bench.lock npx tsx --conditions=@locker/source bench/edge-ingest.ts [--terminals 500] [--lockers 16] [--window 32] [--seconds 60] [--profile out.cpuprofile] [--engine postgres [--sql]]
//
// --engine postgres: the store is PostgreSQL at LOCKER_TEST_PG_URL (default 127.0.0.1:5432, database
// test), in a schema of its own that is dropped afterwards.
// Set-up: N pick up points with L lockers and one terminal each (a high-entropy secret with its
// fast digest: logins cost one HMAC), and one shipment booked in every locker through the tenant
// API (CreateLocalShipment). Each terminal then replays, per shipment, the journal of a drop-off
// session and a pick-up session as the agent writes it (credentialAccepted, unlockSent,
// doorOpened, itemPlaced/itemRemoved, doorClosed, dropOff/pickUp: 12 events, 2 of them shipment
// transitions), with a journal id and seq, QoS 1, at most --window events ahead of the last
// down/eventAcks (the agent's drain window), sending again from `resendFrom` when asked.
//
// Reported: events acknowledged per second (from the first publish to the last acknowledgement,
// and in the steady middle of the run), the central process' CPU (user + system, in cores) and
// event-loop utilisation over the run, and a check against the database afterwards: every
// acknowledged event stored and processed once, each terminal's applied_seq equal to its acked
// count, every drop-off and pick-up applied (outcome `...:applied:...`) and the shipments in the
// states the events lead to. With --profile, a CPU profile of the central process (node
// inspector) over the run, summarised by area as bench/profile-endpoint.ts does.
import { countPgQueries, summariseProfile, dropPgSchema, type Profile } from './cpu-profile';
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import inspector from 'node:inspector/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { CentralService } from '../packages/central/src/service';
import { loadConfig } from '../packages/central/src/config';
import { createLogger } from '../packages/central/src/logger';
import { applyProvisioning } from '../packages/central/src/provisioning/apply';
import { newUid, toDbTime } from '../packages/central/src/ids';
import { generateTerminalSecret, terminalDigestKey, terminalSecretDigest } from '../packages/central/src/auth/terminal-secret-digest';

const { values } = parseArgs({
  options: {
    terminals: { type: 'string', default: '500' },
    lockers: { type: 'string', default: '16' },
    window: { type: 'string', default: '32' },
    seconds: { type: 'string', default: '60' },
    profile: { type: 'string' },
    log: { type: 'string', default: 'silent' },
    engine: { type: 'string', default: 'sqlite' },
    sql: { type: 'boolean', default: false },
  },
});
const N = Number(values.terminals);
const L = Number(values.lockers);
const WINDOW = Number(values.window);
const here = path.dirname(fileURLToPath(import.meta.url));

async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  const p = (s.address() as net.AddressInfo).port;
  await new Promise((r) => s.close(r));
  return p;
}

function scryptHash(s: string): string {
  const salt = crypto.randomBytes(16);
  const h = crypto.scryptSync(s, salt, 32, { N: 16384, r: 8, p: 1 });
  return `scrypt$16384$8$1$${salt.toString('base64url')}$${h.toString('base64url')}`;
}

async function chunked<T>(items: T[], n: number, fn: (c: T[]) => Promise<unknown>): Promise<void> {
  for (let i = 0; i < items.length; i += n) await fn(items.slice(i, i + n));
}

const summarise = (profile: Profile) => summariseProfile(profile, (l) => console.error(l), { areas: 20, functions: 30 });

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-edge-ingest-'));
const PG_URL = process.env.LOCKER_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const pgSchema = values.engine === 'postgres' ? `ingest_${crypto.randomBytes(5).toString('hex')}` : undefined;
const pepper = crypto.randomBytes(32).toString('base64url');
const secret = generateTerminalSecret();
const mqttPort = await freePort();
const config = loadConfig({
  env: {},
  overrides: {
    database: { url: pgSchema ? PG_URL : path.join(dir, 'central.db'), sqliteSynchronous: 'FULL' },
    log: { level: values.log as 'silent' },
    mqtt: { mode: 'embedded', host: '127.0.0.1', port: mqttPort, terminalSecretPepper: pepper },
    environment: 'staging',
    http: { host: '127.0.0.1', port: 0, rateLimitPerMinute: 0, unauthenticatedRateLimitPerMinute: 0 },
  },
});
// --sql (PostgreSQL): the queries the service sends while the terminals publish (countPgQueries),
// per 1,000 acknowledged events
if (values.sql && !pgSchema) {
  console.error('--sql counts PostgreSQL queries: use it with --engine postgres');
  process.exit(2);
}
const pgQueries = values.sql ? countPgQueries() : null;
if (pgQueries) pgQueries.on = false;
const svc = new CentralService({ config, log: createLogger({ level: values.log as 'silent' }), pgSchema });
const ctx = await svc.start();
const k = ctx.db.kysely;
try {
  // ------------------------------------------------------------------ provisioning
  const t0 = Date.now();
  const now = toDbTime(new Date());
  await applyProvisioning(k, { pickupPoints: [], terminals: [], tenants: [{ clientId: 'bench', clientSecret: 'bench-secret-0123456789', name: 'Bench', mainAccount: { email: 'bench-dispatch@example.test', firstName: 'B', lastName: 'D' }, pickupPoints: [] }] } as never, ctx.clock);
  const tenant = await k.selectFrom('tenants').select('uid').where('client_id', '=', 'bench').executeTakeFirstOrThrow();
  const pups = Array.from({ length: N }, (_, i) => `ingest${String(i).padStart(26, '0')}`);
  const terminals = pups.map((_, i) => `ingest-t${i}`);
  const hash = scryptHash(secret);
  const key = terminalDigestKey({ pepper })!;
  await k.transaction().execute(async (trx) => {
    await chunked(pups, 500, (c) => trx.insertInto('pups').values(c.map((uid, i) => ({ uid, name: `Ingest ${i}`, time_zone: 'UTC', loc_street_name: 's', loc_mailbox: '', loc_city: 'c', loc_country_iso2: 'NL', loc_latitude: null, loc_longitude: null, delivery_address: null, parking_address: null, external_reference: null, overflow_pup_uid: null, created_at: now, updated_at: now }))).execute());
    await chunked(pups, 500, (c) => trx.insertInto('tenant_pups').values(c.map((pup_uid) => ({ tenant_uid: tenant.uid, pup_uid }))).execute());
    const lockers = pups.flatMap((pup, p) =>
      Array.from({ length: L }, (_, i) => ({ uid: crypto.createHash('md5').update(`ingest/${p}/${i}`).digest('hex'), pup_uid: pup, name: `L${i}`, width: 40, height: 20, length: 60, size_code: 'M', type_code: 'normal', bus: 'bus0', board_address: Math.floor(i / 16), lock_number: (i % 16) + 1, booked_shipment_uid: null, active: 1 as const, created_at: now, updated_at: now })),
    );
    await chunked(lockers, 1000, (c) => trx.insertInto('lockers').values(c).execute());
    const terminalRows = terminals.map((id, i) => ({ id, pup_uid: pups[i]!, secret_hash: hash, secret_fast: terminalSecretDigest(key, id, hash, secret), name: null, created_at: now, updated_at: now }));
    await chunked(terminalRows, 500, (c) => trx.insertInto('terminals').values(c).execute());
  });
  const user = newUid();
  await k.insertInto('accounts').values({ uid: user, user_name: 'ingest@example.test', user_name_key: 'ingest@example.test', email_address: 'ingest@example.test', email_key: 'ingest@example.test', first_name: 'B', last_name: 'U', main_pup_uid: pups[0]!, created_at: now, updated_at: now }).execute();
  await k.insertInto('account_pups').values({ account_uid: user, pup_uid: pups[0]! }).execute();

  // ------------------------------------------------------------------ bookings through the API
  const base = await svc.listen();
  const headers = { 'content-type': 'application/json', authorization: `Bearer ${ctx.tokens.issue(tenant.uid).token}` };
  const jobs = pups.flatMap((p) => Array.from({ length: L }, () => p));
  let next = 0;
  let failed = 0;
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      while (next < jobs.length) {
        const p = jobs[next++]!;
        const r = await fetch(`${base}/v1/Logistics/CreateLocalShipment`, { method: 'POST', headers, body: JSON.stringify({ ToUserUid: user, PupUid: p, Dimension: { width: 30, height: 8, length: 50 }, AllowLargerLockers: true, AllowOverflowLockers: false, ReferenceNo: 'ingest' }) });
        const body = (await r.json()) as { success?: boolean };
        if (!r.ok || !body.success) failed++;
      }
    }),
  );
  if (failed) throw new Error(`${failed} bookings failed`);
  const codes = await k
    .selectFrom('access_codes as c')
    .innerJoin('shipments as s', 's.uid', 'c.shipment_uid')
    .innerJoin('lockers as l', 'l.uid', 's.locker_uid')
    .select(['c.uid', 'c.usage', 'c.type', 's.uid as shipment', 's.pup_uid', 'l.uid as locker', 'l.bus', 'l.board_address', 'l.lock_number'])
    .where('c.valid', '=', 1)
    .where('c.type', '=', 'Qr')
    .where('c.usage', 'in', ['DropOff', 'PickUp'])
    .execute();
  const byShipment = new Map<string, { pup: string; locker: string; bus: string; board: number; lock: number; dropOff?: string; pickUp?: string }>();
  for (const c of codes) {
    const s = byShipment.get(c.shipment) ?? { pup: c.pup_uid, locker: c.locker, bus: c.bus ?? 'bus0', board: Number(c.board_address), lock: Number(c.lock_number) };
    if (c.usage === 'DropOff') s.dropOff = c.uid;
    else s.pickUp = c.uid;
    byShipment.set(c.shipment, s);
  }
  const plan: Record<string, { shipment: string; locker: string; bus: string; board: number; lock: number; dropOff: string; pickUp: string }[]> = {};
  const pupTerminal = new Map(pups.map((p, i) => [p, terminals[i]!]));
  for (const [shipment, s] of byShipment) (plan[pupTerminal.get(s.pup)!] ??= []).push({ shipment, locker: s.locker, bus: s.bus, board: s.board, lock: s.lock, dropOff: s.dropOff!, pickUp: s.pickUp! });
  const planFile = path.join(dir, 'plan.json');
  fs.writeFileSync(planFile, JSON.stringify({ url: `mqtt://127.0.0.1:${mqttPort}`, secret, window: WINDOW, seconds: Number(values.seconds), terminals: plan }));
  console.error(`set up ${N} terminals, ${byShipment.size} shipments in ${((Date.now() - t0) / 1000).toFixed(1)} s`);

  // ------------------------------------------------------------------ the load
  const load = spawn(process.execPath, [path.join(here, 'edge-ingest-load.mjs'), planFile], { stdio: ['ignore', 'pipe', 'inherit'] });
  let buf = '';
  let last: Record<string, number> = {};
  let cpu0: NodeJS.CpuUsage | null = null;
  let elu0: ReturnType<typeof performance.eventLoopUtilization> | null = null;
  let wall0 = 0;
  let session: inspector.Session | null = null;
  const samples: { t: number; acked: number; cpu: number }[] = [];
  const done = new Promise<void>((resolve) => load.on('exit', () => resolve()));
  load.stdout!.on('data', (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      const m = JSON.parse(line) as Record<string, number | string>;
      if (m.phase === 'connected') {
        cpu0 = process.cpuUsage();
        if (pgQueries) pgQueries.on = true;
        elu0 = performance.eventLoopUtilization();
        wall0 = performance.now();
        if (values.profile) {
          session = new inspector.Session();
          session.connect();
          void session.post('Profiler.enable').then(() => session!.post('Profiler.setSamplingInterval', { interval: 200 })).then(() => session!.post('Profiler.start'));
        }
        console.error(`all ${N} terminals connected; publishing`);
        continue;
      }
      last = m as Record<string, number>;
      if (cpu0) {
        const c = process.cpuUsage(cpu0);
        samples.push({ t: performance.now() - wall0, acked: Number(m.acked), cpu: (c.user + c.system) / 1000 });
      }
      if (!m.done) console.error(`${(Number(m.t) / 1000).toFixed(0)} s: acked ${m.acked} (${m.rate}/s), sent ${m.sent}, resends asked ${m.resendAsked}`);
    }
  });
  await done;
  if (pgQueries) pgQueries.on = false;
  const cpu = process.cpuUsage(cpu0 ?? undefined);
  const elu = performance.eventLoopUtilization(elu0 ?? undefined);
  const wallMs = performance.now() - wall0;
  if (session) {
    const s = session as inspector.Session;
    const { profile } = (await s.post('Profiler.stop')) as unknown as { profile: Profile };
    s.disconnect();
    fs.writeFileSync(values.profile!, JSON.stringify(profile));
    summarise(profile);
  }
  // steady middle: between 20 % and 80 % of the acknowledged events
  const total = Number(last.acked);
  const a = samples.find((s) => s.acked >= total * 0.2);
  const b = samples.find((s) => s.acked >= total * 0.8);
  const steady = a && b && b.t > a.t ? { rate: ((b.acked - a.acked) * 1000) / (b.t - a.t), cores: (b.cpu - a.cpu) / (b.t - a.t) } : null;

  // ------------------------------------------------------------------ verification
  // what was stored when the load stopped is still being applied: wait until nothing is left, or
  // nothing moved for 5 s (at most 120 s)
  for (let i = 0, left = -1, still = 0; i < 240 && still < 10; i++) {
    const n = Number((await k.selectFrom('edge_events').select((eb) => eb.fn.countAll<number>().as('n')).where('processed', '=', 0).executeTakeFirst())?.n ?? 0);
    if (n === 0) break;
    still = n === left ? still + 1 : 0;
    left = n;
    await new Promise((r) => setTimeout(r, 500));
  }
  const ev = await k.selectFrom('edge_events').select(['type', 'processed', 'outcome']).execute();
  const dup = await k.selectFrom('edge_events').select(['terminal_id', 'journal_id', 'seq']).select((eb) => eb.fn.countAll<number>().as('n')).groupBy(['terminal_id', 'journal_id', 'seq']).having((eb) => eb.fn.countAll(), '>', 1).execute();
  const term = await k.selectFrom('edge_terminals').select(['terminal_id', 'applied_seq']).execute();
  const ackedBy = (last.ackedBy ?? {}) as unknown as Record<string, number>;
  const cursorMismatch = term.filter((t) => Number(t.applied_seq ?? 0) < (ackedBy[t.terminal_id] ?? 0)).length;
  const unprocessed = ev.filter((e) => !e.processed).length;
  const moves = ev.filter((e) => e.type === 'dropOff' || e.type === 'pickUp');
  const notApplied = moves.filter((e) => !String(e.outcome).includes(':applied:')).length;
  const states = await k.selectFrom('shipments').select('state_code').select((eb) => eb.fn.countAll<number>().as('n')).groupBy('state_code').execute();
  const result = {
    terminals: N,
    shipments: byShipment.size,
    window: WINDOW,
    acked: total,
    sent: last.sent,
    wallS: +(wallMs / 1000).toFixed(1),
    eventsPerS: Math.round((total * 1000) / Number(last.lastAckMs || wallMs)),
    steadyEventsPerS: steady ? Math.round(steady.rate) : null,
    centralCores: +((cpu.user + cpu.system) / 1000 / wallMs).toFixed(2),
    steadyCentralCores: steady ? +steady.cores.toFixed(2) : null,
    eventLoopUtilisation: +elu.utilization.toFixed(2),
    stored: ev.length,
    unprocessed,
    duplicatesBySeq: dup.length,
    cursorBehindAck: cursorMismatch,
    transitionsStored: moves.length,
    transitionsNotApplied: notApplied,
    shipmentStates: Object.fromEntries(states.map((s) => [s.state_code, Number(s.n)])),
    ingest: (ctx.workers.find((w) => w.name === 'edge-sync') as unknown as { ingest?: { stats: unknown } } | undefined)?.ingest?.stats ?? null,
  };
  console.log(JSON.stringify(result));
  if (pgQueries) {
    const all = [...pgQueries.counts.values()].reduce((a, b) => a + b, 0);
    console.error(`\nqueries sent while publishing: ${all} (${((all * 1000) / Math.max(1, total)).toFixed(0)} per 1,000 acknowledged events; those still being applied included)`);
    for (const [text, n] of [...pgQueries.counts].sort((x, y) => y[1] - x[1]).slice(0, 25)) console.error(`${((n * 1000) / Math.max(1, total)).toFixed(0).padStart(6)}   ${text.replace(/\s+/g, ' ').slice(0, 150)}`);
  }
  const ok = ev.length >= total && unprocessed === 0 && dup.length === 0 && cursorMismatch === 0 && notApplied === 0;
  console.error(ok ? 'verified: every acknowledged event stored and applied once, in order' : 'VERIFICATION FAILED');
  if (!ok) process.exitCode = 1;
} finally {
  await svc.stop();
  fs.rmSync(dir, { recursive: true, force: true });
  await dropPgSchema(PG_URL, pgSchema);
}
