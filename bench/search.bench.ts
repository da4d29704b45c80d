// The cost of the worst search a tenant may send (issue 12, item 4): GetAccounts and
// GetAccountSuggestions with the largest inputs the request schemas allow, over a tenant with many
// accounts (BENCH_SEARCH_ACCOUNTS, default 20,000, a third of them with 100-character names of one
// repeated letter, the worst rows for a LIKE), on SQLite and, when reachable, PostgreSQL.
//
// 1. Per request, one at a time: wall time and the CPU time of this process (the service runs in
//    this process: on SQLite that includes the query; on PostgreSQL the query runs in the server,
//    so its wall time is the figure to read).
// 2. The attack of the issue: 4 connections sending the worst search without pause (autocannon in
//    a separate process), while 1 connection measures GET /health: its p50/p99 is what every other
//    client gets meanwhile.
//
// The worst input is what the schema allows (src/accounts/search.ts): SEARCH_LIMITS.maxWords words
// in fullName, each a different one-letter word that matches every row, and every other filter at
// its maximum length.
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { CentralService } from '../packages/central/src/service';
import { loadConfig } from '../packages/central/src/config';
import { createLogger } from '../packages/central/src/logger';
import { applyProvisioning, parseProvisioning, readProvisioningFile } from '../packages/central/src/provisioning/apply';
import { systemClock } from '../packages/central/src/clock';
import { DEMO_SITE } from '../packages/central/src/cli';
import { SEARCH_LIMITS } from '../packages/central/src/accounts/search';
import { load, reachable, type Load } from './support';

const PG_URL = process.env.LOCKER_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const ACCOUNTS = Number(process.env.BENCH_SEARCH_ACCOUNTS ?? 20_000);
const SEQUENTIAL = 20;
const DURATION_S = Number(process.env.BENCH_SEARCH_SECONDS ?? 5);

const letters = 'abcdefghijklmnopqrstuvwxyz';
const word = (n: number, c: string) => c.repeat(n);

/** The worst inputs the schemas allow (and, for comparison, the input of the issue). */
function inputs(pupUid: string): { name: string; path: string; body: unknown }[] {
  const L = SEARCH_LIMITS;
  // one-letter words that (almost) every row holds ("Firstn Lastn" and the long names of 'a'), none
  // inside another, so none is dropped: every word is tested on every row
  const oneLetterWords = ['a', 's', 't', 'r', 'i', 'f', 'l'].slice(0, L.maxWords).join(' ');
  // words as long as the limits allow that almost match the long names (aaaa...ab): the most
  // comparisons a LIKE '%...%' makes per row
  const longWords = Array.from({ length: L.maxWords }, () => word(Math.floor((L.maxLength - L.maxWords) / L.maxWords) - 1, 'a') + 'b').join(' ');
  return [
    { name: `GetAccounts fullName: ${L.maxWords} one-letter words matching most rows`, path: '/v1/Account/GetAccounts', body: { pageNo: 1, pageSize: 500, fullName: oneLetterWords } },
    { name: `GetAccounts fullName: ${L.maxWords} near-miss words of ${L.maxLength} characters in all`, path: '/v1/Account/GetAccounts', body: { pageNo: 1, pageSize: 500, fullName: longWords } },
    {
      name: 'GetAccounts every filter at its longest',
      path: '/v1/Account/GetAccounts',
      body: {
        pageNo: 1, pageSize: 500, fullName: longWords, userName: word(L.maxLength - 1, 'a') + 'b', emailAddress: word(L.maxLength - 1, 'a') + 'b', phoneNumber: '+' + '1'.repeat(L.maxPhoneLength - 1), pupUid,
        includeAddress: true, includeLanguage: true, includeMailCode: true, includePhone: true,
      },
    },
    { name: 'GetAccounts fullName: 1 letter, last page', path: '/v1/Account/GetAccounts', body: { pageNo: Math.ceil(ACCOUNTS / 500), pageSize: 500, fullName: 'a' } },
    // SQLite reads a page of the second half from the end (accounts/service.ts), so the deepest
    // walk is the middle page
    { name: 'GetAccounts fullName: 1 letter, middle page', path: '/v1/Account/GetAccounts', body: { pageNo: Math.ceil(ACCOUNTS / 500 / 2), pageSize: 500, fullName: 'a' } },
    { name: `GetAccountSuggestions searchText: ${L.maxWords} near-miss words`, path: '/v1/Account/GetAccountSuggestions', body: { pageNo: 1, pageSize: 500, searchText: longWords } },
  ];
}

interface Row {
  engine: string;
  name: string;
  status: string;
  wallMs: number;
  maxWallMs: number;
  cpuMs: number;
}

async function seed(ctx: Awaited<ReturnType<CentralService['start']>>, pupUids: string[]): Promise<void> {
  const now = new Date().toISOString();
  const db = ctx.db.kysely;
  const batch = 500;
  for (let i = 0; i < ACCOUNTS; i += batch) {
    const accounts = [];
    const links = [];
    for (let j = i; j < Math.min(ACCOUNTS, i + batch); j++) {
      const uid = crypto.randomBytes(16).toString('hex');
      const long = j % 3 === 0;
      const first = long ? word(100, 'a') : `First${j}`;
      const last = long ? word(100, 'a') : `Last${letters[j % 26]}${j}`;
      const email = long ? `${word(200, 'a')}${j}@example.test` : `person${j}@example.test`;
      accounts.push({
        uid, user_name: email, user_name_key: email.toLowerCase(), email_address: email, email_key: email.toLowerCase(), first_name: first, last_name: last,
        phone_number: `+3161${String(j).padStart(7, '0')}`, main_pup_uid: pupUids[j % pupUids.length]!, mail_code: `BEN-${j}`, language_code: 'nl',
        street_name: null, street_no: null, mailbox: null, city: null, country_code: null, created_at: now, updated_at: now,
      });
      links.push({ account_uid: uid, pup_uid: pupUids[j % pupUids.length]! });
    }
    await db.insertInto('accounts').values(accounts as never).execute();
    await db.insertInto('account_pups').values(links).execute();
  }
}

async function measureEngine(engine: 'sqlite' | 'postgres'): Promise<{ rows: Row[]; attack: { search: Load; health: Load; idle: Load } }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-bench-search-'));
  const pgSchema = engine === 'postgres' ? `bench_${crypto.randomBytes(5).toString('hex')}` : undefined;
  const config = loadConfig({
    env: {},
    overrides: { database: { url: engine === 'sqlite' ? path.join(dir, 'bench.db') : PG_URL }, http: { host: '127.0.0.1', port: 0 }, log: { level: 'silent' }, mqtt: { mode: 'off' }, environment: 'staging' },
  });
  const svc = new CentralService({ config, log: createLogger({ level: 'silent' }), pgSchema, startWorkers: false });
  const ctx = await svc.start();
  try {
    const site = parseProvisioning(readProvisioningFile(DEMO_SITE));
    await applyProvisioning(ctx.db.kysely, site, systemClock);
    const tenant = site.tenants[0]!;
    await seed(ctx, tenant.pickupPoints);
    if (engine === 'postgres') await ctx.db.kysely.executeQuery({ sql: 'ANALYZE', parameters: [], query: { kind: 'RawNode' } as never } as never).catch(() => undefined);
    const base = await svc.listen();
    const tokRes = await fetch(`${base}/connect/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ grant_type: 'client_credentials', client_id: tenant.clientId, client_secret: tenant.clientSecret, scope: 'integration_api' }),
    });
    const token = ((await tokRes.json()) as { access_token: string }).access_token;
    const headers = { 'content-type': 'application/json', authorization: `Bearer ${token}` };
    const rows: Row[] = [];
    const all = inputs(tenant.pickupPoints[0]!);
    for (const inp of all) {
      const body = JSON.stringify(inp.body);
      const send = async () => {
        const r = await fetch(`${base}${inp.path}`, { method: 'POST', headers, body });
        const j = (await r.json()) as { success: boolean; error: string | null; totalItems?: number };
        return `${r.status} ${j.success ? `ok, ${j.totalItems} found` : j.error}`;
      };
      let status = await send(); // warm up
      const walls: number[] = [];
      const cpu0 = process.cpuUsage();
      for (let i = 0; i < SEQUENTIAL; i++) {
        const t0 = performance.now();
        status = await send();
        walls.push(performance.now() - t0);
      }
      const cpu = process.cpuUsage(cpu0);
      walls.sort((a, b) => a - b);
      rows.push({ engine, name: inp.name, status, wallMs: walls[Math.floor(walls.length / 2)]!, maxWallMs: walls[walls.length - 1]!, cpuMs: (cpu.user + cpu.system) / 1000 / SEQUENTIAL });
    }
    // the attack: 4 connections of the worst search, health measured alongside
    const worst = all[0]!;
    const idle = await load({ url: base, connections: 1, duration: 2, headers: {}, requests: [{ method: 'GET', path: '/health' }] });
    const [search, health] = await Promise.all([
      load({ url: base, connections: 4, duration: DURATION_S, headers, requests: [{ method: 'POST', path: worst.path, body: JSON.stringify(worst.body) }] }),
      load({ url: base, connections: 1, duration: DURATION_S, headers: {}, requests: [{ method: 'GET', path: '/health' }] }),
    ]);
    return { rows, attack: { search, health, idle } };
  } finally {
    await svc.stop();
    fs.rmSync(dir, { recursive: true, force: true });
    if (pgSchema) {
      const c = new pg.Client({ connectionString: PG_URL });
      await c.connect();
      await c.query(`DROP SCHEMA IF EXISTS ${pgSchema} CASCADE`);
      await c.end();
    }
  }
}

const f1 = (n: number) => n.toFixed(1);

export default async function searchBench(): Promise<{ title: string; markdown: string }> {
  const engines: ('sqlite' | 'postgres')[] = ['sqlite'];
  const pgUrl = new URL(PG_URL);
  const pgOk = await reachable(pgUrl.hostname, Number(pgUrl.port || 5432));
  if (pgOk && process.env.BENCH_SEARCH_ENGINES !== 'sqlite') engines.push('postgres');
  const lines = [
    `${ACCOUNTS.toLocaleString('en-US')} accounts of one tenant (a third with 100-letter names of one letter), pageSize 500; ${SEQUENTIAL} requests one at a time over loopback HTTP per row. ` +
      'CPU = CPU time of the service process per request (on PostgreSQL the query itself runs in the database server, read the wall time).',
    '',
    '| store | worst input | answer | wall p50 ms | wall max ms | service CPU ms per request |',
    '|---|---|---|---:|---:|---:|',
  ];
  const attacks: string[] = [
    '',
    'The attack of issue 12: 4 connections sending the first input without pause (autocannon in a separate process) while 1 connection polls `GET /health`.',
    '',
    '| store | health alone p50 / p99 ms | health during the attack p50 / p99 ms | worst search p50 / p99 ms | searches/s |',
    '|---|---:|---:|---:|---:|',
  ];
  for (const e of engines) {
    const r = await measureEngine(e);
    const store = e === 'sqlite' ? 'SQLite' : 'PostgreSQL';
    for (const row of r.rows) lines.push(`| ${store} | ${row.name} | ${row.status} | ${f1(row.wallMs)} | ${f1(row.maxWallMs)} | ${f1(row.cpuMs)} |`);
    const a = r.attack;
    attacks.push(`| ${store} | ${a.idle.p50} / ${a.idle.p99} | ${a.health.p50} / ${a.health.p99} | ${a.search.p50} / ${a.search.p99} | ${Math.round(a.search.rps)} |`);
  }
  if (!pgOk) attacks.push('', `PostgreSQL not reachable at ${pgUrl.host}: only SQLite measured.`);
  return { title: 'Worst allowed searches (GetAccounts, GetAccountSuggestions): cost per request', markdown: [...lines, ...attacks].join('\n') };
}
