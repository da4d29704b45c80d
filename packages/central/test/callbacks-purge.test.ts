// The outbox purge: old delivered/skipped messages go, pending ones and each shipment's newest
// stay, and the per-shipment sequence carries on after a purge.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { enqueueShipmentStatus, type ShipmentStatusEvent } from '../src/callbacks/outbox';
import { OutboxPurger } from '../src/callbacks/purge';
import { toDbTime } from '../src/ids';

describeEngines('callback outbox purge', (engine) => {
  let t: TestService;
  let tenantUid: string;
  beforeAll(async () => {
    t = await createTestService(engine, { config: { callbacks: { allowPrivateNetworks: true, retentionDays: 7 } } });
    tenantUid = (await t.ctx.db.kysely.selectFrom('tenants').select('uid').where('client_id', '=', 'tenant-a').executeTakeFirstOrThrow()).uid;
    // a callback URL, so messages are queued as pending (no worker runs here, nothing is sent)
    const r = await t.post('/v1/Platform/ConfigureCallback', { url: 'http://127.0.0.1:9/callback', authType: 'HMAC' });
    expect(r.body.success).toBe(true);
  });
  afterAll(async () => t?.close());

  const ev = (shipmentUid: string, stateCode: string): ShipmentStatusEvent => ({
    tenantUid,
    shipmentUid,
    stateCode,
    stateStart: toDbTime(t.clock.now()),
    shipmentType: 'LocalPupShipment',
    referenceNo: null,
    referenceCaseNo: null,
    description: null,
    pupUid: null,
    fromUserUid: null,
    toUserUid: null,
  });
  const enqueue = (e: ShipmentStatusEvent) => t.ctx.db.kysely.transaction().execute((trx) => enqueueShipmentStatus(trx, e, toDbTime(t.clock.now())));
  const rows = (shipmentUid: string) =>
    t.ctx.db.kysely.selectFrom('callback_outbox').select(['sequence', 'status']).where('shipment_uid', '=', shipmentUid).orderBy('sequence').execute();

  it('deletes old finished messages but keeps pending ones and each shipment\'s newest, and sequences carry on', async () => {
    for (const s of ['ReadyForDropoff', 'ReadyForPickup', 'PickedUp']) await enqueue(ev('ship-old', s));
    await enqueue(ev('ship-pending', 'ReadyForDropoff'));
    await enqueue(ev('ship-pending', 'ReadyForPickup'));
    await t.ctx.db.kysely.updateTable('callback_outbox').set({ status: 'delivered' }).where('shipment_uid', '=', 'ship-old').execute();
    await t.ctx.db.kysely.updateTable('callback_outbox').set({ status: 'delivered' }).where('shipment_uid', '=', 'ship-pending').where('sequence', '=', 2).execute();

    const purger = new OutboxPurger(t.ctx);
    t.clock.advance(6 * 86_400_000);
    expect(await purger.purge()).toBe(0); // not old enough yet
    t.clock.advance(2 * 86_400_000);
    expect(await purger.purge()).toBe(2);

    expect(await rows('ship-old')).toEqual([{ sequence: 3, status: 'delivered' }]);
    // sequence 1 is still pending: nothing of that shipment goes (its 2 is the newest anyway)
    expect(await rows('ship-pending')).toEqual([
      { sequence: 1, status: 'pending' },
      { sequence: 2, status: 'delivered' },
    ]);
    const next = await enqueue(ev('ship-old', 'ReadyForDropoff'));
    expect(next.sequence).toBe(4);
  });

  it('keeps everything when retention is 0', async () => {
    const keepAll = new OutboxPurger({ ...t.ctx, config: { ...t.ctx.config, callbacks: { ...t.ctx.config.callbacks, retentionDays: 0 } } });
    await enqueue(ev('ship-keep', 'ReadyForDropoff'));
    await enqueue(ev('ship-keep', 'ReadyForPickup'));
    await t.ctx.db.kysely.updateTable('callback_outbox').set({ status: 'delivered' }).where('shipment_uid', '=', 'ship-keep').execute();
    t.clock.advance(365 * 86_400_000);
    expect(await keepAll.purge()).toBe(0);
    expect(await rows('ship-keep')).toHaveLength(2);
  });
});
