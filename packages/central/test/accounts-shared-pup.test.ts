// Two tenants linked to one pick up point (provisioning allows it): tenant B shares PUP A1 with
// tenant A. Each manages the accounts linked to A1, but sees only its own PUPs, never manages the
// other's dispatcher main account, and never loses an account through the other's calls.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { DISPATCHER_A_EMAIL, DISPATCHER_B_EMAIL, PUP_A1, PUP_A2, PUP_B1, testSite } from './support/fixtures';

let seq = 0;
const uniq = () => `${Date.now().toString(36)}${(seq++).toString(36)}`;

function sharedSite() {
  const site = testSite();
  const b = site.tenants!.find((x) => x.clientId === 'tenant-b')!;
  b.pickupPoints = [PUP_B1, PUP_A1];
  return site;
}

describeEngines('accounts on a shared pick up point', (engine) => {
  let t: TestService;
  let tokB: string;
  beforeAll(async () => {
    t = await createTestService(engine, { site: sharedSite() });
    tokB = await t.token('tenant-b');
  });
  afterAll(async () => t?.close());

  const links = async (uid: string) =>
    (await t.ctx.db.kysely.selectFrom('account_pups').select('pup_uid').where('account_uid', '=', uid).execute()).map((r) => r.pup_uid).sort();
  /** An account of tenant A made on the shared PUP A1, then moved by A to its own PUP A2. */
  const movedToA2 = async () => {
    const email = `shared-${uniq()}@example.test`;
    const c = await t.post('/v1/Account/CreateAccount', { emailAddress: email, firstName: 'Sam', lastName: 'Shared', pickUpPointUid: PUP_A1 });
    expect(c.body.success, JSON.stringify(c.body)).toBe(true);
    const m = await t.post('/v1/Account/SetAccountPickUpPoint', { userUid: c.body.userUid, pickUpPointUid: PUP_A2 });
    expect(m.body).toMatchObject({ success: true, pupUid: PUP_A2, pickUpPointChanged: true });
    return { uid: c.body.userUid as string, email };
  };

  it("SetAccountPickUpPoint keeps the link to a PUP another tenant also manages, so that tenant keeps managing the account", async () => {
    const a = await movedToA2();
    expect(await links(a.uid)).toEqual([PUP_A1, PUP_A2].sort());
    const got = await t.post('/v1/Account/GetAccount', { userUid: a.uid }, tokB);
    expect(got.body).toMatchObject({ success: true, isExisting: true, canManageUser: true, userUid: a.uid });
    // a link to a PUP only the caller manages still goes with the move
    const back = await t.post('/v1/Account/SetAccountPickUpPoint', { userUid: a.uid, pickUpPointUid: PUP_A1 });
    expect(back.body).toMatchObject({ success: true, pickUpPointChanged: true });
    expect(await links(a.uid)).toEqual([PUP_A1]);
  });

  it("hides a main PUP the caller does not manage: GetAccountPickUpPoint, GetAccount and GetAccounts answer null PUP fields", async () => {
    const a = await movedToA2();
    const pupB = await t.post('/v1/Account/GetAccountPickUpPoint', { userUid: a.uid }, tokB);
    expect(pupB.body).toMatchObject({
      success: true, userUid: a.uid, pupUid: null, name: null, timeZone: null, deliveryAddress: null, locationAddress: null,
    });
    const pupA = await t.post('/v1/Account/GetAccountPickUpPoint', { userUid: a.uid });
    expect(pupA.body).toMatchObject({ success: true, pupUid: PUP_A2, name: 'Alpha Harbour' });

    const getB = await t.post('/v1/Account/GetAccount', { userUid: a.uid }, tokB);
    expect(getB.body).toMatchObject({ canManageUser: true, mainPupUid: null, mainPupName: null, emailAddress: a.email });
    const listB = await t.post('/v1/Account/GetAccounts', { pageNo: 1, pageSize: 10, emailAddress: a.email }, tokB);
    expect(listB.body.items).toEqual([expect.objectContaining({ userUid: a.uid, mainPupUid: null, mainPupName: null })]);
    const listA = await t.post('/v1/Account/GetAccounts', { pageNo: 1, pageSize: 10, emailAddress: a.email });
    expect(listA.body.items).toEqual([expect.objectContaining({ userUid: a.uid, mainPupUid: PUP_A2, mainPupName: 'Alpha Harbour' })]);
  });

  it("a tenant's dispatcher main account is managed only by its own tenant", async () => {
    const dA = (await t.post('/v1/Account/GetAccount', { emailAddress: DISPATCHER_A_EMAIL })).body;
    expect(dA).toMatchObject({ canManageUser: true });
    const asB = await t.post('/v1/Account/GetAccount', { emailAddress: DISPATCHER_A_EMAIL }, tokB);
    expect(asB.body).toMatchObject({ isExisting: true, canManageUser: false, userUid: dA.userUid, emailAddress: null });
    const set = await t.post('/v1/Account/SetAccountDetails', { userUid: dA.userUid, firstName: 'Mallory', lastName: 'B' }, tokB);
    expect(set.body).toMatchObject({ success: false, error: 'AccessDenied', canManageUser: false });
    for (const path of ['GetAccountPickUpPoint', 'GetAccountMutationConfig', 'RemoveAccount']) {
      expect((await t.post(`/v1/Account/${path}`, { userUid: dA.userUid }, tokB)).body, path).toMatchObject({ success: false, error: 'AccessDenied' });
    }
    expect((await t.post('/v1/Account/SetAccountPickUpPoint', { userUid: dA.userUid, pickUpPointUid: PUP_B1 }, tokB)).body).toMatchObject({ error: 'AccessDenied' });
    expect((await t.post('/v1/Account/SetAccountMutationConfig', { userUid: dA.userUid, canChangeAddress: false }, tokB)).body).toMatchObject({ error: 'AccessDenied' });
    const list = await t.post('/v1/Account/GetAccounts', { pageNo: 1, pageSize: 500 }, tokB);
    expect(list.body.items.map((i: { userUid: string }) => i.userUid)).not.toContain(dA.userUid);
    const after = (await t.post('/v1/Account/GetAccount', { userUid: dA.userUid })).body;
    expect(after).toMatchObject({ firstName: 'Ada', lastName: 'Dispatch', mainPupUid: PUP_A1 });
    // and the other way round: B's dispatcher is linked to A1 too (provisioning links it to all of B's PUPs)
    const dB = (await t.post('/v1/Account/GetAccount', { emailAddress: DISPATCHER_B_EMAIL }, tokB)).body;
    expect(dB).toMatchObject({ canManageUser: true });
    expect((await t.post('/v1/Account/GetAccount', { userUid: dB.userUid })).body).toMatchObject({ canManageUser: false });
    expect((await t.post('/v1/Account/SetAccountDetails', { userUid: dB.userUid, phoneNumber: '+31612345678' })).body).toMatchObject({ error: 'AccessDenied' });
  });

  it("another tenant's dispatcher main account cannot be a user of a shipment, even on the shared PUP", async () => {
    const dA = (await t.post('/v1/Account/GetAccount', { emailAddress: DISPATCHER_A_EMAIL })).body.userUid as string;
    const body = (user: Record<string, string>) => ({ ...user, PupUid: PUP_A1, Dimension: { width: 5, height: 5, length: 5 }, AllowLargerLockers: true, AllowOverflowLockers: false });
    for (const field of ['ToUserUid', 'FromUserUid']) {
      const res = await t.post('/v1/Logistics/CreateLocalShipment', body({ [field]: dA }), tokB);
      expect(res.body, field).toMatchObject({ success: false, error: 'InvalidUserUid' });
    }
    // an ordinary account on the shared PUP is B's to use, and A still uses its own dispatcher
    const shared = await t.post('/v1/Account/CreateAccount', { emailAddress: `user-${uniq()}@example.test`, firstName: 'Sam', lastName: 'Shared', pickUpPointUid: PUP_A1 });
    expect((await t.post('/v1/Logistics/CreateLocalShipment', body({ ToUserUid: shared.body.userUid }), tokB)).body).toMatchObject({ success: true });
    expect((await t.post('/v1/Logistics/CreateLocalShipment', body({ FromUserUid: dA, ToUserUid: shared.body.userUid }))).body).toMatchObject({ success: true });
  });
});
