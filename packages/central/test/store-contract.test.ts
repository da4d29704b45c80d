// The store behaves the same on SQLite and PostgreSQL: the contract every area relies on.
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { openDatabase, toBool, fromBool, type Db } from '../src/db/database';
import { migrations } from '../src/db/migrations/index';
import { newUid, toDbTime } from '../src/ids';
import { describeEngines, pgUrl, type EngineName } from './support/harness';

interface Store {
  open(): Promise<Db>;
  cleanup(): Promise<void>;
}

function store(engine: EngineName): Store {
  if (engine === 'sqlite') {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-store-'));
    const url = path.join(dir, 'store.db');
    return { open: () => openDatabase({ url }), cleanup: async () => fs.rmSync(dir, { recursive: true, force: true }) };
  }
  const url = pgUrl()!;
  const schema = `s_${crypto.randomBytes(6).toString('hex')}`;
  return {
    open: () => openDatabase({ url, pgSchema: schema, poolSize: 4 }),
    cleanup: async () => {
      const c = new pg.Client({ connectionString: url });
      await c.connect();
      await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await c.end();
    },
  };
}

const now = () => toDbTime(new Date('2026-03-01T10:00:00.000Z'));

function account(email: string) {
  const uid = newUid();
  return { uid, user_name: uid, user_name_key: uid, email_address: email, email_key: email.toLowerCase(), created_at: now(), updated_at: now() };
}

function locker(pupUid: string, name: string, lockNumber: number) {
  return { uid: newUid(), pup_uid: pupUid, name, width: 40, height: 10, length: 60, size_code: 'S', type_code: 'normal', bus: 'bus0', board_address: 0, lock_number: lockNumber, booked_shipment_uid: null, created_at: now(), updated_at: now() };
}

describeEngines('store contract', (engine) => {
  let s: Store;
  let db: Db;
  const PUP = 'pup00000000000000000000000000001';
  beforeAll(async () => {
    s = store(engine);
    db = await s.open();
    await db.migrate();
  });
  afterAll(async () => {
    await db?.close();
    await s?.cleanup();
  });

  it('migrations are idempotent: re-opening and migrating again applies nothing', async () => {
    const again = await s.open();
    try {
      expect(await again.migrate()).toEqual([]);
    } finally {
      await again.close();
    }
    // the first migrate on this store applied every registered migration exactly once
    const fresh = store(engine);
    const d = await fresh.open();
    try {
      expect((await d.migrate()).sort()).toEqual(Object.keys(migrations).sort());
      expect(await d.migrate()).toEqual([]);
    } finally {
      await d.close();
      await fresh.cleanup();
    }
  });

  it('enforces the unique e-mail key (and user name key)', async () => {
    await db.kysely.insertInto('accounts').values(account('Unique@Example.test')).execute();
    await expect(db.kysely.insertInto('accounts').values(account('unique@example.test')).execute()).rejects.toThrow();
    const a = account('other@example.test');
    await db.kysely.insertInto('accounts').values(a).execute();
    await expect(db.kysely.insertInto('accounts').values({ ...account('third@example.test'), user_name_key: a.user_name_key }).execute()).rejects.toThrow();
    const n = await db.kysely.selectFrom('accounts').select((eb) => eb.fn.countAll<number>().as('n')).where('email_key', '=', 'unique@example.test').executeTakeFirstOrThrow();
    expect(n.n).toBe(1);
    expect(typeof n.n).toBe('number');
  });

  it('enforces one locker name per PUP', async () => {
    await db.kysely.insertInto('lockers').values(locker(PUP, 'L-01', 1)).execute();
    await expect(db.kysely.insertInto('lockers').values(locker(PUP, 'L-01', 2)).execute()).rejects.toThrow();
  });

  it('the conditional update "booked_shipment_uid IS NULL" books a locker once, even when racing', async () => {
    const l = locker(PUP, 'L-race', 3);
    await db.kysely.insertInto('lockers').values(l).execute();
    const attempts = Array.from({ length: 8 }, (_, i) =>
      db.kysely
        .updateTable('lockers')
        .set({ booked_shipment_uid: `ship${i}`, updated_at: now() })
        .where('uid', '=', l.uid)
        .where('booked_shipment_uid', 'is', null)
        .executeTakeFirst(),
    );
    const results = await Promise.all(attempts);
    const won = results.map((r, i) => (Number(r.numUpdatedRows) === 1 ? i : -1)).filter((i) => i >= 0);
    expect(won).toHaveLength(1);
    const row = await db.kysely.selectFrom('lockers').select('booked_shipment_uid').where('uid', '=', l.uid).executeTakeFirstOrThrow();
    expect(row.booked_shipment_uid).toBe(`ship${won[0]}`);
    // releasing makes it bookable again
    await db.kysely.updateTable('lockers').set({ booked_shipment_uid: null }).where('uid', '=', l.uid).execute();
    const again = await db.kysely.updateTable('lockers').set({ booked_shipment_uid: 'next' }).where('uid', '=', l.uid).where('booked_shipment_uid', 'is', null).executeTakeFirst();
    expect(Number(again.numUpdatedRows)).toBe(1);
  });

  it('a transaction rolls back everything when it throws', async () => {
    const a = account('rollback@example.test');
    const l = locker(PUP, 'L-rollback', 4);
    await expect(
      db.kysely.transaction().execute(async (trx) => {
        await trx.insertInto('accounts').values(a).execute();
        await trx.insertInto('lockers').values(l).execute();
        throw new Error('boom');
      }),
    ).rejects.toThrow('boom');
    expect(await db.kysely.selectFrom('accounts').select('uid').where('uid', '=', a.uid).executeTakeFirst()).toBeUndefined();
    expect(await db.kysely.selectFrom('lockers').select('uid').where('uid', '=', l.uid).executeTakeFirst()).toBeUndefined();
  });

  it('a transaction that fails on a constraint rolls back its earlier statements', async () => {
    const first = account('constraint-1@example.test');
    await expect(
      db.kysely.transaction().execute(async (trx) => {
        await trx.insertInto('accounts').values(first).execute();
        await trx.insertInto('accounts').values(account('CONSTRAINT-1@example.test')).execute();
      }),
    ).rejects.toThrow();
    expect(await db.kysely.selectFrom('accounts').select('uid').where('uid', '=', first.uid).executeTakeFirst()).toBeUndefined();
  });

  it('stores the same shapes: 0/1 booleans, doubles, ISO text timestamps sorting as text', async () => {
    const l = { ...locker(PUP, 'L-shape', 5), width: 40.5, active: toBool(false) };
    await db.kysely.insertInto('lockers').values(l).execute();
    const row = await db.kysely.selectFrom('lockers').selectAll().where('uid', '=', l.uid).executeTakeFirstOrThrow();
    expect(row.width).toBe(40.5);
    expect(fromBool(row.active)).toBe(false);
    expect(row.created_at).toBe('2026-03-01T10:00:00.000Z');
    const defaulted = locker(PUP, 'L-default', 6);
    await db.kysely.insertInto('lockers').values(defaulted).execute();
    const d = await db.kysely.selectFrom('lockers').select('active').where('uid', '=', defaulted.uid).executeTakeFirstOrThrow();
    expect(fromBool(d.active)).toBe(true);
    const times = ['2026-03-01T10:00:00.000Z', '2026-02-28T23:59:59.999Z', '2026-03-01T09:59:59.999Z'];
    for (const [i, t] of times.entries()) await db.kysely.insertInto('settings').values({ key: `t${i}`, value: t }).execute();
    const sorted = await db.kysely.selectFrom('settings').select('value').where('key', 'in', ['t0', 't1', 't2']).orderBy('value').execute();
    expect(sorted.map((r) => r.value)).toEqual([...times].sort());
  });
});
