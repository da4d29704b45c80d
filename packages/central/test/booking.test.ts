// The booking engine: fit in any orientation, smallest fitting size first, AllowLargerLockers,
// AllowOverflowLockers, LockerUid; and no locker ever booked twice under concurrent bookings on
// both storage engines.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { L, M, PUP_A1, PUP_A2, PUP_B1, S, testSite } from './support/fixtures';
import { chooseCandidates, fits } from '../src/shipments/booking';
import { shipmentService } from '../src/shipments/service';
import { SqliteGroupCommitRunner } from '../src/shipments/tx';
import { addUser, booking, fails, ok } from './shipments-helpers';

const PUP_C = 'cccc0000000000000000000000000001';
const C_LOCKERS = 6;
const PUP_D = 'dddd0000000000000000000000000001';

function site() {
  const s = testSite();
  s.pickupPoints!.push({
    uid: PUP_C,
    name: 'Crowded Corner',
    locationAddress: { streetName: 'Dam 1', mailbox: '', city: 'Amsterdam', countryIso2: 'NL' },
    lockers: Array.from({ length: C_LOCKERS }, (_, i) => ({ name: `C-${String(i + 1).padStart(2, '0')}`, dimension: S, sizeCode: 'S', typeCode: 'normal', bus: 'bus0', boardAddress: 0, lockNumber: i + 1 })),
  });
  // sides chosen so that order by volume and fit in some orientation disagree
  const d = (name: string, width: number, height: number, length: number) => ({ name, dimension: { width, height, length }, sizeCode: 'X', typeCode: 'normal', bus: 'bus0', boardAddress: 1, lockNumber: Number(name.slice(2)) });
  s.pickupPoints!.push({
    uid: PUP_D,
    name: 'Odd Shapes',
    locationAddress: { streetName: 'Dam 2', mailbox: '', city: 'Amsterdam', countryIso2: 'NL' },
    lockers: [d('D-01', 60, 60, 2), d('D-02', 20, 20, 20), d('D-03', 30, 30, 30)],
  });
  s.tenants!.find((x) => x.clientId === 'tenant-a')!.pickupPoints!.push(PUP_C, PUP_D);
  return s;
}

describe('fit and candidate order (pure)', () => {
  it('a package fits when its sides fit in some orientation', () => {
    expect(fits({ width: 60, height: 10, length: 40 }, S)).toBe(true); // rotated
    expect(fits({ width: 10, height: 60, length: 40 }, S)).toBe(true);
    expect(fits({ width: 41, height: 10, length: 60 }, S)).toBe(false);
    expect(fits({ width: 11, height: 11, length: 11 }, S)).toBe(false); // S is 10 high
    expect(fits(S, S)).toBe(true); // exact
  });
  it('orders the smallest size first, normal before special kinds, then by name; AllowLargerLockers false keeps only the smallest fitting size', () => {
    const lk = (name: string, d: typeof S, type_code = 'normal', booked: string | null = null) => ({ uid: name, name, ...d, type_code, booked_shipment_uid: booked });
    const all = [lk('L1', L), lk('M2', M, 'cooled'), lk('M1', M), lk('S1', S, 'normal', 'x'), lk('S2', S)];
    expect(chooseCandidates(all, { width: 5, height: 5, length: 5 }, true).map((c) => c.name)).toEqual(['S2', 'M1', 'M2', 'L1']);
    expect(chooseCandidates(all, { width: 5, height: 5, length: 5 }, false).map((c) => c.name)).toEqual(['S2']);
    expect(chooseCandidates(all, { width: 12, height: 12, length: 12 }, false).map((c) => c.name)).toEqual(['M1', 'M2']);
    // the smallest fitting size is fully booked: nothing, even though larger lockers are free
    expect(chooseCandidates([lk('S1', S, 'normal', 'x'), lk('M1', M)], { width: 5, height: 5, length: 5 }, false)).toEqual([]);
  });
});

describeEngines('booking engine', (engine) => {
  let t: TestService;
  let user: string;
  beforeAll(async () => {
    t = await createTestService(engine, { site: site() });
    user = await addUser(t, PUP_A1);
  });
  afterAll(async () => t?.close());

  const book = (over: Record<string, unknown>) => t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking(over) });
  const cancelAll = async (uids: string[]) => {
    for (const u of uids) await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: u }));
  };

  it('prefers the smallest fitting size; AllowLargerLockers false books nothing when that size is full', async () => {
    const a = await ok(book({ AllowLargerLockers: false }));
    const b = await ok(book({ AllowLargerLockers: false }));
    expect([a.lockerName, b.lockerName]).toEqual(['A1-01', 'A1-02']);
    const r = await fails(book({ AllowLargerLockers: false }), 'NoLockerAvailable');
    expect(r.message).toMatch(/smallest fitting size/);
    const c = await ok(book({ AllowLargerLockers: true }));
    expect(c.lockerName).toBe('A1-03'); // next size up, a normal M before the cooled M
    await cancelAll([a.shipmentUid, b.shipmentUid, c.shipmentUid]);
  });

  it('AllowLargerLockers: the smallest locker by volume is skipped when the package fits it in no orientation', async () => {
    const cube = { width: 15, height: 15, length: 15 };
    const a = await ok(book({ PupUid: PUP_D, Dimension: cube, AllowLargerLockers: true }));
    const b = await ok(book({ PupUid: PUP_D, Dimension: cube, AllowLargerLockers: true }));
    // D-01 (60 x 60 x 2) is the smallest by volume but only 2 high: a flat package fits it rotated
    const c = await ok(book({ PupUid: PUP_D, Dimension: { width: 50, height: 60, length: 2 }, AllowLargerLockers: true }));
    expect([a.lockerName, b.lockerName, c.lockerName]).toEqual(['D-02', 'D-03', 'D-01']);
    await fails(book({ PupUid: PUP_D, Dimension: cube, AllowLargerLockers: true }), 'NoLockerAvailable');
    await cancelAll([a.shipmentUid, b.shipmentUid, c.shipmentUid]);
  });

  it('extreme dimensions: too large is NoLockerAvailable, below 1 cm is InvalidRequest, never a 500', async () => {
    for (const allow of [true, false]) {
      for (const d of [{ width: 1e308, height: 1e308, length: 1e308 }, { width: 1e308, height: 10, length: 10 }, { width: Number.MAX_SAFE_INTEGER, height: 2, length: 2 }]) {
        await fails(book({ Dimension: d, AllowLargerLockers: allow }), 'NoLockerAvailable');
      }
      const tiny = await book({ Dimension: { width: 5e-324, height: 10, length: 10 }, AllowLargerLockers: allow });
      expect(tiny.status).toBe(400);
      expect(tiny.body.error).toBe('InvalidRequest');
    }
  });

  it('a normal locker before a cooled one of the same size', async () => {
    const got = [];
    for (let i = 0; i < 3; i++) got.push(await ok(book({ Dimension: M, AllowLargerLockers: false })));
    expect(got.map((g) => g.lockerName)).toEqual(['A1-03', 'A1-04', 'A1-06']);
    await cancelAll(got.map((g) => g.shipmentUid));
  });

  it('AllowOverflowLockers books at the overflow PUP when the PUP is full, never otherwise', async () => {
    const held = [];
    for (let i = 0; i < 2; i++) held.push(await ok(book({ Dimension: L, AllowLargerLockers: true })));
    expect(held.map((h) => h.lockerName)).toEqual(['A1-05', 'A1-07']);
    await fails(book({ Dimension: L, AllowLargerLockers: true, AllowOverflowLockers: false }), 'NoLockerAvailable');
    const o = await ok(book({ Dimension: L, AllowLargerLockers: true, AllowOverflowLockers: true }));
    expect(o).toMatchObject({ pupUid: PUP_A2, lockerName: 'A2-03' });
    await fails(book({ Dimension: L, AllowLargerLockers: true, AllowOverflowLockers: true }), 'NoLockerAvailable'); // overflow full too
    // a PUP without overflow configured
    await fails(book({ PupUid: PUP_A2, Dimension: L, AllowLargerLockers: true, AllowOverflowLockers: true }), 'NoLockerAvailable');
    await cancelAll([...held.map((h) => h.shipmentUid), o.shipmentUid]);
    const again = await ok(book({ Dimension: L, AllowLargerLockers: true, AllowOverflowLockers: true }));
    expect(again).toMatchObject({ pupUid: PUP_A1, lockerName: 'A1-05' }); // released by cancel
    await cancelAll([again.shipmentUid]);
  });

  it('a given LockerUid books that locker or fails', async () => {
    const a = await ok(book({ LockerUid: 'a1000000000000000000000000000005' }));
    expect(a.lockerName).toBe('A1-05');
    await fails(book({ LockerUid: 'a1000000000000000000000000000005' }), 'NoLockerAvailable'); // taken
    await fails(book({ LockerUid: 'a1000000000000000000000000000001', Dimension: L }), 'NoLockerAvailable'); // does not fit
    await fails(book({ LockerUid: 'b1000000000000000000000000000001' }), 'InvalidRequest'); // another PUP's locker
    await cancelAll([a.shipmentUid]);
  });

  it('a package no locker can hold: NoLockerAvailable', async () => {
    await fails(book({ Dimension: { width: 200, height: 1, length: 1 } }), 'NoLockerAvailable');
    await fails(book({ PupUid: PUP_B1 }), 'InvalidPupUid');
  });

  it('concurrent bookings never share a locker; every refusal is a clean NoLockerAvailable', async () => {
    const runner = shipmentService(t.ctx).tx.inner;
    const N = 40;
    const results = await Promise.all(Array.from({ length: N }, () => book({ PupUid: PUP_C, AllowLargerLockers: true })));
    const won = results.filter((r) => r.status === 200);
    const lost = results.filter((r) => r.status !== 200);
    expect(won).toHaveLength(C_LOCKERS);
    for (const r of lost) expect(r.body).toMatchObject({ success: false, error: 'NoLockerAvailable' });
    expect(new Set(won.map((r) => r.body.lockerName)).size).toBe(C_LOCKERS);
    const lockers = await t.ctx.db.kysely.selectFrom('lockers').select(['uid', 'booked_shipment_uid']).where('pup_uid', '=', PUP_C).execute();
    const holders = lockers.map((l) => l.booked_shipment_uid);
    expect(holders.every((h) => h !== null)).toBe(true);
    expect(new Set(holders).size).toBe(C_LOCKERS);
    expect(new Set(holders)).toEqual(new Set(won.map((r) => r.body.shipmentUid)));
    // every stored shipment at PUP_C holds its own locker; refused ones left nothing behind
    const stored = await t.ctx.db.kysely.selectFrom('shipments').select(['uid', 'locker_uid']).where('pup_uid', '=', PUP_C).execute();
    expect(stored).toHaveLength(C_LOCKERS);
    expect(new Set(stored.map((s) => s.locker_uid)).size).toBe(C_LOCKERS);
    if (runner instanceof SqliteGroupCommitRunner) expect(runner.stats.maxBatch).toBeGreaterThan(1); // refusals shared a batch with bookings
    await cancelAll(won.map((r) => r.body.shipmentUid));

    // a second wave, mixed with cancels of the first wave's successors
    const wave = await Promise.all(Array.from({ length: N }, () => book({ PupUid: PUP_C, AllowLargerLockers: true })));
    const won2 = wave.filter((r) => r.status === 200);
    expect(won2).toHaveLength(C_LOCKERS);
    const cancels = won2.slice(0, 3).map((r) => t.post('/v1/Logistics/CancelShipment', { shipmentUid: r.body.shipmentUid }));
    const more = Array.from({ length: 10 }, () => book({ PupUid: PUP_C, AllowLargerLockers: true }));
    const [, moreRes] = await Promise.all([Promise.all(cancels), Promise.all(more)]);
    for (const r of moreRes) if (r.status !== 200) expect(r.body.error).toBe('NoLockerAvailable');
    // the three cancels freed three lockers: at most three of the ten got one, the rest were refused
    const moreWon = moreRes.filter((r) => r.status === 200).length;
    expect(moreWon).toBeLessThanOrEqual(3);
    expect(moreRes.filter((r) => r.status !== 200)).toHaveLength(10 - moreWon);
    const after = await t.ctx.db.kysely.selectFrom('lockers').select('booked_shipment_uid').where('pup_uid', '=', PUP_C).execute();
    const active = await t.ctx.db.kysely.selectFrom('shipments').select(['uid', 'locker_uid']).where('pup_uid', '=', PUP_C).where('active', '=', 1).execute();
    expect(active.length).toBe(C_LOCKERS - 3 + moreWon);
    expect(new Set(active.map((a) => a.locker_uid)).size).toBe(active.length);
    const booked = after.map((a) => a.booked_shipment_uid).filter((x) => x !== null);
    expect(new Set(booked)).toEqual(new Set(active.map((a) => a.uid)));
  });
});
