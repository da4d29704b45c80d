// GetShipments paging totals stay exact while SQLite reuses them (shipments/queries.ts
// TotalsCache): every way the shipments table can change in between (an API booking, a
// cancellation, a direct write on the same connection, a write by another connection to the same
// file) must show in the next total. Both engines (PostgreSQL always counts).
import BetterSqlite3 from 'better-sqlite3';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { PUP_A1 } from './support/fixtures';
import { newUid, toDbTime } from '../src/ids';
import { addUser, booking, ok } from './shipments-helpers';

describeEngines('shipments: paging totals stay exact', (engine) => {
  let t: TestService;
  let user: string;
  beforeAll(async () => {
    t = await createTestService(engine);
    user = await addUser(t, PUP_A1);
  });
  afterAll(async () => t?.close());

  const list = async (activeShipments: boolean) => (await ok(t.post('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 2, activeShipments, sortBy: 'CreatedDesc' }))).totalItems as number;
  const row = async (active: 0 | 1) => {
    const tenant = await t.ctx.db.kysely.selectFrom('tenants').select('uid').where('client_id', '=', 'tenant-a').executeTakeFirstOrThrow();
    const now = toDbTime(t.clock.now());
    return {
      uid: newUid(), tenant_uid: tenant.uid, type_code: 'LocalPupShipment', flow: 'local', state_code: active ? 'ReadyForDropoff' : 'Cancelled', active, state_start: now, created_at: now, updated_at: now,
      reference_no: null, reference_case_no: null, description: null, from_user_uid: user, to_user_uid: user, from_address: null, to_address: null, receiver_delayed: 0 as const, keep_booked: 0 as const,
      pup_uid: PUP_A1, locker_uid: null, width: 1, height: 1, length: 1, swaps_shipment_uid: null, prior_shipment_uid: null, waits_on_uid: null, wait_kind: null, drop_off_deadline: null, seq: 1,
    };
  };

  it('a booking, a cancellation and direct writes all show in the next total', async () => {
    const a0 = await list(true);
    const i0 = await list(false);
    expect(await list(true)).toBe(a0); // asked twice, unchanged
    const b = await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking() }));
    expect(await list(true)).toBe(a0 + 1);
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: b.shipmentUid }));
    expect(await list(true)).toBe(a0);
    expect(await list(false)).toBe(i0 + 1);
    await t.ctx.db.kysely.insertInto('shipments').values(await row(1)).execute();
    expect(await list(true)).toBe(a0 + 1);
    await t.ctx.db.kysely.deleteFrom('shipments').where('state_code', '=', 'Cancelled').execute();
    expect(await list(false)).toBe(0);
  });

  it.runIf(engine === 'sqlite')('a write by another connection to the same database file shows in the next total', async () => {
    const a0 = await list(true);
    const file = t.ctx.db.sqlite!.name;
    const other = new BetterSqlite3(file);
    try {
      const r = await row(1);
      const cols = Object.keys(r);
      other.prepare(`INSERT INTO shipments (${cols.join(', ')}) VALUES (${cols.map(() => '?').join(', ')})`).run(...cols.map((c) => (r as Record<string, unknown>)[c]));
    } finally {
      other.close();
    }
    expect(await list(true)).toBe(a0 + 1);
  });
});
