// Two central instances share one PostgreSQL store, and an external broker's shared subscription
// hands each event to either of them, so both store and advance the same terminal (edge/ingest.ts,
// setup (b) of the fleet bench). Here a second connection plays the other instance: it holds a
// terminal's edge_terminals row, as that instance's apply does until its COMMIT. The store must
// not wait for it (the events are stored, their PUBACK can go); the apply must not wait for it
// either: it skips that terminal, applies the batch's other terminals, and takes the skipped one
// again until the row is free. Nothing is lost: the skipped terminal's events are applied, in
// order, once, and its cursor (applied_seq, last_seq) and acknowledgement follow; and when the
// instance stops while the terminal is still held, its events stay stored for the other
// instance's retry sweep.
import crypto from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EventMessage, parseMessage } from '@locker/common';
import { CentralService } from '../src/service';
import { createLogger } from '../src/logger';
import { createTestService, pgUrl, type TestService } from './support/harness';
import { waitFor } from './support/wait';
import { connectScriptedTerminal, type ScriptedTerminal } from './support/scripted-terminal';
import type { EdgeSync } from '../src/edge/sync';

const url = pgUrl();
(url ? describe : describe.skip)(`edge events [postgres]: a terminal whose cursor row another instance holds${url ? '' : ' (SKIPPED: PostgreSQL not reachable)'}`, () => {
  let t: TestService;
  let a1: ScriptedTerminal;
  let b1: ScriptedTerminal;
  let sync: EdgeSync;
  let holder: pg.Client;

  beforeAll(async () => {
    t = await createTestService('postgres', {
      config: { mqtt: { mode: 'embedded', host: '127.0.0.1', port: 0 }, edge: { pollMs: 50, retrySeconds: 3600, gapResendSeconds: 5, gapGiveUpSeconds: 600 } },
      startWorkers: true,
    });
    sync = t.ctx.workers.find((w) => w.name === 'edge-sync') as unknown as EdgeSync;
    a1 = await connectScriptedTerminal(t, 'term-a1', 'terminal-secret-a1');
    b1 = await connectScriptedTerminal(t, 'term-b1', 'terminal-secret-b1');
    holder = new pg.Client({ connectionString: url! });
    await holder.connect();
    await holder.query(`SET search_path TO ${t.pgSchema}`);
  });
  afterAll(async () => {
    await holder?.query('ROLLBACK').catch(() => undefined);
    await holder?.end().catch(() => undefined);
    a1?.close();
    b1?.close();
    await t?.close();
  });

  const db = () => t.ctx.db.kysely;
  const journals = { 'term-a1': crypto.randomUUID(), 'term-b1': crypto.randomUUID() };
  const event = (terminalId: 'term-a1' | 'term-b1', seq: number) => {
    const payload = Buffer.from(JSON.stringify({ v: 1, eventId: crypto.randomUUID(), seq, terminalId, journalId: journals[terminalId], at: t.clock.now().toISOString(), type: 'doorClosed', bus: 'bus0', board: 0, lock: 1, item: false }));
    return { terminalId, payload, ev: parseMessage(EventMessage, payload)! };
  };
  /** hands the events to the ingestion in one turn of the event loop; resolves once they are stored */
  const store = (events: ReturnType<typeof event>[]) => Promise.all(events.map((e) => sync.ingest.submit(e.terminalId, e.ev, e.payload)));
  const cursor = async (id: string) => {
    const r = await db().selectFrom('edge_terminals').select(['applied_seq', 'last_seq', 'journal_id']).where('terminal_id', '=', id).executeTakeFirstOrThrow();
    return { applied: Number(r.applied_seq), last: Number(r.last_seq), journal: r.journal_id };
  };
  const unprocessed = async (id: string) => (await db().selectFrom('edge_events').select('seq').where('terminal_id', '=', id).where('processed', '=', 0).orderBy('seq').execute()).map((r) => Number(r.seq));
  const within = <T>(p: Promise<T>, ms: number, what: string) => Promise.race([p, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms))]);

  it('the store does not wait for it; the apply skips it, applies the rest of the batch, and takes it again once the row is free', async () => {
    // each terminal's journal is known to its cursor first (the store sets it once, when unset)
    await store([event('term-a1', 1), event('term-b1', 1)]);
    await sync.ingest.idle();
    expect(await cursor('term-a1')).toEqual({ applied: 1, last: 1, journal: journals['term-a1'] });
    expect(await cursor('term-b1')).toEqual({ applied: 1, last: 1, journal: journals['term-b1'] });

    await holder.query('BEGIN');
    await holder.query("SELECT 1 FROM edge_terminals WHERE terminal_id = 'term-a1' FOR UPDATE");
    const skippedBefore = sync.ingest.stats.busySkipped;
    // stored while the row is held: the PUBACKs are not held behind the other instance's apply
    await within(store([event('term-a1', 2), event('term-a1', 3), event('term-b1', 2)]), 5000, 'storing while another instance holds the cursor row');
    // the batch's other terminal is applied meanwhile; the held one is skipped, its events kept
    await waitFor(async () => (await cursor('term-b1')).applied === 2, 'term-b1 applied while term-a1 is held');
    await waitFor(() => sync.ingest.stats.busySkipped > skippedBefore + 1, 'term-a1 skipped, and skipped again on its retry');
    expect(await cursor('term-a1')).toEqual({ applied: 1, last: 1, journal: journals['term-a1'] });
    expect(await unprocessed('term-a1')).toEqual([2, 3]);
    expect(a1.got.filter((g) => g.kind === 'eventAcks').map((g) => (g.body as { upTo: number }).upTo)).toEqual([1]);

    await holder.query('COMMIT');
    await waitFor(async () => (await cursor('term-a1')).applied === 3, 'term-a1 applied once its row is free');
    await sync.ingest.idle();
    expect(await cursor('term-a1')).toEqual({ applied: 3, last: 3, journal: journals['term-a1'] });
    expect(await unprocessed('term-a1')).toEqual([]);
    const outcomes = await db().selectFrom('edge_events').select(['seq', 'outcome']).where('terminal_id', '=', 'term-a1').orderBy('seq').execute();
    expect(outcomes.map((r) => [Number(r.seq), r.outcome])).toEqual([
      [1, 'stored'],
      [2, 'stored'],
      [3, 'stored'],
    ]);
    await waitFor(() => a1.got.some((g) => g.kind === 'eventAcks' && (g.body as { upTo: number }).upTo === 3), 'term-a1 acknowledged up to 3');
  });

  it('an instance that stops while the terminal is held leaves its events stored, and the other instance applies them', async () => {
    const before = await cursor('term-a1');
    await holder.query('BEGIN');
    await holder.query("SELECT 1 FROM edge_terminals WHERE terminal_id = 'term-a1' FOR UPDATE");
    const skipped = sync.ingest.stats.busySkipped;
    await within(store([event('term-a1', before.applied + 1), event('term-a1', before.applied + 2)]), 5000, 'storing while the row is held');
    await waitFor(() => sync.ingest.stats.busySkipped > skipped, 'term-a1 skipped');
    // the stop does not wait for the row: the skipped terminal's retry finds the ingestion stopped
    await within(t.svc.stop(), 10_000, 'stopping while another instance holds the cursor row');
    await holder.query('COMMIT');
    // read on the holder's connection: this service's pool is closed
    const held = await holder.query("SELECT seq FROM edge_events WHERE terminal_id = 'term-a1' AND processed = 0 ORDER BY seq");
    expect(held.rows.map((r) => Number(r.seq))).toEqual([before.applied + 1, before.applied + 2]);
    const cur = await holder.query("SELECT applied_seq FROM edge_terminals WHERE terminal_id = 'term-a1'");
    expect(Number(cur.rows[0].applied_seq)).toBe(before.applied);
    // the other instance, on the same store: its retry sweep (the first at its start, then every edge.retrySeconds) applies them
    const other = new CentralService({ config: t.ctx.config, clock: t.clock, log: createLogger({ level: 'silent' }), pgSchema: t.pgSchema, startWorkers: true });
    try {
      const octx = await other.start();
      const ocursor = async () => {
        const r = await octx.db.kysely.selectFrom('edge_terminals').select(['applied_seq', 'last_seq']).where('terminal_id', '=', 'term-a1').executeTakeFirstOrThrow();
        return { applied: Number(r.applied_seq), last: Number(r.last_seq) };
      };
      await waitFor(async () => (await ocursor()).applied === before.applied + 2, 'the other instance applied the stored events');
      expect(await ocursor()).toEqual({ applied: before.applied + 2, last: before.applied + 2 });
      const left = await octx.db.kysely.selectFrom('edge_events').select('seq').where('terminal_id', '=', 'term-a1').where('processed', '=', 0).execute();
      expect(left).toEqual([]);
    } finally {
      await other.stop();
    }
  });
});
