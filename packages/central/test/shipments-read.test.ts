// The five GetShipments endpoints (type filter) with every filter, sort and paging totals;
// GetShipmentAccessConfig usage filter. Both engines.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { PUP_A1, PUP_A2, UNKNOWN_UID } from './support/fixtures';
import { addUser, booking, dropOff, fails, ok } from './shipments-helpers';
import { toApiTime } from '../src/ids';

describeEngines('shipments: reading', (engine) => {
  let t: TestService;
  let u1: string;
  let u2: string;
  const ids: Record<string, string> = {};
  let t0: string;
  let tMid: string;

  beforeAll(async () => {
    t = await createTestService(engine);
    u1 = await addUser(t, PUP_A1);
    u2 = await addUser(t, PUP_A1);
    const step = () => t.clock.advance(60_000);
    t0 = toApiTime(t.clock.now())!;
    ids.local1 = (await ok(t.post('/v1/Logistics/CreateLocalShipment', { FromUserUid: u1, ToUserUid: u2, ...booking() }))).shipmentUid;
    step();
    ids.local2 = (await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: u2, ...booking() }))).shipmentUid;
    step();
    ids.issue = (await ok(t.post('/v1/Logistics/CreateLocalShipmentAsIssue', { ToUserUid: u1, ...booking() }))).shipmentUids[0];
    step();
    ids.intake = (await ok(t.post('/v1/Logistics/CreateLocalShipmentAsIntake', { FromUserUid: u1, ...booking() }))).shipmentUids[0];
    step();
    ids.collect = (await ok(t.post('/v1/Logistics/CreateCollectOnlyShipment', { ...booking({ PupUid: PUP_A2 }), KeepBookedAfterPickUp: false }))).shipmentUid;
    step();
    tMid = toApiTime(t.clock.now())!;
    step();
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: ids.local2 }));
    step();
    await dropOff(t, ids.issue!);
    // another tenant's shipment never shows up
    await ok(t.post('/v1/Logistics/CreateCollectOnlyShipment', { PupUid: 'bbbb0000000000000000000000000001', Dimension: { width: 5, height: 5, length: 5 }, AllowLargerLockers: true, AllowOverflowLockers: false, KeepBookedAfterPickUp: false }, await t.token('tenant-b')));
  });
  afterAll(async () => t?.close());

  const list = async (path: string, body: Record<string, unknown>) => ok(t.post(`/v1/Logistics/${path}`, { pageNo: 1, pageSize: 50, ...body }));
  const uids = (b: any) => b.items.map((i: any) => i.shipmentUid);

  it('each endpoint filters by its shipment type', async () => {
    expect(uids(await list('GetLocalShipments', { activeShipments: true }))).toEqual([ids.local1]);
    expect(uids(await list('GetReceiveShipments', { activeShipments: true }))).toEqual([ids.issue]);
    expect(uids(await list('GetDispatchShipments', { activeShipments: true }))).toEqual([ids.intake]);
    expect(uids(await list('GetCollectOnlyShipments', { activeShipments: true }))).toEqual([ids.collect]);
    expect(uids(await list('GetShipments', { activeShipments: true }))).toEqual([ids.collect, ids.intake, ids.issue, ids.local1]);
    expect(uids(await list('GetLocalShipments', { activeShipments: false }))).toEqual([ids.local2]);
  });

  it('shipmentState filter', async () => {
    expect(uids(await list('GetShipments', { shipmentState: ['ReadyForPickup', 'Cancelled'] }))).toEqual([ids.issue, ids.local2]);
    await fails(t.post('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 10, shipmentState: ['Bogus'] }), 'InvalidRequest');
  });

  it('one of activeShipments or shipmentState is required', async () => {
    await fails(t.post('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 10 }), 'InvalidRequest');
    await fails(t.post('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 10, activeShipments: null, shipmentState: null }), 'InvalidRequest');
  });

  it('userUid matches From or To', async () => {
    expect(uids(await list('GetShipments', { activeShipments: true, userUid: u1 }))).toEqual([ids.intake, ids.issue, ids.local1]);
    expect(uids(await list('GetShipments', { shipmentState: ['ReadyForDropoff', 'Cancelled'], userUid: u2 }))).toEqual([ids.local2, ids.local1]);
    expect(uids(await list('GetShipments', { activeShipments: true, userUid: UNKNOWN_UID }))).toEqual([]);
  });

  it('bookedPupUid: shipments currently booked at that PUP', async () => {
    expect(uids(await list('GetShipments', { activeShipments: true, bookedPupUid: PUP_A2 }))).toEqual([ids.collect]);
    expect(uids(await list('GetShipments', { activeShipments: true, bookedPupUid: PUP_A1 })).length).toBe(3);
  });

  it('shipmentUid returns that shipment (state filters not needed); pageNo must be 1', async () => {
    const b = await list('GetShipments', { shipmentUid: ids.local2 });
    expect(uids(b)).toEqual([ids.local2]);
    expect(b.items[0]).toMatchObject({ stateCode: 'Cancelled', bookedPupUid: null, bookedPupName: null, bookedLockerName: null });
    expect(uids(await list('GetCollectOnlyShipments', { shipmentUid: ids.local2 }))).toEqual([]); // other type
    await fails(t.post('/v1/Logistics/GetShipments', { pageNo: 2, pageSize: 10, shipmentUid: ids.local2 }), 'InvalidRequest');
    await fails(t.post('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 0, shipmentUid: ids.local2 }), 'InvalidRequest');
  });

  it('updatedSince: changed at or after the time', async () => {
    expect(uids(await list('GetShipments', { shipmentState: ['ReadyForDropoff', 'ReadyForPickup', 'Cancelled'], updatedSince: tMid }))).toEqual([ids.issue, ids.local2]);
    expect(uids(await list('GetShipments', { activeShipments: true, updatedSince: t0 })).length).toBe(4);
    await fails(t.post('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 10, activeShipments: true, updatedSince: 'yesterday' }), 'InvalidRequest');
  });

  it('sortBy: created and activity, both directions', async () => {
    const all = { shipmentState: ['ReadyForDropoff', 'ReadyForPickup', 'Cancelled'] };
    expect(uids(await list('GetShipments', { ...all, sortBy: 'CreatedAsc' }))).toEqual([ids.local1, ids.local2, ids.issue, ids.intake, ids.collect]);
    expect(uids(await list('GetShipments', { ...all, sortBy: 'CreatedDesc' }))).toEqual([ids.collect, ids.intake, ids.issue, ids.local2, ids.local1]);
    expect(uids(await list('GetShipments', { ...all, sortBy: 'ActivityDesc' }))).toEqual([ids.issue, ids.local2, ids.collect, ids.intake, ids.local1]);
    expect(uids(await list('GetShipments', { ...all, sortBy: 'ActivityAsc' }))).toEqual([ids.local1, ids.intake, ids.collect, ids.local2, ids.issue]);
    await fails(t.post('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 10, activeShipments: true, sortBy: 'Random' }), 'InvalidRequest');
  });

  it('paging: totals independent of the page, pageSize echoed', async () => {
    const all = { shipmentState: ['ReadyForDropoff', 'ReadyForPickup', 'Cancelled'], sortBy: 'CreatedAsc' };
    const p1 = await ok(t.post('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 2, ...all }));
    const p3 = await ok(t.post('/v1/Logistics/GetShipments', { pageNo: 3, pageSize: 2, ...all }));
    const p9 = await ok(t.post('/v1/Logistics/GetShipments', { pageNo: 9, pageSize: 2, ...all }));
    expect(p1).toMatchObject({ pageNo: 1, pageSize: 2, totalItems: 5, totalPages: 3 });
    expect(uids(p1)).toEqual([ids.local1, ids.local2]);
    expect(uids(p3)).toEqual([ids.collect]);
    expect(p9).toMatchObject({ items: [], totalItems: 5, totalPages: 3 });
    await fails(t.post('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 501, activeShipments: true }), 'InvalidRequest');
  });

  it('fields: names of the users, omitted when not specified, booked PUP and locker', async () => {
    const [c] = (await list('GetShipments', { shipmentUid: ids.collect })).items;
    expect(c).toMatchObject({ typeCode: 'CollectOnlyShipment', stateCode: 'ReadyForDropoff', bookedPupUid: PUP_A2, bookedPupName: 'Alpha Harbour', bookedLockerName: 'A2-01', swapsShipmentUid: null, toUserName: 'dispatch-a@example.test' });
    for (const k of ['referenceNo', 'referenceCaseNo', 'description', 'fromUserUid', 'fromUserName', 'fromAddress', 'toAddress']) expect(c).not.toHaveProperty(k);
    const [l] = (await list('GetShipments', { shipmentUid: ids.local1 })).items;
    expect(l.fromUserName).toMatch(/@example\.test$/);
    expect(l.stateStart).toBe(l.dateCreated);
  });
});
