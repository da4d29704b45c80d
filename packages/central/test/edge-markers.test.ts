// The edge sync's change marker and a pick up point's current code set must not cost more as a
// point's code history grows (codes are never deleted: at 100,000 shipments the old marker, an
// aggregate over all of access_codes, took ~0.3 s of every second on SQLite). The marker is a
// version per pick up point raised in the transaction that changes its codes, read by every
// instance (one row per point); the current codes are read through the index of valid codes.
// Both engines.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { openSameStore, type SameStoreService } from './support/same-store';
import { PUP_A1, PUP_A2 } from './support/fixtures';
import { addUser, booking, fails, ok } from './shipments-helpers';
import { EdgeSync } from '../src/edge/sync';
import { CURRENT_CODES_SQL, currentCodes as currentCodesRead } from '../src/edge/codes';
import { preparedReader } from '../src/db/prepared-read';
import { newSeqUid, toDbTime } from '../src/ids';

describeEngines('edge change marker and current codes', (engine) => {
  let t: TestService;
  let other: SameStoreService;
  let user: string;
  let markers: () => Promise<Map<string, string>>;
  const currentCodes = (pup: string) => currentCodesRead(preparedReader(t.ctx.db), pup);
  beforeAll(async () => {
    t = await createTestService(engine);
    other = await openSameStore(t); // another central instance on the same store
    user = await addUser(t, PUP_A1);
    const es = new EdgeSync(other.ctx, { publish: async () => {}, subscribe: async () => {} } as never);
    markers = () => (es as unknown as { readMarkers(): Promise<Map<string, string>> }).readMarkers();
  });
  afterAll(async () => {
    await other?.close();
    await t?.close();
  });
  const create = async (over: Record<string, unknown> = {}) => (await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking(over) }))).shipmentUid as string;

  it("another instance's marker changes for the point whose codes changed, and only for it", async () => {
    await create(); // the point has a marker
    const m0 = await markers();
    const uid = await create();
    const m1 = await markers();
    expect(m1.get(PUP_A1)).not.toEqual(m0.get(PUP_A1));
    expect(m1.get(PUP_A2)).toEqual(m0.get(PUP_A2));
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: uid }));
    const m2 = await markers();
    expect(m2.get(PUP_A1)).not.toEqual(m1.get(PUP_A1));
  });

  it('a change that rolls back does not move the marker', async () => {
    const m0 = await markers();
    // a booking refused after its codes step would roll back whole; here: no locker that large
    await fails(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking({ Dimension: { width: 999, height: 999, length: 999 } }) }), 'NoLockerAvailable');
    expect((await markers()).get(PUP_A1)).toEqual(m0.get(PUP_A1));
  });

  it("a point's current codes are read from its valid codes only, and its marker is unmoved, however long its history", async () => {
    const uid = await create();
    const valid = (await currentCodes(PUP_A1)).length;
    expect((await currentCodes(PUP_A1)).filter((c) => c.shipmentUid === uid)).toHaveLength(4);
    // 20,000 invalidated codes of old shipments at the same point
    const locker = (await t.ctx.db.kysely.selectFrom('lockers').select('uid').where('pup_uid', '=', PUP_A1).executeTakeFirstOrThrow()).uid;
    const tenant = (await t.ctx.db.kysely.selectFrom('tenants').select('uid').where('client_id', '=', 'tenant-a').executeTakeFirstOrThrow()).uid;
    const at = toDbTime(new Date(t.clock.now().getTime() - 86_400_000));
    const before = await markers();
    const old = Array.from({ length: 20_000 }, (_, i) => ({
      uid: newSeqUid(),
      shipment_uid: `old${String(Math.floor(i / 4)).padStart(29, '0')}`,
      tenant_uid: tenant,
      pup_uid: PUP_A1,
      locker_uid: locker,
      usage: i % 2 ? 'PickUp' : 'DropOff',
      type: i % 4 < 2 ? 'Code' : 'Qr',
      value: `old-${i}`,
      valid: 0 as const,
      shared: 0 as const,
      created_at: at,
      invalidated_at: at,
    }));
    for (let i = 0; i < old.length; i += 1000) await t.ctx.db.kysely.insertInto('access_codes').values(old.slice(i, i + 1000)).execute();
    expect(await currentCodes(PUP_A1)).toHaveLength(valid);
    // the marker says nothing changed (no valid code came or went) and does not count the history
    expect((await markers()).get(PUP_A1)).toEqual(before.get(PUP_A1));

    const q = { sql: CURRENT_CODES_SQL, parameters: [PUP_A1] };
    if (engine === 'sqlite') {
      t.ctx.db.sqlite!.exec('ANALYZE');
      const plan = t.ctx.db
        .sqlite!.prepare(`EXPLAIN QUERY PLAN ${q.sql}`)
        .all(...(q.parameters as unknown[]))
        .map((r: any) => String(r.detail))
        .join('\n');
      expect(plan).toMatch(/SEARCH c USING INDEX access_codes_pup_valid_value \(pup_uid=\? AND valid=\?\)/);
    } else {
      await t.ctx.db.pool!.query('ANALYZE access_codes');
      const pgSql = q.sql.replace(/\?/g, (_m, off: number, str: string) => `$${str.slice(0, off).split('?').length}`);
      const res = await t.ctx.db.pool!.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${pgSql}`, q.parameters as unknown[]);
      let read = 0;
      const walk = (n: any) => {
        if (n['Relation Name'] === 'access_codes') read += (n['Actual Rows'] ?? 0) * (n['Actual Loops'] ?? 1) + (n['Rows Removed by Filter'] ?? 0) + (n['Rows Removed by Index Recheck'] ?? 0);
        for (const c of n.Plans ?? []) walk(c);
      };
      walk((res.rows[0] as any)['QUERY PLAN'][0].Plan);
      expect(read).toBeLessThanOrEqual(valid * 2 + 10); // its valid codes (all usages), not the 20,000 old ones
    }
  }, 60_000);
});
