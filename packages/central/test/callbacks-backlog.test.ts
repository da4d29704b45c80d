// A backlog of undelivered callbacks behind failing queue heads (a receiver that is down) must not
// make every poll of the delivery worker read the whole backlog: messages queued behind an
// undelivered one of their shipment are parked (next_attempt_at moved ahead) and made due again
// when their predecessor is delivered. Measured deterministically: the rows a poll reads (worker
// stats.examined), the rows due, and the candidate query's plan (index callback_outbox_due).
import { afterAll, beforeAll, expect, it } from 'vitest';
import { sql } from 'kysely';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { CallbackReceiver, waitFor } from './support/receiver';
import { enqueueShipmentStatus } from '../src/callbacks/outbox';
import { CALLBACK_WORKER_NAME, candidateQuery, PARK_MIN_MS, type CallbackDeliveryWorker } from '../src/callbacks/worker';
import { newUid, toDbTime } from '../src/ids';
import { PUP_A1 } from './support/fixtures';

const SHIPMENTS = 2_000;
const PER_SHIPMENT = 10; // 20,000 messages: 2,000 failing heads, 18,000 queued behind them

describeEngines('callback backlog behind failing heads', (engine) => {
  let t: TestService;
  let rx: CallbackReceiver;
  let tenant: string;
  let w: CallbackDeliveryWorker;

  beforeAll(async () => {
    t = await createTestService(engine, { config: { callbacks: { allowPrivateNetworks: true, pollIntervalMs: 20, initialBackoffMs: 1000, maxBackoffMs: 60_000, requestTimeoutMs: 5_000 } } });
    tenant = (await t.ctx.db.kysely.selectFrom('tenants').select('uid').where('client_id', '=', 'tenant-a').executeTakeFirstOrThrow()).uid;
    rx = new CallbackReceiver();
    await rx.start();
    rx.behaviour = () => 500;
    expect((await t.post('/v1/Platform/ConfigureCallback', { url: rx.url, authType: 'None' })).body.success).toBe(true);
    w = t.ctx.workers.find((x) => x.name === CALLBACK_WORKER_NAME) as CallbackDeliveryWorker;
  }, 30_000);
  afterAll(async () => {
    await w?.stop();
    await rx?.close();
    await t?.close();
  });

  const nowMs = () => t.clock.now().getTime();
  const due = async () =>
    Number(
      (
        await t.ctx.db.kysely
          .selectFrom('callback_outbox')
          .select((eb) => eb.fn.countAll().as('n'))
          .where('status', '=', 'pending')
          .where('next_attempt_at', '<=', toDbTime(t.clock.now()))
          .executeTakeFirstOrThrow()
      ).n,
    );
  /** runs one more complete poll of the started worker and returns the rows it read */
  const poll = async () => {
    const before = { polls: w.stats.polls, examined: w.stats.examined };
    w.wake(0);
    await waitFor(() => w.stats.polls >= before.polls + 2, 'a complete poll'); // the one running may have started earlier
    return w.stats.examined - before.examined;
  };

  it('20,000 messages behind 2,000 failing heads: after they are parked a poll reads no backlog row; the query uses the due index', async () => {
    // the backlog: each shipment's head failed and retries in 10 min; 9 messages queued behind it
    const created = nowMs() - 3_600_000;
    const rows = [];
    for (let s = 0; s < SHIPMENTS; s++) {
      const ship = `bl${String(s).padStart(8, '0')}${'0'.repeat(22)}`;
      for (let q = 1; q <= PER_SHIPMENT; q++) {
        rows.push({
          event_id: newUid(),
          tenant_uid: tenant,
          shipment_uid: ship,
          sequence: q,
          message_type: 'ShipmentStatusUpdate',
          payload: '{}',
          status: 'pending',
          attempts: q === 1 ? 3 : 0,
          next_attempt_at: toDbTime(new Date(q === 1 ? nowMs() + 600_000 : created + s)),
          lease_until: null,
          lease_owner: null,
          last_status: q === 1 ? 500 : null,
          last_error: null,
          created_at: toDbTime(new Date(created + s)),
          delivered_at: null,
        });
      }
    }
    for (let i = 0; i < rows.length; i += 500) await t.ctx.db.kysely.insertInto('callback_outbox').values(rows.slice(i, i + 500)).execute();
    if (engine === 'postgres') await sql`analyze callback_outbox`.execute(t.ctx.db.kysely);
    expect(await due()).toBe(SHIPMENTS * (PER_SHIPMENT - 1));

    // the worker parks them, a batch per round, polls following at once
    await w.start();
    await waitFor(async () => (await due()) === 0, 'backlog parked', 20_000);
    expect(w.stats.parked).toBeGreaterThanOrEqual(SHIPMENTS * (PER_SHIPMENT - 1));
    expect(rx.requests).toHaveLength(0); // nothing was sent: every head retries later

    // from now on a poll reads nothing: no candidate row at all
    for (let i = 0; i < 3; i++) expect(await poll()).toBe(0);

    // a new message behind a failing head: read once, parked, then not read again
    const head = rows[0]!.shipment_uid;
    await t.ctx.db.kysely.transaction().execute((trx) =>
      enqueueShipmentStatus(
        trx,
        { tenantUid: tenant, shipmentUid: head, stateCode: 'Cancelled', stateStart: toDbTime(t.clock.now()), shipmentType: 'LocalPupShipment', referenceNo: null, referenceCaseNo: null, description: null, pupUid: PUP_A1, fromUserUid: null, toUserUid: null },
        toDbTime(t.clock.now()),
      ),
    );
    await waitFor(async () => (await due()) === 0, 'new message parked');
    expect(await poll()).toBe(0);

    // the candidate query walks the due index in order and stops at the limit (no sort of the backlog)
    const q = candidateQuery(t.ctx.db.kysely, toDbTime(t.clock.now()), 16).compile();
    if (engine === 'sqlite') {
      const plan = t.ctx.db
        .sqlite!.prepare(`EXPLAIN QUERY PLAN ${q.sql}`)
        .all(...(q.parameters as unknown[]))
        .map((r: any) => String(r.detail));
      expect(plan.join('\n')).toMatch(/SEARCH o USING INDEX callback_outbox_due \(status=\? AND next_attempt_at<\?\)/);
      expect(plan.join('\n')).not.toMatch(/TEMP B-TREE/);
    } else {
      // rows the executor actually read from the outbox for the candidate list (index + filter)
      const pgSql = q.sql.replace(/\?/g, (_m, off: number, str: string) => `$${str.slice(0, off).split('?').length}`);
      const res = await t.ctx.db.pool!.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${pgSql}`, q.parameters as unknown[]);
      const plan = (res.rows[0] as any)['QUERY PLAN'][0].Plan;
      let read = 0;
      // (the per-row `behind` EXISTS is a SubPlan: one unique-index probe per returned row)
      const walk = (n: any) => {
        if (n['Parent Relationship'] === 'SubPlan') return;
        if (n['Relation Name'] === 'callback_outbox') read += (n['Actual Rows'] ?? 0) + (n['Rows Removed by Filter'] ?? 0) + (n['Rows Removed by Index Recheck'] ?? 0);
        for (const c of n.Plans ?? []) walk(c);
      };
      walk(plan);
      expect(read).toBeLessThanOrEqual(16);
    }
  }, 60_000);

  it('when the receiver is back, a shipment delivers its queue in order: each message is due as soon as its predecessor is delivered', async () => {
    const ship = (await t.ctx.db.kysely.selectFrom('callback_outbox').select('shipment_uid').where('sequence', '=', 1).orderBy('shipment_uid').executeTakeFirstOrThrow()).shipment_uid;
    rx.behaviour = () => 200;
    // only this shipment's head is made due now; the parked messages behind it are not touched
    await t.ctx.db.kysely.updateTable('callback_outbox').set({ next_attempt_at: toDbTime(t.clock.now()) }).where('shipment_uid', '=', ship).where('sequence', '=', 1).execute();
    w.wake(0);
    // all 11 (10 + the one queued in the first test) arrive, in sequence order, without the clock moving
    await waitFor(async () => (await t.ctx.db.kysely.selectFrom('callback_outbox').select('status').where('shipment_uid', '=', ship).where('status', '=', 'pending').execute()).length === 0, 'queue delivered');
    const seqs = rx.requests.map((r) => Number(r.headers['x-event-sequence']));
    expect(seqs).toEqual(Array.from({ length: PER_SHIPMENT + 1 }, (_, i) => i + 1));
    // no other shipment was sent anything, and parked rows stayed parked (the clock did not move by PARK_MIN_MS)
    expect(new Set(rx.requests.map((r) => r.headers['x-event-id'])).size).toBe(PER_SHIPMENT + 1);
    expect(await due()).toBe(0);
    expect(PARK_MIN_MS).toBeGreaterThan(0);
  }, 30_000);
});
