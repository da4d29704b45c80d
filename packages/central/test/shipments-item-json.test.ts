// GetShipments' items and GetLockers' / GetAvailableLockers' lockers are written as JSON by the
// database (shipments/items.ts itemSql; kept in the row on both engines, test/shipments-stored-items.test.ts; pickup-points/queries.ts lockerItemSql) and go into the
// answer as they are. They must be, byte for byte, what the response serializer wrote from
// the mapped object before: the schema's keys in its order, absent optional keys left out, every
// string quoted as JSON.stringify quotes it. Both engines: the quoting of every code point, then
// pages of shipments holding awkward values, compared with an item built here from the stored row.
import { sql } from 'kysely';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { PUP_A1, PUP_A2 } from './support/fixtures';
import { addUser, booking, ok } from './shipments-helpers';
import { refreshShipmentItems } from '../src/shipments/items';

/** every character JSON escapes, and others it leaves alone (format directives included: the item text is built by format()) */
const AWKWARD = 'q " bs \\ tab \t nl \n cr \r b \b f \f c1 \u0001 c1f \u001f del \u007f nbsp \u00a0 ls \u2028 ps \u2029 😀 ä € 中 </script> %s %d %% {}[]';

describeEngines('shipments: items written by the database', (engine) => {
  let t: TestService;
  const ids: string[] = [];
  let u1: string;

  beforeAll(async () => {
    t = await createTestService(engine);
    u1 = await addUser(t, PUP_A1);
    const u2 = await addUser(t, PUP_A1);
    for (let i = 0; i < 8; i++) {
      t.clock.advance(60_000);
      const body = i % 2 ? { FromUserUid: u1, ToUserUid: u2, ...booking({ PupUid: i < 4 ? PUP_A1 : PUP_A2 }) } : { ToUserUid: u2, ...booking() };
      ids.push((await ok(t.post('/v1/Logistics/CreateLocalShipment', { ...body, ReferenceNo: `R${i}` }))).shipmentUid);
    }
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: ids[1] }));
    const k = t.ctx.db.kysely;
    const set = (uid: string, values: Record<string, unknown>) => k.updateTable('shipments').set(values).where('uid', '=', uid).execute();
    // awkward text in every free-text column, a user name and a PUP's and a locker's names
    await set(ids[0]!, { reference_no: AWKWARD, reference_case_no: `case ${AWKWARD}`, description: `d ${AWKWARD}` });
    await set(ids[2]!, { reference_no: null, description: '' });
    await k.updateTable('accounts').set({ user_name: `name ${AWKWARD}` }).where('uid', '=', u1).execute();
    await k.updateTable('pups').set({ name: `pup ${AWKWARD}` }).where('uid', '=', PUP_A2).execute();
    const locker = await k.selectFrom('shipments').select('locker_uid').where('uid', '=', ids[5]!).executeTakeFirstOrThrow();
    await k.updateTable('lockers').set({ name: `L ${AWKWARD}` }).where('uid', '=', locker.locker_uid!).execute();
    // an empty sender, a receiver with no account, a stored time without its Z, a swap
    await set(ids[3]!, { from_user_uid: '', to_user_uid: 'no-such-account' });
    await set(ids[4]!, { created_at: '2026-03-01T10:04:00.000', state_start: '2026-03-01T10:04:00.000' });
    await set(ids[6]!, { swaps_shipment_uid: ids[7]! });
    // stored addresses (the service writes none): an object, a non-object, broken JSON
    await set(ids[5]!, { from_address: JSON.stringify({ city: `c ${AWKWARD}`, name: 'n', extra: 1, street: 5 }), to_address: '"just a string"' });
    await set(ids[7]!, { to_address: '{not json' });
    // the names were changed by hand, not by provisioning: on PostgreSQL the refresh (the worker's) writes their items
    await refreshShipmentItems(k);
  });
  afterAll(async () => t?.close());

  it('SQL quotes every code point as JSON.stringify does', async () => {
    const texts: string[] = [];
    for (let c = 1; c < 0x30000; c++) if (c < 0xd800 || c > 0xdfff) texts.push(`${String.fromCodePoint(c)}x`);
    const differ: string[] = [];
    for (let i = 0; i < texts.length; i += 8192) {
      const part = texts.slice(i, i + 8192);
      let quoted: string[];
      if (engine === 'sqlite') {
        const st = t.ctx.db.sqlite!.prepare('SELECT json_quote(?)').pluck(true);
        quoted = part.map((s) => st.get(s) as string);
      } else {
        const r = await t.ctx.db.pool!.query<{ q: string }>(`SELECT coalesce(to_json(x)::text, 'null') AS q FROM unnest($1::text[]) WITH ORDINALITY AS u(x, n) ORDER BY n`, [part]);
        quoted = r.rows.map((row) => row.q);
      }
      part.forEach((s, j) => {
        if (quoted[j] !== JSON.stringify(s)) differ.push(`U+${s.codePointAt(0)!.toString(16)}: ${quoted[j]}`);
      });
    }
    expect(differ).toEqual([]);
  });

  /** the item as the API document and toItem define it, from the stored row */
  async function expectedItems(uids: string[]): Promise<unknown[]> {
    const rows = await t.ctx.db.kysely
      .selectFrom('shipments as s')
      .leftJoin('accounts as fa', 'fa.uid', 's.from_user_uid')
      .leftJoin('accounts as ta', 'ta.uid', 's.to_user_uid')
      .leftJoin('pups as p', 'p.uid', 's.pup_uid')
      .leftJoin('lockers as l', 'l.uid', 's.locker_uid')
      .select(['s.uid', 's.created_at', 's.type_code', 's.state_start', 's.state_code', 's.active', 's.reference_no', 's.reference_case_no', 's.description', 's.from_user_uid', 's.to_user_uid', 's.from_address', 's.to_address', 's.swaps_shipment_uid', 's.pup_uid'])
      .select([sql<string | null>`fa.user_name`.as('from_name'), sql<string | null>`ta.user_name`.as('to_name'), sql<string | null>`p.name`.as('pup_name'), sql<string | null>`l.name`.as('locker_name')])
      .where('s.uid', 'in', uids)
      .execute();
    const byUid = new Map(rows.map((r) => [r.uid, r]));
    const time = (v: string) => (v.endsWith('Z') ? v.slice(0, -1) : v);
    const address = (json: string | null) => {
      if (!json) return undefined;
      try {
        const a = JSON.parse(json);
        const out: Record<string, string> = {};
        for (const k of ['name', 'street', 'mailbox', 'city', 'countryIso2']) if (typeof a[k] === 'string') out[k] = a[k];
        return out;
      } catch {
        return undefined;
      }
    };
    return uids.map((uid) => {
      const r = byUid.get(uid)!;
      const active = Number(r.active) !== 0;
      const item: Record<string, unknown> = { shipmentUid: r.uid, dateCreated: time(r.created_at), typeCode: r.type_code, stateStart: time(r.state_start), stateCode: r.state_code };
      if (r.reference_no !== null) item.referenceNo = r.reference_no;
      if (r.reference_case_no !== null) item.referenceCaseNo = r.reference_case_no;
      if (r.description !== null) item.description = r.description;
      if (r.from_user_uid) {
        if (r.from_name !== null) item.fromUserName = r.from_name;
        item.fromUserUid = r.from_user_uid;
      }
      if (address(r.from_address)) item.fromAddress = address(r.from_address);
      if (r.to_user_uid) {
        if (r.to_name !== null) item.toUserName = r.to_name;
        item.toUserUid = r.to_user_uid;
      }
      if (address(r.to_address)) item.toAddress = address(r.to_address);
      Object.assign(item, { swapsShipmentUid: r.swaps_shipment_uid, bookedPupName: active ? r.pup_name : null, bookedPupUid: active ? r.pup_uid : null, bookedLockerName: active ? r.locker_name : null });
      return item;
    });
  }

  async function rawPage(path: string, body: Record<string, unknown>): Promise<string> {
    const res = await t.app.inject({ method: 'POST', url: `/v1/Logistics/${path}`, payload: JSON.stringify({ pageNo: 1, pageSize: 50, ...body }), headers: { 'content-type': 'application/json', authorization: `Bearer ${await t.token()}` } });
    expect(res.statusCode).toBe(200);
    return res.body;
  }

  it('every item of a page is byte for byte the item the serializer wrote from the mapped row', async () => {
    for (const sortBy of ['CreatedAsc', 'CreatedDesc', 'ActivityAsc', 'ActivityDesc']) {
      for (const filter of [{ activeShipments: true }, { activeShipments: false }, { userUid: u1, shipmentState: ['ReadyForDropoff', 'Cancelled'] }, { shipmentState: ['ReadyForDropoff', 'Cancelled'] }]) {
        const text = await rawPage('GetShipments', { ...filter, sortBy });
        const uids = (JSON.parse(text).items as { shipmentUid: string }[]).map((i) => i.shipmentUid);
        expect(uids.length).toBeGreaterThan(0);
        // the items exactly as JSON.stringify writes the expected objects, keys in the schema's order
        expect(text).toContain(`"items":${JSON.stringify(await expectedItems(uids))}`);
      }
    }
    // all eight, awkward values included, through a typed endpoint too
    const all = await rawPage('GetLocalShipments', { shipmentState: ['ReadyForDropoff', 'Cancelled'], sortBy: 'CreatedAsc' });
    const allUids = (JSON.parse(all).items as { shipmentUid: string }[]).map((i) => i.shipmentUid);
    expect([...allUids].sort()).toEqual([...ids].sort());
    expect(all).toContain(`"items":${JSON.stringify(await expectedItems(allUids))}`);
    // the awkward values came back as stored
    const byUid = new Map((JSON.parse(all).items as { shipmentUid: string }[]).map((i) => [i.shipmentUid, i]));
    const items = ids.map((uid) => byUid.get(uid) as any);
    expect(items[0].referenceNo).toBe(AWKWARD);
    expect(items[2].referenceNo).toBeUndefined();
    expect(items[2].description).toBe('');
    expect(items[3].fromUserUid).toBeUndefined();
    expect(items[3].toUserUid).toBe('no-such-account');
    expect(items[3]).not.toHaveProperty('toUserName');
    expect(items[4].dateCreated).toBe('2026-03-01T10:04:00.000');
    expect(items[5].bookedPupName).toBe(`pup ${AWKWARD}`);
    expect(items[5].fromAddress).toEqual({ name: 'n', city: `c ${AWKWARD}` });
    expect(items[5].toAddress).toEqual({});
    expect(items[7]).not.toHaveProperty('toAddress');
    expect(items[1].bookedPupUid).toBeNull();
  });

  it("GetLockers and GetAvailableLockers: every locker byte for byte as the serializer wrote it, fractions and awkward names included", async () => {
    const k = t.ctx.db.kysely;
    const lockers = await k.selectFrom('lockers').select(['uid', 'name']).where('pup_uid', '=', PUP_A1).orderBy('name').execute();
    expect(lockers.length).toBeGreaterThan(4);
    const [a, b, c, d] = lockers.map((l) => l.uid);
    await k.updateTable('lockers').set({ name: `zz ${AWKWARD}` }).where('uid', '=', a!).execute();
    await k.updateTable('lockers').set({ width: 40.5, height: 1.1 + 2.2 }).where('uid', '=', b!).execute();
    await k.updateTable('lockers').set({ length: 2 ** 53 + 2 }).where('uid', '=', c!).execute();
    await k.updateTable('lockers').set({ width: 1 }).where('uid', '=', d!).execute();
    const expected = async (uids: string[]) => {
      const rows = await k.selectFrom('lockers').select(['uid', 'pup_uid', 'name', 'width', 'height', 'length']).where('uid', 'in', uids).execute();
      const byUid = new Map(rows.map((r) => [r.uid, r]));
      return uids.map((uid) => {
        const r = byUid.get(uid)!;
        return { pupUid: r.pup_uid, lockerUid: r.uid, name: r.name, dimension: { width: Number(r.width), height: Number(r.height), length: Number(r.length) } };
      });
    };
    for (const path of ['GetLockers', 'GetAvailableLockers']) {
      const res = await t.app.inject({ method: 'POST', url: `/v1/PickupPoints/${path}`, payload: JSON.stringify({ pageNo: 1, pageSize: 50, pupUid: PUP_A1 }), headers: { 'content-type': 'application/json', authorization: `Bearer ${await t.token()}` } });
      expect(res.statusCode).toBe(200);
      const items = JSON.parse(res.body).items as { lockerUid: string; name: string; dimension: { width: number; height: number } }[];
      expect(items.length).toBeGreaterThan(0);
      expect(res.body).toContain(`"items":${JSON.stringify(await expected(items.map((i) => i.lockerUid)))}`);
      if (path === 'GetLockers') {
        const byUid = new Map(items.map((i) => [i.lockerUid, i]));
        expect(byUid.get(a!)!.name).toBe(`zz ${AWKWARD}`);
        expect(byUid.get(b!)!.dimension).toMatchObject({ width: 40.5, height: 3.3000000000000003 });
        expect(res.body).toContain('"height":3.3000000000000003');
        expect(byUid.get(d!)!.dimension.width).toBe(1);
      }
    }
  });
});
