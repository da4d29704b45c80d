// Several central instances on one PostgreSQL database: one instance's poll parks a message behind
// its pending predecessor (parkBehind) while another records that predecessor delivered and
// un-parks its successor (recordFinal). Both interleavings, made deterministic with transactions
// held open: whichever runs first, the successor must end up due at once, not parked for up to an
// hour. (SQLite has one writer: the two cannot interleave, so this suite is PostgreSQL only.)
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Transaction } from 'kysely';
import { createTestService, pgUrl, type TestService } from './support/harness';
import { parkBehind, recordFinal } from '../src/callbacks/worker';
import type { Database } from '../src/db/schema';
import type { CallbackOutboxTable } from '../src/db/schema-callbacks';
import { newUid, toDbTime } from '../src/ids';

const suite = pgUrl() ? describe : describe.skip;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

suite('callback park vs delivery of the predecessor, two instances [postgres]', () => {
  let t: TestService;
  let tenant: string;
  beforeAll(async () => {
    t = await createTestService('postgres', { startWorkers: false });
    tenant = (await t.ctx.db.kysely.selectFrom('tenants').select('uid').where('client_id', '=', 'tenant-a').executeTakeFirstOrThrow()).uid;
  });
  afterAll(async () => {
    await t?.close();
  });

  const OWNER = 'instance-b';
  /** a shipment's head (sequence 1, leased by instance B, being delivered) and its successor */
  const queue = async (): Promise<{ head: CallbackOutboxTable; next: CallbackOutboxTable }> => {
    const now = t.clock.now();
    const ship = newUid();
    const row = (sequence: number): CallbackOutboxTable => ({
      event_id: newUid(),
      tenant_uid: tenant,
      shipment_uid: ship,
      sequence,
      message_type: 'ShipmentStatusUpdate',
      payload: '{}',
      status: 'pending',
      attempts: 0,
      next_attempt_at: toDbTime(now),
      lease_until: sequence === 1 ? toDbTime(new Date(now.getTime() + 60_000)) : null,
      lease_owner: sequence === 1 ? OWNER : null,
      last_status: null,
      last_error: null,
      created_at: toDbTime(new Date(now.getTime() - 10 * 60_000)),
      delivered_at: null,
    });
    const head = row(1);
    const next = row(2);
    await t.ctx.db.kysely.insertInto('callback_outbox').values([head, next]).execute();
    return { head, next };
  };
  const nextDue = async (next: CallbackOutboxTable) => {
    const r = await t.ctx.db.kysely.selectFrom('callback_outbox').select('next_attempt_at').where('event_id', '=', next.event_id).executeTakeFirstOrThrow();
    return r.next_attempt_at <= toDbTime(t.clock.now());
  };
  const delivered = (now: string) => ({ status: 'delivered', attempts: 1, delivered_at: now, last_status: 200, lease_until: null, lease_owner: null });

  /** runs `fn` in a transaction that stays open until the returned commit() is called */
  const open = (fn: (trx: Transaction<Database>) => Promise<void>) => {
    let commit!: () => void;
    const gate = new Promise<void>((r) => (commit = r));
    let ran!: () => void;
    const started = new Promise<void>((r) => (ran = r));
    const done = t.ctx.db.kysely.transaction().execute(async (trx) => {
      await fn(trx);
      ran();
      await gate;
    });
    return { started, commit, done };
  };

  it('the park commits first (the recording waits for it): the successor is un-parked', async () => {
    const { head, next } = await queue();
    const now = toDbTime(t.clock.now());
    const a = open((trx) => parkBehind(trx, 'postgres', [next], t.clock.now().getTime()));
    await a.started; // instance A parked the successor, not committed yet
    let recorded = false;
    const b = t.ctx.db.kysely.transaction().execute((trx) => recordFinal(trx, head, delivered(now), OWNER, now)).then(() => (recorded = true));
    await sleep(200);
    expect(recorded).toBe(false); // B waits for A's share lock on the head
    a.commit();
    await a.done;
    await b;
    expect(await nextDue(next)).toBe(true);
  });

  it('the recording commits first (the park waits for it): the successor is not parked', async () => {
    const { head, next } = await queue();
    const now = toDbTime(t.clock.now());
    const b = open((trx) => recordFinal(trx, head, delivered(now), OWNER, now));
    await b.started; // instance B recorded the head delivered (and found nothing parked), not committed yet
    let parked = false;
    const a = parkBehind(t.ctx.db.kysely, 'postgres', [next], t.clock.now().getTime()).then(() => (parked = true));
    await sleep(200);
    expect(parked).toBe(false); // A's park waits for B's lock on the head, then re-reads it
    b.commit();
    await b.done;
    await a;
    expect(await nextDue(next)).toBe(true);
  });
});
