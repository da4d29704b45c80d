import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { stringify as toYaml } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { PUP_A1, PUP_A2, PUP_B1, TENANT_A, UNKNOWN_UID, testSite } from './support/fixtures';
import { parseProvisioning, ProvisioningError, readProvisioningFile } from '../src/provisioning/apply';
import type { ProvisioningInput } from '../src/provisioning/schema';
import { DEMO_SITE } from '../src/cli';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-prov-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

const TABLES = ['pups', 'lockers', 'tenants', 'terminals', 'accounts'] as const;

async function snapshot(t: TestService) {
  const out: Record<string, unknown[]> = {};
  for (const table of TABLES) out[table] = await t.ctx.db.kysely.selectFrom(table).selectAll().orderBy(table === 'terminals' ? 'id' : 'uid').execute();
  out.tenant_pups = await t.ctx.db.kysely.selectFrom('tenant_pups').selectAll().orderBy('tenant_uid').orderBy('pup_uid').execute();
  return out;
}

async function provisioningError(p: Promise<unknown>): Promise<ProvisioningError> {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(ProvisioningError);
    return e as ProvisioningError;
  }
  throw new Error('expected a ProvisioningError');
}

function tokenRequest(t: TestService, clientId: string, secret: string) {
  return t.app.inject({
    method: 'POST',
    url: '/connect/token',
    payload: new URLSearchParams({ grant_type: 'client_credentials', client_id: clientId, client_secret: secret, scope: 'integration_api' }).toString(),
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
  });
}

describeEngines('provisioning', (engine) => {
  let t: TestService;
  beforeAll(async () => {
    t = await createTestService(engine, { site: null });
  });
  afterAll(async () => t?.close());

  it('applies the test site: every PUP, locker, tenant, dispatcher account and terminal created', async () => {
    const r = await t.provision(testSite());
    // 3 PUPs + 12 lockers + 2 dispatcher accounts + 2 tenants + 2 terminals
    expect(r.created).toBe(21);
    expect(r.changes.filter((c) => c.startsWith('created locker'))).toHaveLength(12);
    const lockers = await t.ctx.db.kysely.selectFrom('lockers').select(['uid', 'booked_shipment_uid', 'active']).execute();
    expect(lockers).toHaveLength(12);
    expect(lockers.every((l) => l.booked_shipment_uid === null && Number(l.active) === 1)).toBe(true);
    const links = await t.ctx.db.kysely.selectFrom('tenant_pups').innerJoin('tenants', 'tenants.uid', 'tenant_pups.tenant_uid').select(['client_id', 'pup_uid']).execute();
    expect(links.filter((l) => l.client_id === 'tenant-a').map((l) => l.pup_uid).sort()).toEqual([PUP_A1, PUP_A2].sort());
    expect(links.filter((l) => l.client_id === 'tenant-b').map((l) => l.pup_uid)).toEqual([PUP_B1]);
    expect((await tokenRequest(t, TENANT_A.clientId, TENANT_A.clientSecret)).statusCode).toBe(200);
  });

  it('applying the same file again changes nothing: 0 created, 0 updated, updated_at untouched', async () => {
    const before = await snapshot(t);
    t.clock.advance(3_600_000);
    const r = await t.provision(testSite());
    expect({ created: r.created, updated: r.updated, changes: r.changes }).toEqual({ created: 0, updated: 0, changes: [] });
    expect(r.unchanged).toBe(21);
    expect(await snapshot(t)).toEqual(before);
  });

  it('a changed file updates exactly what changed (locker dimension, PUP name)', async () => {
    const before = await snapshot(t);
    t.clock.advance(60_000);
    const site = testSite();
    site.pickupPoints![0]!.lockers![2]!.dimension = { width: 41, height: 22, length: 61 };
    site.pickupPoints![1]!.name = 'Alpha Harbour North';
    const r = await t.provision(site);
    expect(r.created).toBe(0);
    expect(r.updated).toBe(2);
    expect(r.changes).toEqual(expect.arrayContaining([expect.stringContaining(`locker ${PUP_A1}/A1-03`), expect.stringContaining(`pick up point ${PUP_A2}`)]));
    const after = await snapshot(t);
    const now = t.clock.now().toISOString();
    const changedLocker = (after.lockers as any[]).find((l) => l.name === 'A1-03');
    expect(changedLocker).toMatchObject({ width: 41, height: 22, length: 61, updated_at: now });
    expect((after.pups as any[]).find((p) => p.uid === PUP_A2)).toMatchObject({ name: 'Alpha Harbour North', updated_at: now });
    // everything else is byte-for-byte the same
    const others = (rows: any[], skip: (r: any) => boolean) => rows.filter((x) => !skip(x));
    expect(others(after.lockers as any[], (l) => l.name === 'A1-03')).toEqual(others(before.lockers as any[], (l) => l.name === 'A1-03'));
    expect(others(after.pups as any[], (p) => p.uid === PUP_A2)).toEqual(others(before.pups as any[], (p) => p.uid === PUP_A2));
    for (const table of ['tenants', 'terminals', 'accounts', 'tenant_pups']) expect(after[table]).toEqual(before[table]);
    await t.provision(testSite());
  });

  it('inService: false takes a locker out of service (not listed as available, not bookable, not counted); true puts it back', async () => {
    const token = (await tokenRequest(t, TENANT_A.clientId, TENANT_A.clientSecret)).json().access_token as string;
    const uid = 'a1000000000000000000000000000001'; // A1-01
    const available = async () => ((await t.post('/v1/PickupPoints/GetAvailableLockers', { pageNo: 1, pageSize: 500, pupUid: PUP_A1 }, token)).body.items as { lockerUid: string }[]).map((l) => l.lockerUid);
    const counts = async () => {
      const b = (await t.post('/v1/PickupPoints/GetPickUpPointAvailability', { pageNo: 1, pageSize: 10, pupUid: PUP_A1 }, token)).body.items[0];
      return { free: b.freeLockers, occupied: b.occupiedLockers, total: b.totalLockers };
    };
    const before = await counts();
    expect(await available()).toContain(uid);
    const site = testSite();
    site.pickupPoints![0]!.lockers![0]!.inService = false;
    const r = await t.provision(site);
    expect({ created: r.created, updated: r.updated }).toEqual({ created: 0, updated: 1 });
    expect(r.changes).toEqual([expect.stringMatching(/updated locker .*A1-01 \(active\)/)]);
    expect(await available()).not.toContain(uid);
    expect(await counts()).toEqual({ free: before.free - 1, occupied: before.occupied, total: before.total - 1 });
    const someone = await t.ctx.db.kysely.selectFrom('account_pups').select('account_uid').where('pup_uid', '=', PUP_A1).executeTakeFirstOrThrow();
    const booking = await t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: someone.account_uid, PupUid: PUP_A1, LockerUid: uid, Dimension: { width: 5, height: 5, length: 5 }, AllowLargerLockers: true, AllowOverflowLockers: false }, token);
    expect(booking.body, JSON.stringify(booking.body)).toMatchObject({ success: false, error: 'NoLockerAvailable' });
    expect((await t.provision(site)).updated).toBe(0);
    expect((await t.provision(testSite())).updated).toBe(1);
    expect(await available()).toContain(uid);
    expect(await counts()).toEqual(before);
  });

  it('a new tenant secret: the old one no longer gets a token, the new one does; the stored hash changes', async () => {
    const oldHash = (await t.ctx.db.kysely.selectFrom('tenants').select('secret_hash').where('client_id', '=', 'tenant-a').executeTakeFirstOrThrow()).secret_hash;
    const site = testSite();
    site.tenants![0]!.clientSecret = 'rotated-secret-a-9876543210';
    const r = await t.provision(site);
    expect(r.updated).toBe(1);
    expect(r.changes).toEqual([expect.stringMatching(/updated tenant tenant-a \(secret\)/)]);
    expect(r.changes.join(' ')).not.toContain('rotated-secret');
    const old = await tokenRequest(t, 'tenant-a', TENANT_A.clientSecret);
    expect(old.statusCode).toBe(401);
    expect(old.json().error).toBe('invalid_client');
    expect((await tokenRequest(t, 'tenant-a', 'rotated-secret-a-9876543210')).statusCode).toBe(200);
    const row = await t.ctx.db.kysely.selectFrom('tenants').select('secret_hash').where('client_id', '=', 'tenant-a').executeTakeFirstOrThrow();
    expect(row.secret_hash).not.toBe(oldHash);
    expect(row.secret_hash).not.toContain('rotated-secret');
    // the same rotated file again: nothing changes (the secret is verified, not re-hashed)
    const again = await t.provision(site);
    expect({ created: again.created, updated: again.updated }).toEqual({ created: 0, updated: 0 });
    await t.provision(testSite());
    expect((await tokenRequest(t, 'tenant-a', TENANT_A.clientSecret)).statusCode).toBe(200);
  });

  it('never deletes: a locker or PUP missing from the file stays; only tenant-PUP assignments follow the file', async () => {
    const site = testSite();
    site.pickupPoints![0]!.lockers = site.pickupPoints![0]!.lockers!.filter((l) => l.name !== 'A1-07');
    site.pickupPoints = site.pickupPoints!.filter((p) => p.uid !== PUP_B1);
    site.tenants = site.tenants!.filter((x) => x.clientId === 'tenant-a');
    site.tenants[0]!.pickupPoints = [PUP_A1];
    site.terminals = [];
    const r = await t.provision(site);
    expect(r.created).toBe(0);
    expect(await t.ctx.db.kysely.selectFrom('lockers').select('uid').where('name', '=', 'A1-07').executeTakeFirst()).toBeDefined();
    expect(await t.ctx.db.kysely.selectFrom('pups').select('uid').where('uid', '=', PUP_B1).executeTakeFirst()).toBeDefined();
    expect(await t.ctx.db.kysely.selectFrom('tenants').select('uid').where('client_id', '=', 'tenant-b').executeTakeFirst()).toBeDefined();
    expect(await t.ctx.db.kysely.selectFrom('terminals').select('id').execute()).toHaveLength(2);
    const links = await t.ctx.db.kysely.selectFrom('tenant_pups').innerJoin('tenants', 'tenants.uid', 'tenant_pups.tenant_uid').select('pup_uid').where('client_id', '=', 'tenant-a').execute();
    expect(links.map((l) => l.pup_uid)).toEqual([PUP_A1]);
    await t.provision(testSite());
  });

  it('an unknown referenced PUP is PROVISIONING_INVALID and nothing is applied', async () => {
    const before = await snapshot(t);
    for (const mutate of [
      (s: ProvisioningInput) => (s.tenants![0]!.pickupPoints = [PUP_A1, UNKNOWN_UID]),
      (s: ProvisioningInput) => (s.pickupPoints![1]!.overflowPupUid = UNKNOWN_UID),
      (s: ProvisioningInput) => (s.terminals![0]!.pupUid = UNKNOWN_UID),
    ]) {
      const site = testSite();
      site.pickupPoints![0]!.name = 'Should Not Be Applied';
      mutate(site);
      const e = await provisioningError(t.provision(site));
      expect(e.code).toBe('PROVISIONING_INVALID');
      expect(e.message).toContain(UNKNOWN_UID);
    }
    expect(await snapshot(t)).toEqual(before);
  });

  it('a NUL character anywhere is PROVISIONING_INVALID naming the field, and nothing is applied', async () => {
    const before = await snapshot(t);
    const site = testSite();
    site.pickupPoints![0]!.name = 'Should Not Be Applied';
    site.pickupPoints![1]!.locationAddress!.city = 'Amster\u0000dam';
    const e = await provisioningError(t.provision(site));
    expect(e.code).toBe('PROVISIONING_INVALID');
    expect(e.message).toContain('pickupPoints.1.locationAddress.city');
    expect(e.message).toContain('NUL');
    expect(await snapshot(t)).toEqual(before);
  });

  it('a duplicate locker name or lock position within a PUP is rejected', async () => {
    const dupName = testSite();
    dupName.pickupPoints![0]!.lockers![1]!.name = 'A1-01';
    const e1 = await provisioningError(t.provision(dupName));
    expect(e1.code).toBe('PROVISIONING_INVALID');
    expect(e1.message).toContain('duplicate locker name A1-01');

    const dupPlace = testSite();
    dupPlace.pickupPoints![0]!.lockers![1]!.lockNumber = 1; // A1-01 is bus0/0/1 too
    const e2 = await provisioningError(t.provision(dupPlace));
    expect(e2.code).toBe('PROVISIONING_INVALID');
    expect(e2.message).toContain('bus0/0/1');
    expect(e2.message).toContain('pickupPoints.0.lockers.1.lockNumber');
  });

  it('other invalid files name the field', async () => {
    const site = structuredClone(testSite()) as any; // the fixture shares its dimension objects
    site.pickupPoints[0].locationAddress.countryIso2 = 'nl';
    site.pickupPoints[0].lockers[0].dimension.width = 0;
    const e = await provisioningError(t.provision(site));
    expect(e.code).toBe('PROVISIONING_INVALID');
    expect(e.message).toContain('pickupPoints.0.locationAddress.countryIso2');
    expect(e.message).toContain('pickupPoints.0.lockers.0.dimension.width');
  });

  it('reads YAML and JSON files alike (the same site either way: nothing changes)', async () => {
    const yamlFile = path.join(tmp, `site-${engine}.yaml`);
    const jsonFile = path.join(tmp, `site-${engine}.json`);
    fs.writeFileSync(yamlFile, toYaml(testSite()));
    fs.writeFileSync(jsonFile, JSON.stringify(testSite(), null, 2));
    const fromYaml = parseProvisioning(readProvisioningFile(yamlFile));
    const fromJson = parseProvisioning(readProvisioningFile(jsonFile));
    expect(fromYaml).toEqual(fromJson);
    for (const f of [fromYaml, fromJson]) {
      const r = await t.provision(f);
      expect({ created: r.created, updated: r.updated }).toEqual({ created: 0, updated: 0 });
    }
    const broken = path.join(tmp, 'broken.yaml');
    fs.writeFileSync(broken, 'pickupPoints: [\n');
    expect(() => readProvisioningFile(broken)).toThrow(expect.objectContaining({ code: 'PROVISIONING_UNREADABLE' }));
  });
});

describeEngines('the demo site file', (engine) => {
  let t: TestService;
  beforeAll(async () => {
    t = await createTestService(engine, { site: null });
  });
  afterAll(async () => t?.close());

  it('validates and applies; its tenants get tokens; a second apply changes nothing', async () => {
    const site = parseProvisioning(readProvisioningFile(DEMO_SITE));
    expect(site.pickupPoints.length).toBeGreaterThan(0);
    const r = await t.provision(site);
    const lockerCount = site.pickupPoints.reduce((n, p) => n + p.lockers.length, 0);
    expect(r.created).toBe(site.pickupPoints.length + lockerCount + 2 * site.tenants.length + site.terminals.length);
    for (const tenant of site.tenants) expect((await tokenRequest(t, tenant.clientId, tenant.clientSecret)).statusCode).toBe(200);
    const again = await t.provision(site);
    expect({ created: again.created, updated: again.updated }).toEqual({ created: 0, updated: 0 });
  });
});

describe('provisioning schema', () => {
  it('the JSON Schema the CLI prints describes the file', async () => {
    const { provisioningJsonSchema } = await import('../src/provisioning/schema');
    const s = provisioningJsonSchema() as any;
    expect(s.type).toBe('object');
    expect(Object.keys(s.properties).sort()).toEqual(['pickupPoints', 'tenants', 'terminals']);
  });
});
