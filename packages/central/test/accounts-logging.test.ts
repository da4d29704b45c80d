// No personal data in logs: runs the account calls against a service whose pino output is
// captured at trace level and asserts that no e-mail address, phone number or name appears.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import crypto from 'node:crypto';
import { Writable } from 'node:stream';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { loadConfig } from '../src/config';
import { CentralService } from '../src/service';
import { ManualClock } from '../src/clock';
import { createLogger } from '../src/logger';
import { applyProvisioning } from '../src/provisioning/apply';
import { describeEngines, pgUrl, type EngineName } from './support/harness';
import { PUP_A1, PUP_A2, TENANT_A, testSite } from './support/fixtures';

const PERSONAL = {
  email: 'Marieke.Personal@example.test',
  email2: 'marieke.second@example.test',
  email3: 'race.condition@example.test',
  phone: '+31 6 8765 4321',
  phoneNorm: '+31687654321',
  phone2: '0032470998877',
  phone2Norm: '+32470998877',
  first: 'Marieke',
  last: 'Zwanenburg',
  first2: 'Geertruida',
  last2: 'Oosterhuis',
  suggestion: 'suggested.person@example.test',
  suggestionName: 'Wilhelmina',
  street: 'Keizersgracht',
};

async function start(engine: EngineName, sink: string[]) {
  const clock = new ManualClock('2026-03-01T10:00:00.000Z');
  let dbUrl: string;
  let pgSchema: string | undefined;
  let cleanup: () => Promise<void>;
  if (engine === 'sqlite') {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-logtest-'));
    dbUrl = path.join(dir, 'central.db');
    cleanup = async () => fs.rmSync(dir, { recursive: true, force: true });
  } else {
    const url = pgUrl()!;
    dbUrl = url;
    pgSchema = `t_${crypto.randomBytes(6).toString('hex')}`;
    cleanup = async () => {
      const c = new pg.Client({ connectionString: url });
      await c.connect();
      await c.query(`DROP SCHEMA IF EXISTS ${pgSchema} CASCADE`);
      await c.end();
    };
  }
  const config = loadConfig({ env: {}, overrides: { database: { url: dbUrl, poolSize: 5 }, log: { level: 'trace' }, mqtt: { mode: 'off' }, environment: 'staging' } });
  const destination = new Writable({
    write(chunk, _enc, cb) {
      sink.push(chunk.toString());
      cb();
    },
  });
  const log = createLogger({ level: 'trace', destination });
  const svc = new CentralService({ config, clock, log, pgSchema, startWorkers: false });
  const ctx = await svc.start();
  await applyProvisioning(ctx.db.kysely, testSite(), clock);
  return { svc, ctx, cleanup };
}

describeEngines('no personal data in logs (accounts)', (engine) => {
  const lines: string[] = [];
  let s: Awaited<ReturnType<typeof start>>;
  let token: string;
  const post = async (url: string, body: unknown) => {
    const res = await s.svc.app.inject({ method: 'POST', url, payload: JSON.stringify(body), headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` } });
    return { status: res.statusCode, body: res.json() };
  };

  beforeAll(async () => {
    s = await start(engine, lines);
    const res = await s.svc.app.inject({
      method: 'POST',
      url: '/connect/token',
      payload: new URLSearchParams({ grant_type: 'client_credentials', client_id: TENANT_A.clientId, client_secret: TENANT_A.clientSecret, scope: 'integration_api' }).toString(),
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    token = res.json().access_token;
  });
  afterAll(async () => {
    await s?.svc.stop();
    await s?.cleanup();
  });

  it('logs account ids and outcomes but never e-mail addresses, phone numbers or names', async () => {
    const created = await post('/v1/Account/CreateAccount', {
      emailAddress: PERSONAL.email, firstName: PERSONAL.first, lastName: PERSONAL.last, phoneNumber: PERSONAL.phone, pickUpPointUid: PUP_A1,
      streetName: PERSONAL.street, streetNo: '1', mailbox: '', city: 'Amsterdam', countryCode: 'NL',
    });
    expect(created.body.success).toBe(true);
    const uid = created.body.userUid as string;
    expect((await post('/v1/Account/CreateAccount', { emailAddress: PERSONAL.email, firstName: PERSONAL.first, lastName: PERSONAL.last, pickUpPointUid: PUP_A1 })).body.error).toBe('EmailAlreadyRegistered');
    expect((await post('/v1/Account/CreateAccount', { emailAddress: 'not valid ' + PERSONAL.email, firstName: PERSONAL.first, lastName: PERSONAL.last, pickUpPointUid: PUP_A1 })).body.error).toBe('InvalidRequest');
    expect((await post('/v1/Account/CreateOrGetAccount', { emailAddress: PERSONAL.email, firstName: PERSONAL.first, lastName: PERSONAL.last, pickUpPointUid: PUP_A1 })).body.isExisting).toBe(true);
    expect((await post('/v1/Account/SetAccountDetails', { userUid: uid, emailAddress: PERSONAL.email2, phoneNumber: PERSONAL.phone2, firstName: PERSONAL.first2, lastName: PERSONAL.last2 })).body.success).toBe(true);
    expect((await post('/v1/Account/SetAccountPickUpPoint', { userUid: uid, pickUpPointUid: PUP_A2 })).body.success).toBe(true);
    expect((await post('/v1/Account/GetAccounts', { pageNo: 1, pageSize: 10, fullName: PERSONAL.last2, phoneNumber: PERSONAL.phone2, includePhone: true })).body.totalItems).toBe(1);
    expect((await post('/v1/Account/GetAccount', { emailAddress: PERSONAL.email2 })).body.userUid).toBe(uid);
    // Concurrent creates of one address: the unique index decides, never a 500 with the value in an error log.
    const race = await Promise.all(
      Array.from({ length: 4 }, () => post('/v1/Account/CreateAccount', { emailAddress: PERSONAL.email3, firstName: PERSONAL.first, lastName: PERSONAL.last, pickUpPointUid: PUP_A1 })),
    );
    expect(race.filter((r) => r.body.success)).toHaveLength(1);
    expect(race.filter((r) => !r.body.success).map((r) => r.body.error)).toEqual(['EmailAlreadyRegistered', 'EmailAlreadyRegistered', 'EmailAlreadyRegistered']);
    // An upload with a personal row and an erroneous one.
    const boundary = 'xyzBOUNDARYxyz';
    const csvText = `EmailAddress;PhoneNumber;LanguageCode;FirstName;LastName;Remarks;PickUpPoint\r\n${PERSONAL.suggestion};${PERSONAL.phone};nl;${PERSONAL.suggestionName};${PERSONAL.last};;\r\nbroken-${PERSONAL.suggestion.replace('@', '')};0612;;;;;\r\n`;
    const payload =
      `--${boundary}\r\nContent-Disposition: form-data; name="data"\r\n\r\n{"reference":"r"}\r\n` +
      `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="people.csv"\r\nContent-Type: text/csv\r\n\r\n${csvText}\r\n--${boundary}--\r\n`;
    const up = await s.svc.app.inject({ method: 'POST', url: '/v1/Account/UploadAccountSuggestions', payload, headers: { 'content-type': `multipart/form-data; boundary=${boundary}`, authorization: `Bearer ${token}` } });
    expect(up.json()).toMatchObject({ success: true, importedCount: 1, errorCount: 1 });
    expect((await post('/v1/Account/GetAccountSuggestions', { pageNo: 1, pageSize: 10, searchText: PERSONAL.suggestionName })).body.totalItems).toBe(1);
    expect((await post('/v1/Account/RemoveAccount', { userUid: uid })).body.success).toBe(true);

    const text = lines.join('');
    // The capture works and the area logs what happened (by id).
    expect(text).toContain('"ns":"central.accounts"');
    expect(text).toContain(`"userUid":"${uid}"`);
    expect(text).toContain('account created');
    expect(text).toContain('account removed');
    expect(text).toContain('account suggestions uploaded');
    expect(text).toContain('"status":400');
    const lower = text.toLowerCase();
    for (const [k, v] of Object.entries(PERSONAL)) {
      expect(lower.includes(v.toLowerCase()), `${k} appears in the log`).toBe(false);
    }
    for (const part of ['marieke', 'zwanenburg', 'oosterhuis', '687654321', '470998877', 'example.test']) {
      expect(lower.includes(part), `${part} appears in the log`).toBe(false);
    }
  });
});
