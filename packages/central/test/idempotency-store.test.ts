// Idempotency-Key: the answer of a call that committed is stored after the fact. When that store
// fails (injected: a trigger rejects the update of the answer row), a repeat must never run the
// call again: this process replays the answer from memory and keeps trying to store it; any other
// instance (or this one after a restart) answers 400 IdempotencyKeyOutcomeUnknown, also after
// idempotency.lockSeconds. Once the store works again the answer is stored and replayed everywhere.
import type { FastifyInstance } from 'fastify';
import { sql } from 'kysely';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { openSameStore, type SameStoreService } from './support/same-store';
import { waitFor } from './support/receiver';
import { PUP_A1 } from './support/fixtures';
import { addUser, booking } from './shipments-helpers';

describeEngines('Idempotency-Key: the answer cannot be stored', (engine) => {
  let t: TestService;
  let t2: SameStoreService | null = null;
  let user: string;
  beforeAll(async () => {
    t = await createTestService(engine);
    user = await addUser(t, PUP_A1);
  });
  afterAll(async () => {
    await t2?.close();
    await t?.close();
  });

  const send = async (s: { app: FastifyInstance; token(): Promise<string> }, body: unknown, key: string) => {
    const res = await s.app.inject({
      method: 'POST',
      url: '/v1/Logistics/CreateLocalShipment',
      payload: JSON.stringify(body),
      headers: { 'content-type': 'application/json', authorization: `Bearer ${await s.token()}`, 'idempotency-key': key },
    });
    return { status: res.statusCode, raw: res.body, body: res.json(), replayed: res.headers['idempotent-replayed'] };
  };
  const shipmentsWith = async (ref: string) => (await t.ctx.db.kysely.selectFrom('shipments').select('uid').where('reference_no', '=', ref).execute()).length;
  const keyRow = (key: string) => t.ctx.db.kysely.selectFrom('idempotency_keys').selectAll().where('idem_key', '=', key).executeTakeFirstOrThrow();

  const failStore = async (on: boolean) => {
    const db = t.ctx.db.kysely;
    if (engine === 'sqlite') {
      if (on) await sql`CREATE TRIGGER fail_store BEFORE UPDATE ON idempotency_keys WHEN NEW.status = 'done' BEGIN SELECT RAISE(ABORT, 'injected: answer store failed'); END`.execute(db);
      else await sql`DROP TRIGGER fail_store`.execute(db);
    } else if (on) {
      await sql`CREATE FUNCTION fail_store() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'injected: answer store failed'; END $$`.execute(db);
      await sql`CREATE TRIGGER fail_store BEFORE UPDATE ON idempotency_keys FOR EACH ROW WHEN (NEW.status = 'done') EXECUTE FUNCTION fail_store()`.execute(db);
    } else {
      await sql`DROP TRIGGER fail_store ON idempotency_keys`.execute(db);
      await sql`DROP FUNCTION fail_store()`.execute(db);
    }
  };

  it('a repeat never books again: replayed by this process, IdempotencyKeyOutcomeUnknown elsewhere (also after lockSeconds), replayed everywhere once stored', async () => {
    const ref = `IDEM-STORE-${engine}`;
    const body = { ToUserUid: user, ReferenceNo: ref, ...booking() };
    await failStore(true);
    let first;
    try {
      first = await send(t, body, 'k-store-1');
      expect(first.status).toBe(200);
      expect(first.body.success).toBe(true);
      expect((await keyRow('k-store-1')).status).toBe('unknown');

      // this process still knows the answer: replayed byte for byte, nothing booked
      const again = await send(t, body, 'k-store-1');
      expect([again.status, again.replayed, again.raw]).toEqual([200, 'true', first.raw]);

      // another instance on the same store, after the reservation lock (60 s) ran out: refused, not run
      t2 = await openSameStore(t);
      t.clock.advance(61_000);
      const other = await send(t2, body, 'k-store-1');
      expect([other.status, other.body.error, other.body.success]).toEqual([400, 'IdempotencyKeyOutcomeUnknown', false]);
      // a different request with that key is still IdempotencyKeyReused
      const reused = await send(t2, { ...body, ReferenceNo: 'other' }, 'k-store-1');
      expect(reused.body.error).toBe('IdempotencyKeyReused');
      expect(await shipmentsWith(ref)).toBe(1);
    } finally {
      await failStore(false);
    }

    // the store works again: the background retry stores the answer; every instance replays it
    await waitFor(async () => (await keyRow('k-store-1')).status === 'done', 'answer stored in the background', 5_000);
    const replayed = await send(t2!, body, 'k-store-1');
    expect([replayed.status, replayed.replayed, replayed.raw]).toEqual([200, 'true', first.raw]);
    expect(await shipmentsWith(ref)).toBe(1);
  });
});
