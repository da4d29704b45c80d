// What the events of one advance of a terminal say about its locks is written once per locker
// (edge/observations.ts ObservationBatch, used by edge/ingest.ts when a batch runs without a
// savepoint per event): a drop-off and a pick-up session report the door and the item of one lock
// six times; event by event that was a read and a write of its row each time (on PostgreSQL a
// round trip each). The row must end exactly as the events one by one would have left it, also
// when another writer changed it between the batch's read and its write. Both engines.
import crypto from 'node:crypto';
import { sql, type Kysely } from 'kysely';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { EventMessage, parseMessage } from '@locker/common';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { connectScriptedTerminal, type ScriptedTerminal } from './support/scripted-terminal';
import { PUP_A1 } from './support/fixtures';
import { addUser, bookedAtLock } from './shipments-helpers';
import { createLogger } from '../src/logger';
import { ObservationBatch, recordObservationWith, type ObsExec, type StoredEventRow } from '../src/edge/observations';
import type { EdgeSync } from '../src/edge/sync';
import type { Database } from '../src/db/schema';

describeEngines('lock observations: one write per locker for an advance of a terminal', (engine) => {
  let t: TestService;
  let a1: ScriptedTerminal;
  let user: string;
  let sync: EdgeSync;
  const db = () => t.ctx.db.kysely;
  const log = createLogger({ level: 'silent' });

  beforeAll(async () => {
    t = await createTestService(engine, {
      config: { mqtt: { mode: 'embedded', host: '127.0.0.1', port: 0 }, edge: { pollMs: 50, retrySeconds: 3600 } },
      startWorkers: true,
    });
    sync = t.ctx.workers.find((w) => w.name === 'edge-sync') as unknown as EdgeSync;
    user = await addUser(t, PUP_A1);
    a1 = await connectScriptedTerminal(t, 'term-a1', 'terminal-secret-a1');
    // every row written into lock_observations (an insert or an update) counted by the database
    if (engine === 'sqlite') {
      t.ctx.db.sqlite!.exec(`CREATE TABLE obs_writes (n INTEGER NOT NULL); INSERT INTO obs_writes VALUES (0);
        CREATE TRIGGER obs_writes_i AFTER INSERT ON lock_observations BEGIN UPDATE obs_writes SET n = n + 1; END;
        CREATE TRIGGER obs_writes_u AFTER UPDATE ON lock_observations BEGIN UPDATE obs_writes SET n = n + 1; END;`);
    } else {
      await sql`CREATE TABLE obs_writes (n int NOT NULL)`.execute(db());
      await sql`INSERT INTO obs_writes VALUES (0)`.execute(db());
      await sql.raw(`CREATE FUNCTION obs_writes_count() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN UPDATE obs_writes SET n = n + 1; RETURN NULL; END $$`).execute(db());
      await sql`CREATE TRIGGER obs_writes_count AFTER INSERT OR UPDATE ON lock_observations FOR EACH ROW EXECUTE FUNCTION obs_writes_count()`.execute(db());
    }
  });
  afterAll(async () => {
    a1?.close();
    await t?.close();
  });

  const writes = async () => Number((await sql<{ n: number }>`SELECT n FROM obs_writes`.execute(db())).rows[0]!.n);
  const obs = (lockerUid: string) => db().selectFrom('lock_observations').selectAll().where('locker_uid', '=', lockerUid).executeTakeFirst();
  const shipment = () => bookedAtLock(t, user);

  it('a drop-off and a pick-up session in one batch: the locker row written once, as the events one by one leave it, the shipment picked up', async () => {
    const s = await shipment();
    const journal = crypto.randomUUID();
    const session = (sessionId: string, placed: boolean) => [
      ['doorOpened', { ...s.lock, commanded: true, item: !placed, sessionId }],
      // named by its bus, board and lock only (found by a statement of its own, kept in the same row)
      [placed ? 'itemPlaced' : 'itemRemoved', { ...s.lock, lockerUid: null, sessionId }],
      ['doorClosed', { ...s.lock, item: placed, sessionId }],
      [placed ? 'dropOff' : 'pickUp', { sessionId, shipmentUid: s.uid, codeId: placed ? s.dropOffCode : s.pickUpCode, ...s.lock, item: placed }],
    ] as const;
    const events = [...session(crypto.randomUUID(), true), ...session(crypto.randomUUID(), false)].map(([type, fields], i) => {
      const payload = Buffer.from(JSON.stringify({ v: 1, eventId: crypto.randomUUID(), seq: i + 1, terminalId: 'term-a1', journalId: journal, at: t.clock.now().toISOString(), type, ...fields }));
      return { payload, ev: parseMessage(EventMessage, payload)! };
    });
    const before = await writes();
    await Promise.all(events.map((e) => sync.ingest.submit('term-a1', e.ev, e.payload)));
    await sync.ingest.idle();
    expect(sync.ingest.stats.redoneWithSavepoints).toBe(0);
    // six observed events (door and item, twice) about one locker: one write (event by event: six)
    expect((await writes()) - before).toBe(1);
    const o = await obs(s.lock.lockerUid);
    // the last observed event is the pick-up session's doorClosed (seq 7): door shut, no item
    expect(o).toMatchObject({ terminal_id: 'term-a1', journal_id: journal, event_id: events[6]!.ev.eventId, door: 'closed', left_open_at: null, jammed_at: null, board_offline_at: null });
    expect(Number(o!.seq)).toBe(7);
    expect(Number(o!.item)).toBe(0);
    expect((await db().selectFrom('shipments').select('state_code').where('uid', '=', s.uid).executeTakeFirstOrThrow()).state_code).toBe('PickedUp');
    const processed = await db().selectFrom('edge_events').select(['processed']).where('journal_id', '=', journal).execute();
    expect(processed.map((r) => Number(r.processed))).toEqual(Array(8).fill(1));
  });

  /** the statements of one transaction, with those that write lock_observations counted */
  const counting = (trx: Kysely<Database>) => {
    const counted = { reads: 0, writes: 0 };
    const exec: ObsExec = async <R,>(text: string, params: readonly unknown[]) => {
      if (/^SELECT/i.test(text)) counted.reads++;
      else counted.writes++;
      const parts = text.split('?');
      const r = await sql<R>(Object.assign([...parts], { raw: [...parts] }) as unknown as TemplateStringsArray, ...params).execute(trx);
      return { rows: r.rows, numAffectedRows: Number(r.numAffectedRows ?? r.rows.length) };
    };
    return { exec, counted };
  };
  class Rollback extends Error {}
  /** runs `fn` in a transaction and rolls it back, returning what it returned */
  const rolledBack = async <T,>(fn: (trx: Kysely<Database>) => Promise<T>): Promise<T> => {
    let out: T;
    await db()
      .transaction()
      .execute(async (trx) => {
        out = await fn(trx);
        throw new Rollback();
      })
      .catch((e: unknown) => {
        if (!(e instanceof Rollback)) throw e;
      });
    return out!;
  };
  const stored = (seq: number, type: string, fields: Record<string, unknown>, at = t.clock.now().toISOString()): StoredEventRow => ({ event_id: crypto.randomUUID(), journal_id: 'j-unit', seq, type, at, received_at: at, payload: JSON.stringify({ type, ...fields }) });
  const columns = ['locker_uid', 'pup_uid', 'terminal_id', 'journal_id', 'seq', 'event_id', 'at', 'received_at', 'door', 'door_at', 'item', 'item_at', 'left_open_at', 'jammed_at', 'board_offline_at'] as const;
  const rowOf = async (trx: Kysely<Database>, lockerUid: string) => {
    const r = await trx.selectFrom('lock_observations').select(columns).where('locker_uid', '=', lockerUid).executeTakeFirst();
    return r ? { ...r, seq: Number(r.seq), item: r.item === null ? null : Number(r.item) } : null;
  };

  it('the batch leaves every row as event by event does, in fewer statements; a board event covers the board', async () => {
    const lockers = await db().selectFrom('lockers').select(['uid', 'bus', 'board_address', 'lock_number']).where('pup_uid', '=', PUP_A1).orderBy('bus').orderBy('board_address').orderBy('lock_number').execute();
    const [l1, l2] = lockers;
    const named = (l: (typeof lockers)[number], byUid = true) => ({ lockerUid: byUid ? l.uid : null, bus: l.bus, board: l.board_address, lock: l.lock_number });
    const events = [
      stored(1, 'doorOpened', { ...named(l1!), item: false }),
      stored(2, 'itemPlaced', named(l1!, false)),
      stored(3, 'credentialAccepted', {}), // not an observation
      stored(4, 'doorClosed', { ...named(l1!), item: true }),
      stored(5, 'jam', named(l2!)),
      stored(6, 'boardOffline', { bus: l1!.bus, board: l1!.board_address }),
      stored(7, 'doorOpened', { bus: 'bus9', board: 0, lock: 1, lockerUid: null, item: null }), // no locker sits there
      stored(5, 'itemRemoved', named(l1!)), // older than what the row holds: changes nothing
      // a lockerUid no locker of the point has: found by its bus, board and lock
      stored(8, 'doorOpened', { ...named(l2!), lockerUid: 'f'.repeat(32), item: false }),
    ];
    const uids = lockers.filter((l) => l.bus === l1!.bus && l.board_address === l1!.board_address).map((l) => l.uid);
    uids.push(l2!.uid);
    const one = await rolledBack(async (trx) => {
      const { exec, counted } = counting(trx);
      for (const e of events) await recordObservationWith(exec, log, 'term-a1', PUP_A1, e);
      return { rows: await Promise.all(uids.map((u) => rowOf(trx, u))), counted };
    });
    const batched = await rolledBack(async (trx) => {
      const { exec, counted } = counting(trx);
      const batch = new ObservationBatch(exec, log);
      for (const e of events) await batch.record('term-a1', PUP_A1, e);
      const beforeFlush = { ...counted };
      await batch.flush();
      return { rows: await Promise.all(uids.map((u) => rowOf(trx, u))), counted, beforeFlush };
    });
    expect(one.rows.every((r) => r !== null)).toBe(true);
    expect(batched.rows).toEqual(one.rows);
    // l1's row: three events (one by the lock alone), then the board's
    expect(batched.rows[0]).toMatchObject({ door: 'closed', item: 1, seq: 6, board_offline_at: events[5]!.at });
    expect(batched.rows.at(-1)).toMatchObject({ door: 'open', item: 0, seq: 8, jammed_at: null });
    // nothing written before the flush; then one write per locker that changed
    expect(batched.beforeFlush.writes).toBe(0);
    expect(batched.counted.writes).toBe(new Set(uids).size);
    expect(batched.counted.reads).toBeLessThan(one.counted.reads);
    expect(batched.counted.writes).toBeLessThan(one.counted.writes);
  });

  it('another writer changed the row between the read and the flush: the events are applied to the row it left', async () => {
    const l = await db().selectFrom('lockers').select(['uid', 'bus', 'board_address', 'lock_number']).where('pup_uid', '=', PUP_A1).orderBy('name').limit(1).offset(3).executeTakeFirstOrThrow();
    const lock = { lockerUid: l.uid, bus: l.bus, board: l.board_address, lock: l.lock_number };
    const earlier = new Date(t.clock.now().getTime() - 60_000).toISOString();
    const result = await rolledBack(async (trx) => {
      const { exec, counted } = counting(trx);
      await sql`DELETE FROM lock_observations WHERE locker_uid = ${l.uid}`.execute(trx);
      // the row as the batch reads it: an earlier observation of this terminal
      await recordObservationWith(exec, log, 'term-a1', PUP_A1, stored(1, 'doorClosed', { ...lock, item: false }, earlier));
      const batch = new ObservationBatch(exec, log);
      await batch.record('term-a1', PUP_A1, stored(2, 'doorOpened', { ...lock, item: false }));
      await batch.record('term-a1', PUP_A1, stored(3, 'itemPlaced', lock));
      // meanwhile another terminal of the point (a replacement) saw the door left open
      await sql`UPDATE lock_observations SET terminal_id = 'term-a1-new', journal_id = 'j-other', seq = 1, event_id = 'other', left_open_at = ${earlier}, at = ${earlier} WHERE locker_uid = ${l.uid}`.execute(trx);
      const before = { ...counted };
      await batch.flush();
      return { row: await rowOf(trx, l.uid), flush: { reads: counted.reads - before.reads, writes: counted.writes - before.writes } };
    });
    // the compare-and-set missed, the row was read again and both events applied to it: the
    // other writer's door-left-open is kept (neither event clears it), the door and the item are
    // the events'
    expect(result.flush).toEqual({ reads: 1, writes: 2 });
    expect(result.row).toMatchObject({ terminal_id: 'term-a1', journal_id: 'j-unit', seq: 3, door: 'open', item: 1, left_open_at: earlier });
  });
});
