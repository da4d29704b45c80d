// Idempotency-Key: the answer of a call that committed is stored after the fact. When that store
// fails (injected: a trigger rejects the update of the answer row), a repeat must never run the
// call again: this process replays the answer from memory and keeps trying to store it; any other
// instance (or this one after a restart) answers 400 IdempotencyKeyOutcomeUnknown, also after
// idempotency.lockSeconds. Once the store works again the answer is stored and replayed everywhere.
// The reservation is marked `committed` in the booking's own transaction, so a process that dies
// between its COMMIT and storing anything (injected: neither the answer nor the `unknown` mark can
// be written, and the repeat goes to another instance) still never books twice; and a request that
// ran past the lock and lost its key to a repeat rolls back instead of booking a second time.
import type { FastifyInstance } from 'fastify';
import { sql } from 'kysely';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { openSameStore, type SameStoreService } from './support/same-store';
import { waitFor } from './support/receiver';
import { PUP_A1 } from './support/fixtures';
import { addUser, booking } from './shipments-helpers';
import { shipmentService } from '../src/shipments/service';
import type { TxRunner } from '../src/shipments/tx';

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

  /** on: updates of a key row to status 'done' fail (with alsoUnknown: to 'unknown' too) */
  const failStore = async (on: boolean, alsoUnknown = false) => {
    const db = t.ctx.db.kysely;
    const when = alsoUnknown ? sql.raw(`NEW.status IN ('done', 'unknown')`) : sql.raw(`NEW.status = 'done'`);
    if (engine === 'sqlite') {
      if (on) await sql`CREATE TRIGGER fail_store BEFORE UPDATE ON idempotency_keys WHEN ${when} BEGIN SELECT RAISE(ABORT, 'injected: answer store failed'); END`.execute(db);
      else await sql`DROP TRIGGER fail_store`.execute(db);
    } else if (on) {
      await sql`CREATE FUNCTION fail_store() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'injected: answer store failed'; END $$`.execute(db);
      await sql`CREATE TRIGGER fail_store BEFORE UPDATE ON idempotency_keys FOR EACH ROW WHEN (${when}) EXECUTE FUNCTION fail_store()`.execute(db);
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

  it('a process that dies after its booking committed, before anything about the answer is stored: a repeat elsewhere after lockSeconds is IdempotencyKeyOutcomeUnknown, not a second booking', async () => {
    const ref = `IDEM-CRASH-${engine}`;
    const body = { ToUserUid: user, ReferenceNo: ref, ...booking() };
    await failStore(true, true);
    let other: SameStoreService | null = null;
    try {
      const first = await send(t, body, 'k-crash-1');
      expect([first.status, first.body.success]).toEqual([200, true]);
      // neither the answer nor the unknown mark reached the store: what a dead process leaves
      // behind is the mark the booking's own transaction wrote
      expect((await keyRow('k-crash-1')).status).toBe('committed');
      other = await openSameStore(t); // a fresh process: none of the first one's memory
      t.clock.advance(61_000);
      const repeat = await send(other, body, 'k-crash-1');
      expect([repeat.status, repeat.body.error]).toEqual([400, 'IdempotencyKeyOutcomeUnknown']);
      expect(await shipmentsWith(ref)).toBe(1);
    } finally {
      await failStore(false);
      await other?.close();
    }
  });

  it('a request that runs past lockSeconds and loses its key to a repeat is rolled back: one booking, the repeat\'s answer kept', async () => {
    const ref = `IDEM-TAKEOVER-${engine}`;
    const body = { ToUserUid: user, ReferenceNo: ref, ...booking() };
    const svc = shipmentService(t.ctx);
    const engineRunner = svc.tx.inner;
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    let held = 0;
    // the first job waits at the gate (a slow first request); later jobs run at once
    const gated: TxRunner = { run: async (job) => (held++ === 0 ? gate.then(() => engineRunner.run(job)) : engineRunner.run(job)) };
    (svc.tx as { inner: TxRunner }).inner = gated;
    try {
      const slow = send(t, body, 'k-takeover-1');
      await waitFor(async () => held === 1, 'first request queued its job', 5_000);
      t.clock.advance(61_000); // its reservation's lock runs out
      const repeat = await send(t, body, 'k-takeover-1');
      expect([repeat.status, repeat.body.success]).toEqual([200, true]);
      open();
      const late = await slow;
      expect([late.status, late.body.error]).toEqual([400, 'IdempotencyKeyInProgress']);
      expect(await shipmentsWith(ref)).toBe(1);
      const row = await keyRow('k-takeover-1');
      expect(row.status).toBe('done');
      expect(row.response_body).toBe(repeat.raw); // the late request's refusal did not overwrite it
      const again = await send(t, body, 'k-takeover-1');
      expect([again.status, again.replayed, again.raw]).toEqual([200, 'true', repeat.raw]);
    } finally {
      open();
      (svc.tx as { inner: TxRunner }).inner = engineRunner;
    }
  });
});
