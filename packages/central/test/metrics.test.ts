// Issue 13 part 5, the central service: the Prometheus metrics on the operator listener, scraped
// over HTTP after real work through the real app (a booking, a refused booking, a terminal's
// door events applying a transition, a failing callback receiver, a terminal going on- and
// offline) on both engines. Counters are process-wide, so every check compares two scrapes.
import crypto from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { waitFor } from './support/wait';
import { connectScriptedTerminal, terminalStatus, type ScriptedTerminal } from './support/scripted-terminal';
import { CallbackReceiver } from './support/receiver';
import { familiesOf, has, parsePromText, sumOf, type PromSample } from './support/prom-text';
import { PUP_A1 } from './support/fixtures';
import { addUser, booking, codes, fails, ok } from './shipments-helpers';
import { MetricsServer, centralMetricNames } from '../src/ops/metrics';

describeEngines('Prometheus metrics of the central service', (engine) => {
  let t: TestService;
  let tt: ScriptedTerminal;
  let rx: CallbackReceiver;
  let user: string;
  let base: string;
  let seq = 0;
  const P = 'locker/v1/t/term-a1';
  const event = (type: string, fields: Record<string, unknown> = {}) => ({ v: 1, eventId: crypto.randomUUID(), seq: ++seq, terminalId: 'term-a1', at: t.clock.now().toISOString(), type, ...fields });
  const scrapeText = async () => {
    const res = await fetch(`${base}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    return res.text();
  };
  const scrape = async (): Promise<PromSample[]> => parsePromText(await scrapeText());
  const processed = (eventId: string) => waitFor(async () => (await t.ctx.db.kysely.selectFrom('edge_events').select('processed').where('event_id', '=', eventId).executeTakeFirst())?.processed, 'event processed');

  beforeAll(async () => {
    t = await createTestService(engine, {
      config: {
        mqtt: { mode: 'embedded', host: '127.0.0.1', port: 0 },
        edge: { pollMs: 50, disagreementCheckSeconds: 3600 },
        metrics: { enabled: true, host: '127.0.0.1', port: 0 },
        callbacks: { allowPrivateNetworks: true, pollIntervalMs: 20, initialBackoffMs: 60_000, maxBackoffMs: 60_000, requestTimeoutMs: 2000 },
      },
      startWorkers: true,
    });
    user = await addUser(t, PUP_A1);
    rx = new CallbackReceiver();
    rx.behaviour = () => 500;
    await rx.start();
    await ok(t.post('/v1/Platform/ConfigureCallback', { url: rx.url, authType: 'None' }));
    base = (t.ctx.workers.find((w) => w.name === 'metrics') as MetricsServer).address()!;
  });
  afterAll(async () => {
    tt?.close();
    await t?.close();
    await rx?.close();
  });

  it('a booking, a refused booking, a door transition, a failed callback and a terminal event move their metrics; requests are counted per route template and outcome', async () => {
    const before = await scrape();
    const families = familiesOf(await scrapeText());
    // the families are there before anything happened (state gauges with their samples, event metrics declared)
    for (const name of ['locker_http_request_duration_seconds', 'locker_bookings_total', 'locker_booking_refusals_total', 'locker_shipment_transitions_total', 'locker_callback_delivery_failures_total', 'locker_edge_events_ingested_total', 'locker_code_push_duration_seconds', 'locker_callback_outbox_pending', 'locker_callback_outbox_oldest_pending_age_seconds', 'locker_edge_events_unprocessed', 'locker_edge_events_oldest_unprocessed_age_seconds', 'locker_terminal_online', 'locker_terminals', 'locker_lock_disagreements']) {
      expect(families.has(name), name).toBe(true);
    }
    expect(families.get('locker_http_request_duration_seconds')).toBe('histogram');
    expect(families.get('locker_bookings_total')).toBe('counter');
    expect(families.get('locker_terminal_online')).toBe('gauge');
    expect(families.has('process_cpu_user_seconds_total')).toBe(true);
    // a provisioned terminal never seen is offline
    expect(sumOf(before, 'locker_terminal_online', { terminal: 'term-a1', pup: PUP_A1 })).toBe(0);

    // the terminal comes online: it gets a snapshot (code push) and counts as online
    tt = await connectScriptedTerminal(t);
    await tt.term.publishAsync(`${P}/up/status`, JSON.stringify({ ...terminalStatus(0, null), journal: { unsent: 7, lastSeq: 0 } }), { qos: 1 });
    await waitFor(() => tt.lastCodes()?.type === 'snapshot', 'snapshot');

    // a booking (and its delta to the online terminal), then a refused one: the same locker again
    const created = await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking() }));
    const uid = created.shipmentUid as string;
    await waitFor(() => tt.lastCodes()?.type === 'delta', 'delta');
    const locker = (await t.ctx.db.kysely.selectFrom('shipments').select('locker_uid').where('uid', '=', uid).executeTakeFirstOrThrow()).locker_uid!;
    await fails(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking({ LockerUid: locker }) }), 'NoLockerAvailable');

    // the terminal reports the drop-off: a transition with cause door; the door event twice (a resend)
    const c = await codes(t, uid);
    const code = await t.ctx.db.kysely.selectFrom('access_codes').select('uid').where('shipment_uid', '=', uid).where('usage', '=', 'DropOff').where('type', '=', 'Qr').executeTakeFirstOrThrow();
    const lk = await t.ctx.db.kysely.selectFrom('lockers').select(['bus', 'board_address', 'lock_number']).where('uid', '=', locker).executeTakeFirstOrThrow();
    const at = { bus: lk.bus, board: lk.board_address, lock: lk.lock_number, lockerUid: locker };
    const opened = event('doorOpened', { ...at, commanded: true, item: false, sessionId: 's1' });
    await tt.term.publishAsync(`${P}/up/events`, JSON.stringify(opened), { qos: 1 });
    await tt.term.publishAsync(`${P}/up/events`, JSON.stringify(opened), { qos: 1 });
    const drop = event('dropOff', { ...at, sessionId: 's1', shipmentUid: uid, codeId: code.uid, item: true });
    await tt.term.publishAsync(`${P}/up/events`, JSON.stringify(drop), { qos: 1 });
    await processed(drop.eventId);
    expect(sumOf(await scrape(), 'locker_edge_events_unprocessed')).toBe(0);
    expect(sumOf(await scrape(), 'locker_edge_events_oldest_unprocessed_age_seconds')).toBe(0);
    // an event after a missing one (seq skipped): stored, held until the gap is filled
    seq++;
    const held = event('doorClosed', { ...at, item: true });
    await tt.term.publishAsync(`${P}/up/events`, JSON.stringify(held), { qos: 1 });
    await waitFor(async () => sumOf(await scrape(), 'locker_edge_events_unprocessed') === 1, 'the held event counted');

    // the receiver answers 500: the callbacks fail and wait in the outbox
    await waitFor(() => rx.requests.length >= 1, 'a callback attempt');
    await waitFor(async () => sumOf(await scrape(), 'locker_callback_delivery_failures_total', { reason: 'http_5xx' }) > sumOf(before, 'locker_callback_delivery_failures_total', { reason: 'http_5xx' }), 'failure counted');
    t.clock.advance(700_000);

    const after = await scrape();
    const moved = (name: string, match: Record<string, string> = {}) => sumOf(after, name, match) - sumOf(before, name, match);
    expect(moved('locker_bookings_total', { flow: 'local' })).toBe(1);
    expect(moved('locker_booking_refusals_total', { reason: 'NoLockerAvailable' })).toBe(1);
    expect(moved('locker_shipment_transitions_total', { cause: 'api', to: 'ReadyForDropoff' })).toBe(1);
    expect(moved('locker_shipment_transitions_total', { cause: 'door', to: 'ReadyForPickup' })).toBe(1);
    expect(moved('locker_edge_events_ingested_total', { type: 'doorOpened', outcome: 'stored' })).toBe(1);
    expect(moved('locker_edge_events_ingested_total', { type: 'doorOpened', outcome: 'duplicate' })).toBe(1);
    expect(moved('locker_edge_events_ingested_total', { type: 'dropOff', outcome: 'stored' })).toBe(1);
    expect(moved('locker_callback_deliveries_total', { outcome: 'failed' })).toBeGreaterThanOrEqual(1);
    expect(moved('locker_callback_delivery_failures_total', { reason: 'http_5xx' })).toBeGreaterThanOrEqual(1);
    expect(moved('locker_code_push_duration_seconds_count', { kind: 'snapshot' })).toBeGreaterThanOrEqual(1);
    expect(moved('locker_code_push_duration_seconds_count', { kind: 'delta' })).toBeGreaterThanOrEqual(1);
    // the callbacks of the booking and the drop-off wait; the oldest since before the clock moved
    expect(sumOf(after, 'locker_callback_outbox_pending')).toBeGreaterThanOrEqual(2);
    expect(sumOf(after, 'locker_callback_outbox_oldest_pending_age_seconds')).toBeGreaterThanOrEqual(700);
    // the held event: stored before the clock moved, not applied
    expect(sumOf(after, 'locker_edge_events_unprocessed')).toBe(1);
    expect(sumOf(after, 'locker_edge_events_oldest_unprocessed_age_seconds')).toBeGreaterThanOrEqual(700);
    // the terminal: online, its journal backlog from its status
    expect(sumOf(after, 'locker_terminal_online', { terminal: 'term-a1', pup: PUP_A1 })).toBe(1);
    expect(sumOf(after, 'locker_terminals', { state: 'online' })).toBe(1);
    expect(sumOf(after, 'locker_terminal_journal_unsent', { terminal: 'term-a1' })).toBe(7);
    // requests: per route template and outcome
    expect(moved('locker_http_request_duration_seconds_count', { method: 'POST', route: '/v1/Logistics/CreateLocalShipment', outcome: 'success' })).toBe(1);
    expect(moved('locker_http_request_duration_seconds_count', { method: 'POST', route: '/v1/Logistics/CreateLocalShipment', outcome: 'NoLockerAvailable' })).toBe(1);
    expect(moved('locker_http_request_duration_seconds_bucket', { route: '/v1/Logistics/CreateLocalShipment', outcome: 'success', le: '+Inf' })).toBe(1);
    // the DB pool: PostgreSQL only
    if (engine === 'postgres') {
      expect(sumOf(after, 'locker_db_pool_connections', { state: 'max' })).toBe(t.ctx.config.database.poolSize);
      expect(sumOf(after, 'locker_db_pool_connections', { state: 'total' })).toBeGreaterThanOrEqual(1);
    } else expect(has(after, 'locker_db_pool_connections')).toBe(false);
    // the WAL checkpoint thread: SQLite in a file only; the migrations at the start were checkpointed
    if (engine === 'sqlite' && t.ctx.db.walCheckpointer) {
      expect(sumOf(after, 'locker_sqlite_checkpoint_thread_up')).toBe(1);
      expect(sumOf(after, 'locker_sqlite_wal_checkpoints_total', { outcome: 'done' })).toBeGreaterThanOrEqual(1);
      expect(sumOf(after, 'locker_sqlite_wal_checkpoints_total', { outcome: 'refused' })).toBe(0);
      // a total since the start: exposed as a counter (rate() over it), not a gauge
      expect(await scrapeText()).toContain('# TYPE locker_sqlite_wal_checkpoints_total counter');
      expect(has(after, 'locker_sqlite_wal_checkpoint_max_seconds')).toBe(true);
    } else expect(has(after, 'locker_sqlite_checkpoint_thread_up')).toBe(false);
    // the read threads (SQLite in a file): a GetShipments page is counted as read by a thread
    if (engine === 'sqlite' && t.ctx.db.readPool) {
      expect(await scrapeText()).toContain('# TYPE locker_sqlite_thread_reads_total counter');
      const done = sumOf(await scrape(), 'locker_sqlite_thread_reads_total', { outcome: 'done' });
      expect((await t.post('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 10, activeShipments: true })).status).toBe(200);
      expect(sumOf(await scrape(), 'locker_sqlite_thread_reads_total', { outcome: 'done' })).toBe(done + 1);
      expect(sumOf(await scrape(), 'locker_sqlite_read_threads_lost_total')).toBe(0);
      expect(sumOf(await scrape(), 'locker_sqlite_thread_reads_total', { outcome: 'overflowed' })).toBe(0);
    } else expect(has(after, 'locker_sqlite_thread_reads_total')).toBe(false);
    // the read pipelines (PostgreSQL): a GetAccount read is counted as answered on them
    if (engine === 'postgres') {
      expect(await scrapeText()).toContain('# TYPE locker_db_pg_pipelined_reads_total counter');
      const answered = sumOf(await scrape(), 'locker_db_pg_pipelined_reads_total', { outcome: 'answered' });
      expect((await t.post('/v1/Account/GetAccount', { userUid: user })).status).toBe(200);
      expect(sumOf(await scrape(), 'locker_db_pg_pipelined_reads_total', { outcome: 'answered' })).toBeGreaterThan(answered);
      expect(sumOf(await scrape(), 'locker_db_pg_pipelined_reads_total', { outcome: 'resent' })).toBe(0);
    } else expect(has(after, 'locker_db_pg_pipelined_reads_total')).toBe(false);

    // no personal data and no raw URLs in the labels: no e-mail, no shipment, user or code value
    const text = await scrapeText();
    const email = (await t.ctx.db.kysely.selectFrom('accounts').select('email_address').where('uid', '=', user).executeTakeFirstOrThrow()).email_address!;
    for (const secret of [email, uid, user, c.dropPin!, c.dropQr!, c.pickPin!]) expect(text).not.toContain(secret);
    const routes = new Set(after.filter((s) => s.name === 'locker_http_request_duration_seconds_count').map((s) => s.labels.route));
    for (const r of routes) expect(r === 'unmatched' || r!.startsWith('/')).toBe(true);
    // an unknown URL is counted as unmatched, not by its path
    await t.app.inject({ method: 'POST', url: '/v1/no/such/jane.doe@example.test' });
    const unmatched = await scrape();
    expect(sumOf(unmatched, 'locker_http_request_duration_seconds_count', { route: 'unmatched', outcome: 'NotFound' })).toBeGreaterThanOrEqual(1);
    expect(await scrapeText()).not.toContain('jane.doe');

    // the terminal goes offline
    await tt.term.publishAsync(`${P}/up/status`, JSON.stringify({ v: 1, state: 'offline', terminalId: 'term-a1', reason: 'connection-lost' }), { qos: 1 });
    await waitFor(async () => sumOf(await scrape(), 'locker_terminal_online', { terminal: 'term-a1' }) === 0, 'terminal offline');
    expect(sumOf(await scrape(), 'locker_terminals', { state: 'offline' })).toBeGreaterThanOrEqual(1);

    // never on the tenant API's port
    expect((await t.app.inject({ method: 'GET', url: '/metrics' })).statusCode).toBe(404);

    // the checkpoint thread dies: the gauge says so (the alert LockerSqliteCheckpointThreadDown)
    if (engine === 'sqlite' && t.ctx.db.walCheckpointer) {
      await t.ctx.db.walCheckpointer.kill();
      await waitFor(async () => sumOf(await scrape(), 'locker_sqlite_checkpoint_thread_up', { mode: 'background' }) === 0 && has(await scrape(), 'locker_sqlite_checkpoint_thread_up'), 'thread down in the metrics');
    }
  });

  it('every metric the service declares is served', async () => {
    const families = familiesOf(await scrapeText());
    for (const name of centralMetricNames()) {
      if ((name === 'locker_db_pool_connections' || name === 'locker_db_pg_pipelined_reads_total') && engine === 'sqlite') continue;
      if (name.startsWith('locker_sqlite_') && !t.ctx.db.walCheckpointer) continue; // PostgreSQL, or SQLite in memory
      if (name === 'locker_terminal_journal_unsent') continue; // only terminals with an online status
      expect(families.has(name), name).toBe(true);
    }
  });
});
