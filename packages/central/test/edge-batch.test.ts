// The batch path of event ingestion (edge/ingest.ts, issue 15): events of several terminals and
// journals that arrive together are stored in one transaction and applied in one more; whatever
// their arrival order, each terminal's events are applied in its journal's seq order, once; a
// repeat in the same batch is stored once; a batch runs without a savepoint per event until an
// event fails, then again with them; an event the shipment service refuses is rejected alone (its
// savepoint rolled back); an event that fails for a transient reason (a poisoned lock
// observation) is left unprocessed and holds only its own terminal's later events, the rest of the
// batch commits; each terminal gets one acknowledgement per batch, of its committed prefix. Both
// engines. Events are handed to the ingestion directly, all in one turn of the event loop, so they
// form one batch; acknowledgements are read by scripted terminals on the embedded broker.
import crypto from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { EventMessage, parseMessage } from '@locker/common';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { waitFor } from './support/wait';
import { connectScriptedTerminal, type ScriptedTerminal } from './support/scripted-terminal';
import { PUP_A1, PUP_A2, PUP_B1 } from './support/fixtures';
import { addUser, bookedAtLock } from './shipments-helpers';
import type { EdgeSync } from '../src/edge/sync';

describeEngines('edge events: one batch of several terminals and journals', (engine) => {
  let t: TestService;
  let a1: ScriptedTerminal;
  let b1: ScriptedTerminal;
  let user: string;
  let sync: EdgeSync;

  beforeAll(async () => {
    t = await createTestService(engine, {
      // no background retry during the test: every advance is the test's own
      config: { mqtt: { mode: 'embedded', host: '127.0.0.1', port: 0 }, edge: { pollMs: 50, retrySeconds: 3600, gapResendSeconds: 5, gapGiveUpSeconds: 600 } },
      startWorkers: true,
    });
    sync = t.ctx.workers.find((w) => w.name === 'edge-sync') as unknown as EdgeSync;
    user = await addUser(t, PUP_A1);
    a1 = await connectScriptedTerminal(t, 'term-a1', 'terminal-secret-a1');
    b1 = await connectScriptedTerminal(t, 'term-b1', 'terminal-secret-b1');
  });
  afterAll(async () => {
    a1?.close();
    b1?.close();
    if (t) {
      if (engine === 'postgres') {
        await sql`DROP TRIGGER IF EXISTS edge_poison ON lock_observations`.execute(t.ctx.db.kysely);
      }
      await t.close();
    }
  });

  const db = () => t.ctx.db.kysely;
  const acks = (tt: ScriptedTerminal) => tt.got.filter((g) => g.kind === 'eventAcks').map((g) => g.body);
  const event = (terminalId: string, journalId: string, seq: number, type: string, fields: Record<string, unknown> = {}, eventId: string = crypto.randomUUID()) => {
    const payload = Buffer.from(JSON.stringify({ v: 1, eventId, seq, terminalId, journalId, at: t.clock.now().toISOString(), type, ...fields }));
    return { terminalId, payload, ev: parseMessage(EventMessage, payload)! };
  };
  /** hands the events to the ingestion in one turn of the event loop: one batch */
  const submit = async (events: ReturnType<typeof event>[]) => {
    const stored = events.map((e) => sync.ingest.submit(e.terminalId, e.ev, e.payload));
    await Promise.all(stored);
    await sync.ingest.idle();
  };
  const shipment = async () => {
    const { uid, lock, dropOffCode, pickUpCode } = await bookedAtLock(t, user);
    return { uid, lock, dropOff: { sessionId: crypto.randomUUID(), shipmentUid: uid, codeId: dropOffCode, ...lock, item: true }, pickUp: { sessionId: crypto.randomUUID(), shipmentUid: uid, codeId: pickUpCode, ...lock, item: false } };
  };
  const history = async (uid: string) => (await db().selectFrom('shipment_transitions').select(['to_state', 'cause']).where('shipment_uid', '=', uid).orderBy('seq').execute()).map((r) => `${r.to_state}/${r.cause}`);
  const cursor = async (id: string) => {
    const r = await db().selectFrom('edge_terminals').select(['applied_seq', 'journal_id', 'gap_since']).where('terminal_id', '=', id).executeTakeFirstOrThrow();
    return { applied: Number(r.applied_seq), journal: r.journal_id, gap: r.gap_since };
  };
  const rows = async (id: string, journal: string) =>
    (await db().selectFrom('edge_events').select(['seq', 'processed', 'outcome', 'attempts']).where('terminal_id', '=', id).where('journal_id', '=', journal).orderBy('seq').execute()).map((r) => ({ seq: Number(r.seq), processed: Number(r.processed), outcome: r.outcome, attempts: Number(r.attempts) }));

  it('out of order, with repeats, a refused event, a poisoned one and a new journal: ordered, once, the batch commits', async () => {
    const x = await shipment(); // term-a1's shipment: dropped off and picked up in journal J1
    const y = await shipment(); // dropped off in journal J2 (the terminal's new store)
    const bLockers = await db().selectFrom('lockers').select(['uid', 'bus', 'board_address', 'lock_number']).where('pup_uid', '=', PUP_B1).orderBy('name').limit(2).execute();
    const bLock = (i: number) => ({ lockerUid: bLockers[i]!.uid, bus: bLockers[i]!.bus, board: bLockers[i]!.board_address, lock: bLockers[i]!.lock_number });
    // the poison: recording an observation of term-b1's second locker fails (a transient failure)
    if (engine === 'sqlite') {
      await sql.raw(`CREATE TRIGGER edge_poison BEFORE INSERT ON lock_observations WHEN NEW.locker_uid = '${bLockers[1]!.uid}' BEGIN SELECT RAISE(ABORT, 'poisoned'); END`).execute(db());
    } else {
      await sql.raw(`CREATE OR REPLACE FUNCTION edge_poison() RETURNS trigger AS $$ BEGIN IF NEW.locker_uid = '${bLockers[1]!.uid}' THEN RAISE EXCEPTION 'poisoned'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql`).execute(db());
      await sql.raw('CREATE TRIGGER edge_poison BEFORE INSERT ON lock_observations FOR EACH ROW EXECUTE FUNCTION edge_poison()').execute(db());
    }
    const J1 = `j1-${crypto.randomUUID()}`;
    const J2 = `j2-${crypto.randomUUID()}`;
    const K = `k-${crypto.randomUUID()}`;
    const a = [
      event('term-a1', J1, 1, 'doorOpened', { ...x.lock, commanded: true, item: false }),
      event('term-a1', J1, 2, 'itemPlaced', x.lock),
      event('term-a1', J1, 3, 'doorClosed', { ...x.lock, item: true }),
      event('term-a1', J1, 4, 'dropOff', x.dropOff),
      event('term-a1', J1, 5, 'doorOpened', { ...x.lock, commanded: true, item: true }),
      event('term-a1', J1, 6, 'itemRemoved', x.lock),
      event('term-a1', J1, 7, 'doorClosed', { ...x.lock, item: false }),
      event('term-a1', J1, 8, 'pickUp', x.pickUp),
      // the drop-off code again, no longer valid: refused by the shipment service after the claim (rolled back)
      event('term-a1', J1, 9, 'dropOff', { ...x.dropOff, sessionId: crypto.randomUUID() }),
      event('term-a1', J2, 1, 'doorOpened', { ...y.lock, commanded: true, item: false }),
      event('term-a1', J2, 2, 'doorClosed', { ...y.lock, item: true }),
      event('term-a1', J2, 3, 'dropOff', y.dropOff),
    ];
    const b = [
      event('term-b1', K, 1, 'doorOpened', { ...bLock(0), commanded: true, item: false }),
      event('term-b1', K, 2, 'doorClosed', { ...bLock(0), item: true }),
      event('term-b1', K, 3, 'doorOpened', { ...bLock(1), commanded: false, item: false }), // poisoned
      event('term-b1', K, 4, 'doorOpened', { ...bLock(0), commanded: true, item: true }),
      event('term-b1', K, 5, 'doorClosed', { ...bLock(0), item: false }),
      // 6 is missing: a gap
      event('term-b1', K, 7, 'doorOpened', { ...bLock(0), commanded: true, item: false }),
    ];
    // the first event of each terminal names its journal (J1, K); the rest arrive in one batch:
    // reversed and interleaved, with repeats (same event id) of the drop-off and the pick-up
    const first = { ...sync.ingest.stats };
    await submit([a[0]!, b[0]!]);
    await waitFor(() => acks(a1).length === 1 && acks(b1).length === 1, 'first events acknowledged');
    // nothing failed: applied in one attempt, without a savepoint per event
    expect(sync.ingest.stats.redoneWithSavepoints - first.redoneWithSavepoints).toBe(0);
    expect(sync.ingest.stats.applied - first.applied).toBe(2);
    const rest = { a: a.slice(1), b: b.slice(1) };
    const repeats = [a[3]!, a[7]!].map((e) => ({ ...e }));
    const arrival = [...rest.a].reverse().flatMap((e, i) => (rest.b[rest.b.length - 1 - i] ? [e, rest.b[rest.b.length - 1 - i]!] : [e]));
    arrival.splice(3, 0, repeats[0]!);
    arrival.push(repeats[1]!);
    const before = { ...sync.ingest.stats };
    await submit(arrival);

    // one store transaction, one apply transaction
    expect(sync.ingest.stats.storeBatches - before.storeBatches).toBe(1);
    expect(sync.ingest.stats.applyBatches - before.applyBatches).toBe(1);
    expect(sync.ingest.stats.stored - before.stored).toBe(arrival.length);
    // the refused and the poisoned event failed the attempt without savepoints: it was rolled back
    // whole and the batch ran again with one savepoint per event (what follows is its outcome)
    expect(sync.ingest.stats.redoneWithSavepoints - before.redoneWithSavepoints).toBe(1);
    // applied (or rejected) once each, counted once: 11 of term-a1's (the repeats stored once), term-b1's 2-... up to the poison
    expect(sync.ingest.stats.applied - before.applied).toBe(11 + 1);

    // term-a1: J1 applied in seq order (the pick-up arrived before its drop-off), then J2 from its seq 1
    expect(await history(x.uid)).toEqual(['ReadyForDropoff/api', 'ReadyForPickup/door', 'PickedUp/door']);
    expect(await history(y.uid)).toEqual(['ReadyForDropoff/api', 'ReadyForPickup/door']);
    const j1 = await rows('term-a1', J1);
    expect(j1.map((r) => r.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9]); // the repeats stored once
    expect(j1.every((r) => r.processed === 1)).toBe(true);
    expect(j1.find((r) => r.seq === 4)?.outcome).toBe('DropOff:applied:ReadyForPickup');
    expect(j1.find((r) => r.seq === 8)?.outcome).toBe('PickUp:applied:PickedUp');
    expect(j1.find((r) => r.seq === 9)?.outcome).toBe('rejected:InvalidAccessCode');
    expect((await rows('term-a1', J2)).map((r) => [r.seq, r.processed])).toEqual([[1, 1], [2, 1], [3, 1]]);
    expect(await cursor('term-a1')).toMatchObject({ applied: 3, journal: J2 });
    const obsX = await db().selectFrom('lock_observations').selectAll().where('locker_uid', '=', x.lock.lockerUid).executeTakeFirstOrThrow();
    expect({ seq: Number(obsX.seq), door: obsX.door, item: Number(obsX.item) }).toEqual({ seq: 7, door: 'closed', item: 0 });

    // term-b1: 1-2 applied; 3 poisoned: rolled back alone, unprocessed, counted; 4, 5 and 7 held behind it
    expect(await rows('term-b1', K)).toEqual([
      { seq: 1, processed: 1, outcome: 'stored', attempts: 0 },
      { seq: 2, processed: 1, outcome: 'stored', attempts: 0 },
      { seq: 3, processed: 0, outcome: null, attempts: 1 },
      { seq: 4, processed: 0, outcome: null, attempts: 0 },
      { seq: 5, processed: 0, outcome: null, attempts: 0 },
      { seq: 7, processed: 0, outcome: null, attempts: 0 },
    ]);
    expect(await cursor('term-b1')).toMatchObject({ applied: 2, journal: K });
    const obsB = await db().selectFrom('lock_observations').selectAll().where('locker_uid', '=', bLockers[0]!.uid).executeTakeFirstOrThrow();
    expect(Number(obsB.seq)).toBe(2);

    // one acknowledgement per terminal for the batch, of the committed prefix
    await waitFor(() => acks(a1).length >= 2 && acks(b1).length >= 2, 'acknowledged');
    await new Promise((r) => setTimeout(r, 100));
    expect(acks(a1)).toEqual([expect.objectContaining({ journalId: J1, upTo: 1 }), expect.objectContaining({ journalId: J2, upTo: 3 })]);
    expect(acks(b1)).toEqual([expect.objectContaining({ journalId: K, upTo: 1 }), expect.objectContaining({ journalId: K, upTo: 2 })]);

    // a retry while the poison is still there: the last batch had a failing event, so this one
    // runs with savepoints from the start, once (not without them first and then again)
    const retried = { ...sync.ingest.stats };
    await sync.ingest.advance(['term-b1']);
    expect(sync.ingest.stats.withSavepointsFirst - retried.withSavepointsFirst).toBe(1);
    expect(sync.ingest.stats.redoneWithSavepoints - retried.redoneWithSavepoints).toBe(0);
    expect((await rows('term-b1', K)).find((r) => r.seq === 3)).toEqual({ seq: 3, processed: 0, outcome: null, attempts: 2 });
    expect(await cursor('term-b1')).toMatchObject({ applied: 2, journal: K });

    // the poison gone, a retry applies 3-5 in order and holds 7 behind the gap at 6 (still with
    // savepoints first: the batch before had a failure; none failed in this one)
    await sql.raw('DROP TRIGGER edge_poison' + (engine === 'postgres' ? ' ON lock_observations' : '')).execute(db());
    const healed = { ...sync.ingest.stats };
    await sync.ingest.advance(['term-b1']);
    expect(sync.ingest.stats.withSavepointsFirst - healed.withSavepointsFirst).toBe(1);
    expect(await cursor('term-b1')).toMatchObject({ applied: 5, journal: K });
    expect((await cursor('term-b1')).gap).not.toBeNull();
    await waitFor(() => acks(b1).at(-1)?.upTo === 5, 'acknowledged up to the gap');
    // the missing one arrives: 6 and the held 7 are applied, without savepoints again (nothing
    // failed in the batch before)
    const clean = { ...sync.ingest.stats };
    await submit([event('term-b1', K, 6, 'doorClosed', { ...bLock(0), item: true })]);
    expect(sync.ingest.stats.withSavepointsFirst - clean.withSavepointsFirst).toBe(0);
    expect(sync.ingest.stats.redoneWithSavepoints - clean.redoneWithSavepoints).toBe(0);
    expect(await cursor('term-b1')).toMatchObject({ applied: 7, journal: K, gap: null });
    expect((await rows('term-b1', K)).every((r) => r.processed === 1)).toBe(true);
    await waitFor(() => acks(b1).at(-1)?.upTo === 7, 'acknowledged past the gap');
    const obsB1 = await db().selectFrom('lock_observations').selectAll().where('locker_uid', '=', bLockers[1]!.uid).executeTakeFirstOrThrow();
    expect(obsB1.door).toBe('open');
    expect(Number((await db().selectFrom('lock_observations').select('seq').where('locker_uid', '=', bLockers[0]!.uid).executeTakeFirstOrThrow()).seq)).toBe(7);
  });

  it('a batch applied twice (a second instance, a retry) changes nothing and applies nothing twice', async () => {
    const x = await shipment();
    const J = `j3-${crypto.randomUUID()}`;
    const evs = [event('term-a1', J, 1, 'doorOpened', { ...x.lock, commanded: true, item: false }), event('term-a1', J, 2, 'dropOff', x.dropOff)];
    // a new journal whose seq 1 takes over once the current one holds nothing
    await submit([evs[1]!, evs[0]!]);
    expect(await history(x.uid)).toEqual(['ReadyForDropoff/api', 'ReadyForPickup/door']);
    // the same events again (a broker redelivery) and an advance of the same terminal in one batch
    const n = acks(a1).length;
    const again = submit(evs);
    const advanced = sync.ingest.advance(['term-a1']);
    await Promise.all([again, advanced]);
    expect(await history(x.uid)).toEqual(['ReadyForDropoff/api', 'ReadyForPickup/door']);
    expect((await rows('term-a1', J)).map((r) => [r.seq, r.processed, r.outcome])).toEqual([
      [1, 1, 'stored'],
      [2, 1, 'DropOff:applied:ReadyForPickup'],
    ]);
    expect(await cursor('term-a1')).toMatchObject({ applied: 2, journal: J });
    await waitFor(() => acks(a1).length > n, 'repeat acknowledged');
    expect(acks(a1).at(-1)).toMatchObject({ journalId: J, upTo: 2 });
  });
  it('a batch with a terminal that is not provisioned and one that never connected: the first is dropped (nothing written), the others stored and applied', async () => {
    // term-a2 is provisioned (a row in terminals) but has never connected: no edge_terminals row yet
    const now = t.clock.now().toISOString();
    await db().insertInto('terminals').values({ id: 'term-a2', pup_uid: PUP_A2, secret_hash: 'scrypt$unused', name: null, created_at: now, updated_at: now }).execute();
    expect(await db().selectFrom('edge_terminals').select('terminal_id').where('terminal_id', '=', 'term-a2').executeTakeFirst()).toBeUndefined();
    const a2Locker = await db().selectFrom('lockers').select(['uid', 'bus', 'board_address', 'lock_number']).where('pup_uid', '=', PUP_A2).orderBy('name').executeTakeFirstOrThrow();
    const lock = { lockerUid: a2Locker.uid, bus: a2Locker.bus, board: a2Locker.board_address, lock: a2Locker.lock_number };
    const J = `ja2-${crypto.randomUUID()}`;
    const G = `jg-${crypto.randomUUID()}`;
    const K = (await cursor('term-b1')).journal!;
    const bSeq = (await cursor('term-b1')).applied;
    const evs = [
      event('term-ghost', G, 1, 'doorOpened', { ...lock, commanded: false }),
      event('term-a2', J, 2, 'doorClosed', { ...lock, item: false }),
      event('term-b1', K, bSeq + 1, 'doorClosed', { bus: 'bus0', board: 0, lock: 1, item: false }),
      event('term-a2', J, 1, 'doorOpened', { ...lock, commanded: false }),
      event('term-ghost', G, 2, 'doorClosed', { ...lock }),
    ];
    // every submit resolves (the broker's PUBACK), the ghost's too: it is dropped, not retried
    await submit(evs);
    expect(await db().selectFrom('edge_events').select('event_id').where('terminal_id', '=', 'term-ghost').execute()).toEqual([]);
    expect(await db().selectFrom('edge_terminals').select('terminal_id').where('terminal_id', '=', 'term-ghost').executeTakeFirst()).toBeUndefined();
    expect((await rows('term-a2', J)).map((r) => [r.seq, r.processed, r.outcome])).toEqual([
      [1, 1, 'stored'],
      [2, 1, 'stored'],
    ]);
    expect(await cursor('term-a2')).toMatchObject({ applied: 2, journal: J });
    const a2 = await db().selectFrom('edge_terminals').select(['last_seq']).where('terminal_id', '=', 'term-a2').executeTakeFirstOrThrow();
    expect(Number(a2.last_seq)).toBe(2);
    expect(await db().selectFrom('lock_observations').select(['door', 'seq']).where('locker_uid', '=', a2Locker.uid).executeTakeFirstOrThrow()).toMatchObject({ door: 'closed' });
    expect(await cursor('term-b1')).toMatchObject({ applied: bSeq + 1, journal: K });
    const b = await db().selectFrom('edge_terminals').select(['last_seq']).where('terminal_id', '=', 'term-b1').executeTakeFirstOrThrow();
    expect(Number(b.last_seq)).toBeGreaterThanOrEqual(bSeq + 1);
  });

  it('more unprocessed events than one read holds (2,000), all of them only stored: one batch applies every one, once, and acknowledges them all', async () => {
    // the events that are only stored are marked processed together (ingest.ts advanceIn): they
    // must be written before the terminal's events are read again, or the second read returns the
    // first 2,000 once more and the advance stops at 2,000 (no background retry in this file)
    const J = `j5-${crypto.randomUUID()}`;
    const N = 2050;
    const evs = Array.from({ length: N }, (_, i) => event('term-a1', J, i + 1, 'credentialAccepted', { sessionId: crypto.randomUUID() }));
    const before = { ...sync.ingest.stats };
    // seq 2 on first: a new journal takes over at its seq 1, so they wait, stored (however the
    // ingestion splits them into batches); then seq 1, and one advance has all 2,050 to apply
    await submit(evs.slice(1));
    expect(sync.ingest.stats.applied - before.applied).toBe(0);
    const unprocessed = async () => Number((await db().selectFrom('edge_events').select((eb) => eb.fn.countAll<number>().as('n')).where('journal_id', '=', J).where('processed', '=', 0).executeTakeFirstOrThrow()).n);
    expect(await unprocessed()).toBe(N - 1);
    await submit([evs[0]!]);
    expect(sync.ingest.stats.applied - before.applied).toBe(N);
    expect(await cursor('term-a1')).toMatchObject({ applied: N, journal: J, gap: null });
    const got = await rows('term-a1', J);
    expect(got.length).toBe(N);
    expect(got.filter((r) => r.processed === 1 && r.outcome === 'stored' && r.attempts === 0).length).toBe(N);
    await waitFor(() => acks(a1).at(-1)?.journalId === J && acks(a1).at(-1)?.upTo === N, 'all acknowledged');
  });
});
