// Both engines keep each shipment's GetShipments item in its row (shipments.item_json, written by
// the triggers of shipments/items.ts) and a page reads it as stored. Whatever writes a shipment,
// an account, a pick up point or a locker, every stored item must equal the item written from the
// row's columns and names at that moment, and a page must show it. The store's triggers follow
// the code: a store whose triggers or items are not this code's is written anew when it migrates.
// PostgreSQL: a name changed while a shipment is written in another transaction, in either order.
import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Kysely, sql } from 'kysely';
import pg from 'pg';
import { createTestService, describeEngines, pgUrl, type TestService } from './support/harness';
import { PUP_A1, PUP_A2, testSite } from './support/fixtures';
import { addUser, booking, dropOff, ok, pickUp } from './shipments-helpers';
import { ITEM_SQL, PAGE_JOINS, PG_ITEMS_VERSION, REFRESH_LOCK_TIMEOUT_MS, refreshShipmentItems, SHIPMENT_ITEM_TRIGGERS, SHIPMENT_ITEMS_WRITTEN, syncShipmentItems } from '../src/shipments/items';
import * as m206 from '../src/db/migrations/206_shipment_items';
import * as m207 from '../src/db/migrations/207_shipment_items_pg';
import { ShipmentItemRefresher } from '../src/shipments/item-refresh';

class Rollback extends Error {}

describeEngines('shipments: items kept in the row', (engine) => {
  let t: TestService;
  let sender: string;
  let receiver: string;
  const ids: string[] = [];
  const item = ITEM_SQL[engine];

  /** the shipments whose stored item is not the item written from their row now */
  const stale = async (db: Kysely<any> = t.ctx.db.kysely) =>
    (await sql.raw<{ uid: string; stored: string | null; now: string }>(`SELECT s.uid, s.item_json AS stored, ${item} AS now FROM shipments s ${PAGE_JOINS} WHERE s.item_json IS ${engine === 'sqlite' ? 'NOT' : 'DISTINCT FROM'} ${item}`).execute(db)).rows;
  const count = async () => Number((await t.ctx.db.kysely.selectFrom('shipments').select((eb) => eb.fn.countAll().as('n')).executeTakeFirstOrThrow()).n);
  const page = async () => {
    const of = async (activeShipments: boolean) => (await ok(t.post('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 100, activeShipments, sortBy: 'CreatedAsc' }))).items as any[];
    return [...(await of(true)), ...(await of(false))];
  };
  const itemOf = async (uid: string) => (await page()).find((i) => i.shipmentUid === uid);

  beforeAll(async () => {
    t = await createTestService(engine);
    sender = await addUser(t, PUP_A1);
    receiver = await addUser(t, PUP_A1);
    for (let i = 0; i < 6; i++) {
      t.clock.advance(60_000);
      const body = { FromUserUid: sender, ToUserUid: receiver, ...booking({ PupUid: i < 3 ? PUP_A1 : PUP_A2 }), ReferenceNo: `R${i}` };
      ids.push((await ok(t.post('/v1/Logistics/CreateLocalShipment', body))).shipmentUid);
    }
  });
  afterAll(async () => t?.close());

  it('a booking writes the item with its row', async () => {
    expect(await count()).toBe(6);
    expect(await stale()).toEqual([]);
    const item = await itemOf(ids[0]!);
    expect(item).toMatchObject({ shipmentUid: ids[0], stateCode: 'ReadyForDropoff', referenceNo: 'R0', bookedPupUid: PUP_A1 });
    expect(typeof item.bookedLockerName).toBe('string');
  });

  it('state changes (drop-off, pick-up, cancel) and direct writes of shown columns keep every item right', async () => {
    await dropOff(t, ids[0]!);
    await dropOff(t, ids[1]!);
    await pickUp(t, ids[1]!);
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: ids[2] }));
    const k = t.ctx.db.kysely;
    await k.updateTable('shipments').set({ description: 'changed "here"', reference_case_no: 'C9' }).where('uid', '=', ids[3]!).execute();
    expect(await stale()).toEqual([]);
    expect((await itemOf(ids[0]!)).stateCode).toBe('ReadyForPickup');
    expect(await itemOf(ids[1]!)).toMatchObject({ bookedPupUid: null, bookedPupName: null, bookedLockerName: null });
    expect(await itemOf(ids[3]!)).toMatchObject({ description: 'changed "here"', referenceCaseNo: 'C9' });
  });

  it('a write of any one column the item shows writes the item', async () => {
    const values: Record<string, unknown> = {
      uid: 'f'.repeat(32), created_at: '2026-01-01T00:00:00.000', type_code: 'Other', state_start: '2026-01-02T00:00:00.000Z', state_code: 'Other', active: 0,
      reference_no: 'x', reference_case_no: 'y', description: 'z', from_user_uid: receiver, to_user_uid: sender, from_address: '{"city":"c"}', to_address: '{"city":"d"}',
      swaps_shipment_uid: ids[0], pup_uid: PUP_A2, locker_uid: null,
    };
    for (const [column, value] of Object.entries(values)) {
      // each write alone, in a transaction rolled back
      await expect(
        t.ctx.db.kysely.transaction().execute(async (trx) => {
          await trx.updateTable('shipments').set({ [column]: value }).where('uid', '=', ids[4]!).execute();
          expect({ column, stale: await stale(trx) }).toEqual({ column, stale: [] });
          throw new Rollback();
        }),
      ).rejects.toBeInstanceOf(Rollback);
    }
    expect(await stale()).toEqual([]);
  });

  it('a renamed pick up point, locker or user shows on the items that show the name', async () => {
    const k = t.ctx.db.kysely;
    const site = testSite();
    site.pickupPoints![1]!.name = 'Renamed Point';
    await t.provision(site);
    expect(await stale()).toEqual([]);
    const locker = (await k.selectFrom('shipments').select('locker_uid').where('uid', '=', ids[4]!).executeTakeFirstOrThrow()).locker_uid!;
    await k.updateTable('lockers').set({ name: 'RENAMED-1' }).where('uid', '=', locker).execute();
    await k.updateTable('accounts').set({ user_name: 'renamed@example.test' }).where('uid', '=', sender).execute();
    await k.updateTable('accounts').set({ user_name: 'to-renamed@example.test' }).where('uid', '=', receiver).execute();
    // written by hand, not by provisioning: on PostgreSQL the refresh (the worker's) writes the items
    await refreshShipmentItems(k);
    expect(await stale()).toEqual([]);
    const item = await itemOf(ids[4]!);
    expect(item).toMatchObject({ bookedPupUid: PUP_A2, bookedPupName: 'Renamed Point', bookedLockerName: 'RENAMED-1', fromUserName: 'renamed@example.test', toUserName: 'to-renamed@example.test' });
    // an inactive shipment shows no booked names, and keeps the user's
    expect(await itemOf(ids[2]!)).toMatchObject({ bookedPupName: null, fromUserName: 'renamed@example.test' });
    await t.provision(testSite());
    expect(await stale()).toEqual([]);
  });

  for (const side of ['from', 'to'] as const) {
    it(`an account removed, and one that comes back under the same uid (the ${side} user)`, async () => {
      const gone = await addUser(t, PUP_A1);
      const users = side === 'from' ? { FromUserUid: gone, ToUserUid: receiver } : { FromUserUid: sender, ToUserUid: gone };
      const uid = (await ok(t.post('/v1/Logistics/CreateLocalShipment', { ...users, ...booking() }))).shipmentUid;
      await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: uid }));
      const before = await itemOf(uid);
      expect(typeof before[`${side}UserName`]).toBe('string');
      await ok(t.post('/v1/Account/RemoveAccount', { userUid: gone }));
      expect(await stale()).toEqual([]);
      const after = await itemOf(uid);
      expect(after[`${side}UserUid`]).toBe(gone);
      expect(`${side}UserName` in after).toBe(false);
      const now = new Date().toISOString();
      const name = `back-${side}@example.test`;
      await t.ctx.db.kysely.insertInto('accounts').values({ uid: gone, user_name: name, user_name_key: name, email_address: name, email_key: name, created_at: now, updated_at: now }).execute();
      await refreshShipmentItems(t.ctx.db.kysely);
      expect(await stale()).toEqual([]);
      expect((await itemOf(uid))[`${side}UserName`]).toBe(name);
    });
  }

  it.runIf(engine === 'sqlite')("SQLite: a store with another code's triggers and items is written anew when it migrates; a store in step is left alone", async () => {
    const s = t.ctx.db.sqlite!;
    // an older code's item: another text, and triggers that no longer write it
    s.exec("DROP TRIGGER shipments_item_update; CREATE TRIGGER shipments_item_update AFTER UPDATE OF state_code ON shipments BEGIN UPDATE shipments SET item_json = 'old' WHERE rowid = NEW.rowid; END");
    s.exec("DROP TRIGGER pups_item_update; UPDATE shipments SET item_json = 'old'");
    await t.ctx.db.kysely.updateTable('shipments').set({ reference_no: 'R-new' }).where('uid', '=', ids[5]!).execute();
    expect((await stale()).length).toBe(await count());
    expect(await t.ctx.db.migrate()).toEqual([SHIPMENT_ITEMS_WRITTEN]);
    expect(await stale()).toEqual([]);
    const triggers = s.prepare("SELECT name, sql FROM sqlite_schema WHERE type = 'trigger' AND name LIKE '%\\_item\\_%' ESCAPE '\\'").all() as { name: string; sql: string }[];
    expect(Object.fromEntries(triggers.map((r) => [r.name, r.sql]))).toEqual(SHIPMENT_ITEM_TRIGGERS);
    expect((await itemOf(ids[5]!)).referenceNo).toBe('R-new');
    // migration 206 run again (a process that died before Kysely recorded it): nothing to do, no error
    await m206.up(t.ctx.db.kysely);
    expect(await stale()).toEqual([]);
    expect(await t.ctx.db.migrate()).toEqual([]);
    // in step: nothing written (an item set by hand stays as it is)
    s.prepare("UPDATE shipments SET item_json = 'by hand' WHERE uid = ?").run(ids[5]!);
    expect(await syncShipmentItems(t.ctx.db.kysely)).toBe(false);
    expect(s.prepare('SELECT item_json FROM shipments WHERE uid = ?').pluck().get(ids[5]!)).toBe('by hand');
    // any change of a shown column writes it right again
    await t.ctx.db.kysely.updateTable('shipments').set({ description: 'fixed' }).where('uid', '=', ids[5]!).execute();
    expect(await stale()).toEqual([]);
  });

  it.runIf(engine === 'postgres')("PostgreSQL: a store with another code's item functions and items is written anew when it migrates; a store in step is left alone", async () => {
    const k = t.ctx.db.kysely;
    const run = (text: string) => sql.raw(text).execute(k);
    const version = async () => (await sql<{ v: string | null }>`SELECT obj_description(p.oid, 'pg_proc') AS v FROM pg_proc p WHERE p.proname = 'shipment_item_write' AND p.pronamespace = current_schema()::regnamespace`.execute(k)).rows[0]?.v;
    const triggers = async () => (await sql<{ tgname: string }>`SELECT t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE NOT t.tgisinternal AND c.relnamespace = current_schema()::regnamespace ORDER BY 1`.execute(k)).rows.map((r) => r.tgname);
    const wanted = await triggers();
    expect(wanted).toHaveLength(10);
    expect(await version()).toBe(PG_ITEMS_VERSION);
    // an older code's item: another function, a trigger gone, other items
    await run(`CREATE OR REPLACE FUNCTION shipment_item_write() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.item_json := 'old'; RETURN NEW; END $$`);
    await run(`COMMENT ON FUNCTION shipment_item_write() IS 'older'`);
    await run('DROP TRIGGER pups_item_update ON pups');
    await run(`UPDATE shipments SET item_json = 'old'`);
    await k.updateTable('shipments').set({ reference_no: 'R-new' }).where('uid', '=', ids[5]!).execute();
    expect((await stale()).length).toBe(await count());
    expect(await t.ctx.db.migrate()).toEqual([SHIPMENT_ITEMS_WRITTEN]);
    expect(await stale()).toEqual([]);
    expect(await triggers()).toEqual(wanted);
    expect(await version()).toBe(PG_ITEMS_VERSION);
    expect((await itemOf(ids[5]!)).referenceNo).toBe('R-new');
    // migration 207 run again: nothing to do, no error
    await k.transaction().execute((trx) => m207.up(trx));
    expect(await t.ctx.db.migrate()).toEqual([]);
    // in step: nothing written (an item set by hand stays: a write of item_json alone fires no trigger)
    await run(`UPDATE shipments SET item_json = 'by hand' WHERE uid = '${ids[5]}'`);
    expect(await syncShipmentItems(k)).toBe(false);
    expect((await k.selectFrom('shipments').select('item_json' as any).where('uid', '=', ids[5]!).executeTakeFirstOrThrow() as any).item_json).toBe('by hand');
    await k.updateTable('shipments').set({ description: 'fixed' }).where('uid', '=', ids[5]!).execute();
    expect(await stale()).toEqual([]);
  });

  describe.runIf(engine === 'postgres')('PostgreSQL: names changed while other transactions lock and write shipments', () => {
    let a: pg.Client;
    let b: pg.Client;
    beforeAll(async () => {
      const client = async () => {
        const c = new pg.Client({ connectionString: pgUrl()! });
        await c.connect();
        await c.query(`SET search_path TO ${t.pgSchema}`);
        return c;
      };
      a = await client();
      b = await client();
    });
    afterAll(async () => {
      await a?.end();
      await b?.end();
    });
    /** whether some transaction comes to wait for a lock on shipments within 5 s */
    const waitsOnShipments = async () => {
      for (let i = 0; i < 100; i++) {
        const { rows } = await a.query(`SELECT count(*)::int AS n FROM pg_locks WHERE NOT granted AND locktype = 'relation' AND relation = 'shipments'::regclass`);
        if (rows[0].n > 0) return true;
        await new Promise((r) => setTimeout(r, 50));
      }
      return false;
    };
    const queued = async () => (await a.query('SELECT count(*)::int AS n FROM shipment_item_refresh')).rows[0].n as number;

    it('a shipment written with the old name while the name changes: the refresh waits for it, then writes its item', async () => {
      await b.query('BEGIN');
      await b.query('CREATE TEMP TABLE one_shipment ON COMMIT DROP AS SELECT * FROM shipments WHERE uid = $1', [ids[5]]);
      await b.query(`UPDATE one_shipment SET uid = $1, reference_no = 'inserted'`, ['e'.repeat(32)]);
      // its trigger reads the user's name as it is now
      await b.query('INSERT INTO shipments SELECT * FROM one_shipment');
      // the change commits at once: it waits for nothing
      await a.query('UPDATE accounts SET user_name = $1 WHERE uid = $2', ['second@example.test', sender]);
      expect(await queued()).toBe(2);
      const refreshed = refreshShipmentItems(t.ctx.db.kysely);
      const waited = await waitsOnShipments();
      await b.query('COMMIT');
      expect(await refreshed).toBe(2);
      expect(await stale()).toEqual([]);
      expect((await itemOf('e'.repeat(32))).fromUserName).toBe('second@example.test');
      expect(waited).toBe(true);
      expect(await queued()).toBe(0);
    });

    it("a door event's order (its shipment locked, then written, then its locker) goes through while its locker is renamed", async () => {
      const k = t.ctx.db.kysely;
      const locker = (await k.selectFrom('shipments').select('locker_uid').where('uid', '=', ids[5]!).executeTakeFirstOrThrow()).locker_uid!;
      await b.query('BEGIN');
      await b.query('SELECT uid FROM shipments WHERE uid = $1 FOR UPDATE', [ids[5]]);
      await a.query('UPDATE lockers SET name = $1 WHERE uid = $2', ['RENAMED-2', locker]);
      const refreshed = refreshShipmentItems(k);
      const waited = await waitsOnShipments();
      await b.query(`UPDATE shipments SET description = 'door' WHERE uid = $1`, [ids[5]]);
      await b.query('UPDATE lockers SET updated_at = updated_at WHERE uid = $1', [locker]);
      await b.query('COMMIT');
      expect(await refreshed).toBe(2);
      expect(await stale()).toEqual([]);
      expect(await itemOf(ids[5]!)).toMatchObject({ description: 'door', bookedLockerName: 'RENAMED-2' });
      expect(waited).toBe(true);
    });

    it('a refresh that cannot get its lock within REFRESH_LOCK_TIMEOUT_MS leaves the names for the next round; writers are held that long at most', async () => {
      await b.query('BEGIN');
      await b.query('SELECT uid FROM shipments WHERE uid = $1 FOR UPDATE', [ids[5]]);
      await a.query('UPDATE pups SET name = $1 WHERE uid = $2', ['Point Three', PUP_A2]);
      const started = Date.now();
      expect(await refreshShipmentItems(t.ctx.db.kysely)).toBe('busy');
      const waitedMs = Date.now() - started;
      await b.query('COMMIT');
      expect(await queued()).toBe(2);
      expect(waitedMs).toBeGreaterThanOrEqual(REFRESH_LOCK_TIMEOUT_MS - 50);
      expect(await refreshShipmentItems(t.ctx.db.kysely)).toBe(2);
      expect(await stale()).toEqual([]);
      expect((await itemOf(ids[5]!)).bookedPupName).toBe('Point Three');
    });

    /** an older code's item function (what a store migrated by an older release holds): another item, still an object */
    const olderFunction = async () => {
      await a.query(`CREATE OR REPLACE FUNCTION shipment_item_write() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.item_json := '{"older":true}'; RETURN NEW; END $$`);
      await a.query(`COMMENT ON FUNCTION shipment_item_write() IS 'older'`);
    };

    it("the sync waits for a shipment being written with the older code's function, then writes its item too", async () => {
      await olderFunction();
      const uid = crypto.randomBytes(16).toString('hex');
      await b.query('BEGIN');
      try {
        await b.query('CREATE TEMP TABLE one_shipment ON COMMIT DROP AS SELECT * FROM shipments WHERE uid = $1', [ids[4]]);
        await b.query(`UPDATE one_shipment SET uid = $1, reference_no = 'during the sync'`, [uid]);
        // written by the older function: its item is the older one
        await b.query('INSERT INTO shipments SELECT * FROM one_shipment');
        const migrated = t.ctx.db.migrate();
        const waited = await waitsOnShipments();
        await b.query('COMMIT');
        expect(await migrated).toEqual([SHIPMENT_ITEMS_WRITTEN]);
        expect(await stale()).toEqual([]);
        expect((await itemOf(uid)).referenceNo).toBe('during the sync');
        expect(waited).toBe(true);
      } finally {
        await b.query('ROLLBACK').catch(() => undefined);
      }
    });

    it('the sync under live traffic: shipments written and pages read all the while; every item right afterwards, every read answered', async () => {
      await olderFunction();
      let stop = false;
      const written: number[] = [];
      const run = crypto.randomBytes(3).toString('hex');
      // a writer of its own connection: one shown column of the six shipments, over and over
      const writer = (async () => {
        for (let i = 0; !stop; i++) {
          await b.query('UPDATE shipments SET description = $1 WHERE uid = $2', [`live ${run} ${i}`, ids[i % ids.length]]);
          written.push(i);
        }
      })();
      const statuses: number[] = [];
      const reader = (async () => {
        while (!stop) statuses.push((await t.post('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 100, activeShipments: true, sortBy: 'CreatedAsc' })).status);
      })();
      let before = 0;
      try {
        for (let i = 0; i < 500 && written.length < 20; i++) await new Promise((r) => setTimeout(r, 10));
        before = written.length;
        expect(await t.ctx.db.migrate()).toEqual([SHIPMENT_ITEMS_WRITTEN]);
      } finally {
        // stopped as soon as the sync is done: what the writes left is what the sync left
        stop = true;
        await Promise.allSettled([writer, reader]);
      }
      await writer;
      await reader;
      expect(await stale()).toEqual([]);
      expect(before).toBeGreaterThanOrEqual(20);
      expect(statuses.length).toBeGreaterThan(0);
      expect(statuses.filter((s) => s !== 200)).toEqual([]);
      const last = written.length - 1;
      for (let j = 0; j < ids.length; j++) {
        const i = last - ((last - j) % ids.length);
        expect((await itemOf(ids[j]!)).description).toBe(`live ${run} ${i}`);
      }
    });

    it('the worker tells shipments busy once ten rounds in a row could not get the lock, and writes the items once they are free', async () => {
      const lines: { level: string; o: Record<string, unknown>; msg: string }[] = [];
      const log: any = {};
      for (const level of ['trace', 'debug', 'info', 'warn', 'error', 'fatal']) log[level] = (o: Record<string, unknown>, msg: string) => lines.push({ level, o, msg });
      log.child = () => log;
      const name = `Point ${crypto.randomBytes(3).toString('hex')}`;
      // a timeout PostgreSQL would misread (0: no limit) or refuse is refused here
      for (const bad of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
        expect(() => new ShipmentItemRefresher(t.ctx, 5, bad)).toThrow(RangeError);
        await expect(refreshShipmentItems(t.ctx.db.kysely, bad)).rejects.toThrow(RangeError);
      }
      const worker = new ShipmentItemRefresher({ ...t.ctx, log }, 5, 20);
      await b.query('BEGIN');
      try {
        await b.query('SELECT uid FROM shipments WHERE uid = $1 FOR UPDATE', [ids[5]]);
        await a.query('UPDATE pups SET name = $1 WHERE uid = $2', [name, PUP_A2]);
        await worker.start();
        for (let i = 0; i < 400 && !lines.some((l) => l.level === 'warn'); i++) await new Promise((r) => setTimeout(r, 10));
        const warned = lines.filter((l) => l.level === 'warn');
        expect(warned.length).toBeGreaterThan(0);
        expect(warned[0]).toMatchObject({ o: { rounds: 10 }, msg: 'shipment items for changed names wait: shipments busy' });
        expect(await queued()).toBe(2);
        await b.query('COMMIT');
        for (let i = 0; i < 400 && !lines.some((l) => l.level === 'info'); i++) await new Promise((r) => setTimeout(r, 10));
      } finally {
        await worker.stop();
        await b.query('ROLLBACK').catch(() => undefined);
        // nothing left recorded for the tests after this one, whatever happened above
        if ((await queued()) > 0) await refreshShipmentItems(t.ctx.db.kysely);
      }
      expect(lines.find((l) => l.level === 'info')).toMatchObject({ o: { recorded: 2 }, msg: 'shipment items written for changed names' });
      expect(lines.filter((l) => l.level === 'error')).toEqual([]);
      expect(await queued()).toBe(0);
      expect(await stale()).toEqual([]);
      expect((await itemOf(ids[5]!)).bookedPupName).toBe(name);
    });

    it("an account's insert records nothing while no shipment names its uid; the worker writes what a change recorded", async () => {
      const now = new Date().toISOString();
      await a.query('INSERT INTO accounts (uid, user_name, user_name_key, email_address, email_key, created_at, updated_at) VALUES ($1, $2, $2, $2, $2, $3, $3)', ['d'.repeat(32), 'new@example.test', now]);
      expect(await queued()).toBe(0);
      await a.query('UPDATE accounts SET user_name = $1 WHERE uid = $2', ['third@example.test', receiver]);
      expect(await queued()).toBe(2);
      const worker = new ShipmentItemRefresher(t.ctx, 20);
      await worker.start();
      try {
        for (let i = 0; i < 100 && (await queued()) > 0; i++) await new Promise((r) => setTimeout(r, 20));
      } finally {
        await worker.stop();
      }
      expect(await queued()).toBe(0);
      expect(await stale()).toEqual([]);
      expect((await itemOf(ids[5]!)).toUserName).toBe('third@example.test');
    });
  });
});
