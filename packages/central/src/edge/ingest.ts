// Terminal events in, in batches (docs/edge-protocol.md "Order and acknowledgement", issue 15).
//
// Every up/events message the broker hands over joins a queue; one drain loop per central
// instance works it off in two kinds of transaction, each a batch of whatever arrived meanwhile:
//
// 1. store: the batch's events are inserted into edge_events (deduplicated by event id); one
//    COMMIT for the batch. The terminal's edge_terminals row is not written (only created, and
//    its journal id set the first time one shows), so a store does not wait for an apply holding
//    that row (but for that first journal id). Only then is each event's handler resolved, which
//    lets the broker send its PUBACK (beforeAck).
// 2. apply: the terminals of stored batches are advanced, each from its applied_seq in its
//    journal's seq order, in one transaction (one COMMIT, one fsync on SQLite, for up to
//    APPLY_MAX events): the cursor row is read once per terminal (row-locked on PostgreSQL, so
//    instances sharing the work advance a terminal one at a time: a terminal another instance is
//    advancing is skipped, not waited for, and taken again shortly), its unprocessed events are
//    read once, each event is applied, and the cursor (with last_seq, the highest seq stored) is
//    written once. After the COMMIT, each terminal gets one down/eventAcks with its committed
//    prefix. The batch runs first without a savepoint per event; should an event fail, that
//    attempt is rolled back whole and the batch runs again with each event inside a SAVEPOINT
//    (a failing one is rolled back alone: rejected for good when the shipment service refuses
//    it, left unprocessed and retried when it failed for a transient reason, which holds its
//    later events). A savepoint per event was most of an event's cost: on SQLite each RELEASE
//    walks the batch's in-memory sub-journal (O(n^2) in the batch), on PostgreSQL it is round
//    trips.
//
// A store batch that fails is stored again event by event (a bad event cannot keep the others'
// PUBACK back); an apply batch that fails is applied again terminal by terminal. Door events run
// the shipment service's transition in the batch's transaction (ShipmentService.applyLockerAccessIn),
// which is a job of the service's runner: on SQLite it joins the group commit with bookings.
// The store is committed before the apply reads, so whichever instance stores an event last sees
// every earlier one (the argument of the unbatched design still holds).
import type { EventAck, EventMessage } from '@locker/common';
import { AccessDoneFields, edgeTopics } from '@locker/common';
import { CompiledQuery } from 'kysely';
import type { AppContext } from '../context';
import type { Logger } from '../logger';
import type { MessageBus } from '../mqtt/bus';
import { ApiError } from '../errors';
import { newUid, toDbTime } from '../ids';
import { centralMetrics } from '../ops/metrics';
import { shipmentService } from '../shipments/service';
import { rawQuery, sqliteStatement } from '../shipments/sqlq';
import { isPgDataError, isRetryablePgError, type Trx } from '../shipments/tx';
import { doorTime } from './clock';
import { ObservationBatch, recordObservationWith, type ObsExec } from './observations';

/** at most this many events in one store transaction */
const STORE_MAX = 1000;
/** apply transactions take terminals until this many of their events arrived (one terminal may hold more) */
const APPLY_MAX = 512;
/** unprocessed events of one terminal read at once */
const PENDING_READ = 2000;
const INSERT_CHUNK = 400;
/** apply loops side by side on PostgreSQL (each holds a pool connection while it runs) */
const APPLY_LOOPS_PG = 4;
/**
 * A terminal another instance is advancing is taken again after this long (PostgreSQL), doubled
 * for each time in a row it was found busy, up to BUSY_RETRY_MAX_MS.
 */
const BUSY_RETRY_MS = 10;
const BUSY_RETRY_MAX_MS = 500;

interface Arrival {
  terminalId: string;
  ev: EventMessage;
  payload: Buffer;
  resolve: () => void;
  reject: (err: unknown) => void;
  attempts: number;
}

interface PendingRow {
  event_id: string;
  journal_id: string | null;
  seq: number;
  type: string;
  at: string;
  received_at: string;
  payload: string;
}

interface CursorRow {
  applied_seq: number | string | null;
  last_seq: number | string;
  journal_id: string | null;
  /** the journal the terminal's last online status names (null: not named, an older agent) */
  live_journal_id: string | null;
  /** the live journal that one replaced (its events all came before the live journal's) */
  previous_live_journal_id: string | null;
  gap_since: string | null;
  clock_offset_ms: number | string | null;
  clock_skewed: number | null;
  pup_uid: string | null;
}

/** How a door event is applied: again after a refusal (`replayOf`: its outcome now), and who hears of a shipment it changed. */
interface DoorControl {
  replayOf?: string;
  /** applied again only when its code's shipment is one of these */
  only?: ReadonlySet<string>;
  changed?: (shipmentUid: string) => void;
  /** the event was claimed and its outcome written */
  applied?: () => void;
}

/** What an apply transaction leaves to do after its COMMIT (built again on a retried attempt). */
interface AfterCommit {
  acks: { terminalId: string; msg: EventAck }[];
  logs: (() => void)[];
  resendAsked: [string, number][];
  /** events acted on (stats.applied, counted once the transaction commits) */
  applied: number;
  /** events that failed (refused or a transient failure) in an attempt with savepoints */
  failed: number;
  /** terminals skipped: another instance holds their cursor row (PostgreSQL); taken again shortly */
  busy: string[];
}

/**
 * An event failed while its batch ran without a savepoint per event: the batch's job is rolled
 * back whole and runs again with one savepoint per event (applyBatch), which isolates the event.
 */
class RedoWithSavepoints extends Error {
  constructor(override readonly cause: unknown) {
    super(`an event failed in a batch without savepoints: ${(cause as Error)?.message ?? String(cause)}`);
  }
}

const EVENT_INSERT = 'INSERT INTO edge_events (event_id, terminal_id, journal_id, seq, type, at, received_at, payload, processed, outcome, attempts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, NULL, 0) ON CONFLICT (event_id) DO NOTHING';
const CURSOR_SQL = 'SELECT e.applied_seq, e.last_seq, e.journal_id, e.live_journal_id, e.previous_live_journal_id, e.gap_since, e.clock_offset_ms, e.clock_skewed, t.pup_uid FROM edge_terminals e LEFT JOIN terminals t ON t.id = e.terminal_id WHERE e.terminal_id = ?';
/**
 * PostgreSQL: the cursor row locked for the transaction, or no row when another transaction holds
 * it (an apply of another instance, a status write): the terminal is taken again shortly rather
 * than waited for. Waiting held this apply's whole batch, and the other instance's store, behind
 * the other apply's COMMIT (setup (b) of the fleet bench, docs/benchmarks.md).
 */
const CURSOR_LOCK_PG = `${CURSOR_SQL} FOR UPDATE OF e SKIP LOCKED`;
const CURSOR_EXISTS = 'SELECT 1 AS n FROM edge_terminals WHERE terminal_id = ?';
/** a provisioned terminal and the journal id of its edge_terminals row (has_row null: no row yet) */
interface CursorOfRow {
  id: string;
  has_row: string | null;
  journal_id: string | null;
  applied_seq: number | string | null;
}
interface StoreResult {
  fresh: Set<string>;
  unknown: Set<string>;
}
const STORE_CURSOR_SQLITE = 'SELECT t.id, e.terminal_id AS has_row, e.journal_id, e.applied_seq FROM terminals t LEFT JOIN edge_terminals e ON e.terminal_id = t.id WHERE t.id = ?';
const STORE_CURSORS_PG = 'SELECT t.id, e.terminal_id AS has_row, e.journal_id, e.applied_seq FROM terminals t LEFT JOIN edge_terminals e ON e.terminal_id = t.id WHERE t.id = ANY(?)';
const EDGE_TERMINAL_INSERT = 'INSERT INTO edge_terminals (terminal_id, epoch, codes_version, online, status_at, last_status, last_seq, updated_at) VALUES (?, ?, 0, 0, NULL, NULL, 0, ?) ON CONFLICT (terminal_id) DO NOTHING';
/** once per terminal: the first journal id it shows (the apply moves it on from there); its seq continues the count of applied_seq (an agent updated in place keeps its store) */
const PATCH_JOURNAL = 'UPDATE edge_terminals SET journal_id = ? WHERE terminal_id = ? AND journal_id IS NULL';
/** an event of an agent older than journal ids stored at this seq (PATCH_NEW_JOURNAL) */
const LEGACY_AT_SEQ = 'SELECT 1 AS n FROM edge_events WHERE terminal_id = ? AND journal_id IS NULL AND seq = ? AND event_id <> ? LIMIT 1';
/** records a journal of a terminal the first time it is seen (edge_journals.generation: the order of first sight; edge/sync.ts) */
export const JOURNAL_SEEN = 'INSERT INTO edge_journals (terminal_id, journal_id, first_seen_at) VALUES (?, ?, ?) ON CONFLICT (terminal_id, journal_id) DO NOTHING';
/** the same for a journal of a new store (an event of it at or below the count: its seq started at 1 again): it counts from 0, not on from the events of an agent older than journal ids */
const PATCH_NEW_JOURNAL = 'UPDATE edge_terminals SET journal_id = ?, applied_seq = 0, gap_since = NULL WHERE terminal_id = ? AND journal_id IS NULL';
/** the event at a seq of a terminal journal, processed already (advanceIn: one to step over?) */
const PROCESSED_AT_JOURNAL = 'SELECT 1 AS n FROM edge_events WHERE terminal_id = ? AND journal_id = ? AND seq = ? AND processed = 1';
const PROCESSED_AT_LEGACY = 'SELECT 1 AS n FROM edge_events WHERE terminal_id = ? AND journal_id IS NULL AND seq = ? AND processed = 1';
/** the events of a terminal journal after a seq, in order, with whether each is processed (advanceIn steps over a run of processed ones) */
const STEP_READ = 1000;
const STEP_JOURNAL = `SELECT seq, processed FROM edge_events WHERE terminal_id = ? AND journal_id = ? AND seq > ? ORDER BY seq LIMIT ${STEP_READ}`;
const STEP_LEGACY = `SELECT seq, processed FROM edge_events WHERE terminal_id = ? AND journal_id IS NULL AND seq > ? ORDER BY seq LIMIT ${STEP_READ}`;
/** door events of a terminal journal after a seq that were refused for their shipment's state or code (applyLate, replayOne) */
const REFUSED_AFTER = "SELECT event_id, journal_id, seq, type, at, received_at, payload, outcome FROM edge_events WHERE terminal_id = ? AND journal_id = ? AND seq > ? AND processed = 1 AND type IN ('dropOff', 'pickUp') AND outcome IN ('rejected:InvalidShipmentState', 'rejected:InvalidAccessCode') ORDER BY seq";
/** a journal of the terminal with an event applied already (an old journal, not one waiting for its seq 1) */
const JOURNAL_APPLIED = 'SELECT 1 AS n FROM edge_events WHERE terminal_id = ? AND journal_id = ? AND processed = 1 LIMIT 1';
const PENDING_SQL = `SELECT event_id, journal_id, seq, type, at, received_at, payload FROM edge_events WHERE processed = 0 AND terminal_id = ? ORDER BY seq LIMIT ${PENDING_READ}`;
/**
 * The events of a terminal's advance whose outcome is 'stored' (no door transition), finished
 * together: PostgreSQL in one statement (one round trip); SQLite one cached statement each (no
 * round trip to save; `IN (SELECT value FROM json_each(?))` scanned the table: twice the CPU per event)
 */
const FINISH_STORED_PG = "UPDATE edge_events SET processed = 1, outcome = 'stored' WHERE event_id = ANY(?) AND processed = 0";
const FINISH_ONE = 'UPDATE edge_events SET processed = 1, outcome = ? WHERE event_id = ? AND processed = 0';

export interface IngestHost {
  readonly ctx: AppContext;
  readonly bus: MessageBus;
  readonly log: Logger;
  running(): boolean;
}

export class EventIngest {
  private arrivals: Arrival[] = [];
  /** terminals to advance, with the journals of the events that arrived for them (null: a retry or a legacy event) */
  private toApply = new Map<string, { journals: Set<string | null>; events: number; waiters: (() => void)[] }>();
  /** the store loop and the apply loop: they run side by side (see kickStore) */
  private storing: Promise<void> | null = null;
  /** apply loops running (PostgreSQL: up to APPLY_LOOPS_PG side by side, on terminals of their own) */
  private readonly applying = new Set<Promise<void>>();
  /** terminals in an apply batch right now: no other loop of this instance takes them meanwhile */
  private readonly inApply = new Set<string>();
  /** terminals skipped as busy, waiting out their back-off before they are queued again (idle() waits for them) */
  private readonly busyRetries = new Set<Promise<void>>();
  /** the pending retry of each busy terminal: a terminal found busy again meanwhile joins it (one timer per terminal) */
  private readonly busyPending = new Map<string, { journals: Set<string | null>; events: number; waiters: (() => void)[] }>();
  /** how many times in a row each terminal was found busy (cleared once it is advanced) */
  private readonly busyRuns = new Map<string, number>();
  /** when each terminal was last asked to resend from a gap (ms) */
  private readonly resendAsked = new Map<string, number>();
  /** PostgreSQL transactions whose last event savepoint is not released yet (savepoint()) */
  private readonly releasePending = new WeakSet<Trx>();
  /**
   * The last apply batch had an event that failed: the next one runs with a savepoint per event
   * from the start rather than twice (a terminal whose event keeps failing is in every batch until
   * the cause is gone). A batch with savepoints in which nothing failed clears it.
   */
  private savepointsFirst = false;
  readonly stats = { storeBatches: 0, stored: 0, applyBatches: 0, applied: 0, maxStoreBatch: 0, maxApplyBatch: 0, redoneWithSavepoints: 0, withSavepointsFirst: 0, busySkipped: 0 };

  constructor(private readonly host: IngestHost) {}

  private get ctx(): AppContext {
    return this.host.ctx;
  }

  private get log(): Logger {
    return this.host.log;
  }

  private nowDb(): string {
    return toDbTime(this.ctx.clock.now());
  }

  /** Queues a parsed event; resolves once it is stored (committed), rejects when it cannot be. */
  submit(terminalId: string, ev: EventMessage, payload: Buffer): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.arrivals.push({ terminalId, ev, payload, resolve, reject, attempts: 0 });
      this.kick();
    });
  }

  /** Advances these terminals (their unprocessed events); resolves after the batch that did it. */
  advance(terminalIds: readonly string[]): Promise<void> {
    if (!terminalIds.length) return Promise.resolve();
    return new Promise<void>((resolve) => {
      let left = terminalIds.length;
      for (const id of terminalIds) this.queueApply(id, null, 0, () => --left === 0 && resolve());
      this.kick();
    });
  }

  /** Resolves when nothing is queued or being worked on. */
  async idle(): Promise<void> {
    while (this.storing || this.applying.size || this.busyRetries.size) await Promise.all([this.storing, ...this.applying, ...this.busyRetries]);
  }

  private queueApply(terminalId: string, journal: string | null, events: number, waiter?: () => void): void {
    let e = this.toApply.get(terminalId);
    if (!e) this.toApply.set(terminalId, (e = { journals: new Set(), events: 0, waiters: [] }));
    e.journals.add(journal);
    e.events += events;
    if (waiter) e.waiters.push(waiter);
  }

  private kick(): void {
    this.kickStore();
    this.kickApply();
  }

  /**
   * The store loop does not wait for the apply: an event's PUBACK means "stored", and the broker
   * hands over only so many unacknowledged messages at a time (an external broker's in-flight
   * window, e.g. Mosquitto's max_inflight_messages of 20), so a store waiting behind an apply
   * batch held the whole window back for the apply's length: about 20 events per apply cycle. The
   * apply loop takes the terminals of committed stores, so it still reads only what is committed.
   */
  private kickStore(): void {
    if (this.storing || !this.arrivals.length) return;
    // what arrives in this turn of the event loop joins the first batch
    this.storing = new Promise<void>((r) => setImmediate(r))
      .then(async () => {
        while (this.arrivals.length) {
          await this.storeBatch(this.arrivals.splice(0, STORE_MAX));
          this.kickApply();
        }
      })
      .catch((err) => this.log.error({ err: (err as Error).message }, 'edge event ingestion failed'))
      .finally(() => {
        this.storing = null;
        this.kick();
      });
  }

  /**
   * Starts apply loops while there are terminals to advance that no loop holds. On PostgreSQL up to
   * APPLY_LOOPS_PG run side by side, each its own transaction on its own connection over terminals
   * of its own: an apply is a chain of round trips (a few per event), so one loop leaves the
   * service mostly waiting. Terminals are locked in the order of their ids in every loop and
   * instance, as before. SQLite: one loop (one writer).
   */
  private kickApply(): void {
    const loops = this.ctx.db.engine === 'postgres' ? APPLY_LOOPS_PG : 1;
    while (this.applying.size < loops && this.eligible()) {
      const p: Promise<void> = new Promise<void>((r) => setImmediate(r))
        .then(() => this.drainApply())
        .catch((err) => this.log.error({ err: (err as Error).message }, 'edge event ingestion failed'))
        .finally(() => {
          this.applying.delete(p);
          this.kick();
        });
      this.applying.add(p);
    }
  }

  /** a terminal waits to be advanced that no apply loop holds */
  private eligible(): boolean {
    for (const id of this.toApply.keys()) if (!this.inApply.has(id)) return true;
    return false;
  }

  private async drainApply(): Promise<void> {
    while (this.toApply.size) {
      if (!this.host.running()) {
        // stopped: what is stored stays unprocessed, the next start's retry applies it
        for (const e of this.toApply.values()) for (const w of e.waiters) w();
        this.toApply.clear();
        this.busyRuns.clear();
        continue;
      }
      const batch = new Map<string, { journals: Set<string | null>; events: number; waiters: (() => void)[] }>();
      let events = 0;
      for (const [id, e] of this.toApply) {
        if (this.inApply.has(id)) continue; // another loop advances it; it is taken again after that
        if (batch.size && events + e.events > APPLY_MAX) break;
        batch.set(id, e);
        events += e.events;
      }
      if (!batch.size) return;
      for (const id of batch.keys()) {
        this.toApply.delete(id);
        this.inApply.add(id);
      }
      let busy = new Set<string>();
      try {
        busy = await this.applyBatch(batch);
      } finally {
        for (const id of batch.keys()) this.inApply.delete(id);
        for (const [id, e] of batch) {
          if (busy.has(id)) this.retryBusy(id, e);
          else {
            this.busyRuns.delete(id);
            for (const w of e.waiters) w();
          }
        }
      }
      this.kickApply();
    }
  }

  /**
   * Another instance holds the terminal's cursor row (PostgreSQL): queued again, with its journals
   * and waiters, after a back-off (BUSY_RETRY_MS, doubled each time in a row, at most
   * BUSY_RETRY_MAX_MS). Its events stored here may be ones that instance's apply read too early to
   * see, so they are not left to it.
   */
  private retryBusy(terminalId: string, e: { journals: Set<string | null>; events: number; waiters: (() => void)[] }): void {
    this.stats.busySkipped++;
    const pending = this.busyPending.get(terminalId);
    if (pending) {
      // a retry is already waiting (another loop's batch found it busy too): one timer per terminal
      for (const j of e.journals) pending.journals.add(j);
      pending.events += e.events;
      pending.waiters.push(...e.waiters);
      return;
    }
    const mine = { journals: new Set(e.journals), events: e.events, waiters: [...e.waiters] };
    this.busyPending.set(terminalId, mine);
    const runs = this.busyRuns.get(terminalId) ?? 0;
    this.busyRuns.set(terminalId, runs + 1);
    const delay = Math.min(BUSY_RETRY_MS * 2 ** runs, BUSY_RETRY_MAX_MS);
    const p: Promise<void> = new Promise<void>((r) => setTimeout(r, delay)).then(() => {
      this.busyRetries.delete(p);
      this.busyPending.delete(terminalId);
      for (const j of mine.journals) this.queueApply(terminalId, j, 0);
      const q = this.toApply.get(terminalId)!;
      q.events += mine.events;
      q.waiters.push(...mine.waiters);
      this.kick();
    });
    this.busyRetries.add(p);
  }

  // ------------------------------------------------------------------ store

  private async storeBatch(batch: Arrival[]): Promise<void> {
    try {
      const r = await shipmentService(this.ctx).tx.run((trx) => this.storeIn(trx, batch));
      this.stored(batch, r);
    } catch (err) {
      if (batch.length > 1) this.log.warn({ err: (err as Error).message, events: batch.length }, 'storing a batch of terminal events failed; storing them one by one');
      for (const a of batch) {
        try {
          this.stored([a], await shipmentService(this.ctx).tx.run((trx) => this.storeIn(trx, [a])));
        } catch (e) {
          this.storeLater(a, e);
        }
      }
    }
  }

  private stored(all: Arrival[], { fresh, unknown }: StoreResult): void {
    const arrivals: Arrival[] = [];
    for (const a of all) {
      if (!unknown.has(a.terminalId)) arrivals.push(a);
      else {
        this.log.warn({ terminal: a.terminalId }, 'event from a terminal that is not provisioned dropped');
        a.resolve();
      }
    }
    if (!arrivals.length) return;
    this.stats.storeBatches++;
    this.stats.stored += arrivals.length;
    this.stats.maxStoreBatch = Math.max(this.stats.maxStoreBatch, arrivals.length);
    for (const a of arrivals) {
      const isFresh = fresh.has(a.ev.eventId);
      centralMetrics.edgeEvents.inc({ type: a.ev.type, outcome: isFresh ? 'stored' : 'duplicate' });
      if (!isFresh) this.log.debug({ terminal: a.terminalId, seq: a.ev.seq }, 'repeated event ignored');
      // applied in the journal's seq order: this one and what it unblocks, or held for a gap before
      // it; then the terminal learns how far its journal is committed (down/eventAcks)
      this.queueApply(a.terminalId, a.ev.journalId ?? null, 1);
      a.resolve();
    }
  }

  /** A store that failed on its own: tried again after a back-off (its PUBACK waits), refused once the sync stops. */
  private storeLater(a: Arrival, err: unknown): void {
    if (!this.host.running()) {
      a.reject(err);
      return;
    }
    this.log.error({ err: (err as Error).message, terminal: a.terminalId, seq: a.ev.seq }, 'storing a terminal event failed; retrying');
    const delay = Math.min(100 * 2 ** a.attempts++, 5000);
    setTimeout(() => {
      this.arrivals.push(a);
      this.kick();
    }, delay).unref?.();
  }

  /**
   * Stores the events of provisioned terminals; returns the ids of those that were new, and the
   * terminals that are not provisioned (their events are dropped, nothing of them written).
   * Fixed SQL texts (sqlq.rawQuery): no query built per batch or per terminal.
   */
  private async storeIn(trx: Trx, all: Arrival[]): Promise<StoreResult> {
    const exec = this.exec(trx);
    const pg = this.ctx.db.engine === 'postgres';
    const now = this.nowDb();
    const ids = [...new Set(all.map((a) => a.terminalId))];
    // the provisioned terminals with an edge_terminals row, and its journal id (the store writes
    // nothing else of it)
    const journalOf = new Map<string, string | null>();
    const noCursor: string[] = [];
    /** the cursor's applied_seq, per terminal (a pre-journal cursor's count: PATCH_NEW_JOURNAL) */
    const appliedOf = new Map<string, number>();
    const take = (r: CursorOfRow) => {
      if (r.has_row === null) noCursor.push(r.id);
      else {
        journalOf.set(r.id, r.journal_id ?? null);
        appliedOf.set(r.id, Number(r.applied_seq ?? 0));
      }
    };
    if (pg) for (const r of (await exec<CursorOfRow>(STORE_CURSORS_PG, [ids])).rows) take(r);
    else for (const id of ids) for (const r of (await exec<CursorOfRow>(STORE_CURSOR_SQLITE, [id])).rows) take(r);
    if (noCursor.length) {
      for (const id of noCursor) await exec(EDGE_TERMINAL_INSERT, [id, newUid(), now]);
      for (const id of noCursor) {
        const r = (await exec<CursorOfRow>(STORE_CURSOR_SQLITE, [id])).rows[0];
        if (r && r.has_row !== null) take(r);
      }
    }
    const unknown = new Set(ids.filter((id) => !journalOf.has(id)));
    const arrivals = unknown.size ? all.filter((a) => !unknown.has(a.terminalId)) : all;
    const seen = new Set<string>();
    const rows = [];
    for (const a of arrivals) {
      if (seen.has(a.ev.eventId)) continue;
      seen.add(a.ev.eventId);
      rows.push({ event_id: a.ev.eventId, terminal_id: a.terminalId, journal_id: a.ev.journalId ?? null, seq: a.ev.seq, type: a.ev.type, at: a.ev.at, received_at: now, payload: a.payload.toString('utf8'), processed: 0 as const, outcome: null, attempts: 0 });
    }
    const fresh = new Set<string>();
    if (this.ctx.db.engine === 'sqlite') {
      // one cached prepared statement per row (synchronous, on the transaction's connection): cheaper
      // than building a multi-row insert through Kysely
      for (const r of rows) {
        const res = await exec(EVENT_INSERT, [r.event_id, r.terminal_id, r.journal_id, r.seq, r.type, r.at, r.received_at, r.payload]);
        if (res.numAffectedRows === 1) fresh.add(r.event_id);
      }
    } else {
      for (let i = 0; i < rows.length; i += INSERT_CHUNK) {
        const r = await trx
          .insertInto('edge_events')
          .values(rows.slice(i, i + INSERT_CHUNK))
          .onConflict((oc) => oc.column('event_id').doNothing())
          .returning('event_id')
          .execute();
        for (const x of r) fresh.add(x.event_id);
      }
    }
    // The first journal id a terminal shows names the journal whose seq applied_seq already counts
    // (an agent updated in place keeps its store and its count, and sends on above it), unless an
    // event of that journal new here is its seq 1 or counts a seq again that the old count holds:
    // a new store (a replaced terminal computer), counting from 1 again, whichever of its events is stored first (two instances
    // behind a shared subscription store them in any order). Kept at the old count, its first
    // events were applied as late events and acknowledged up to the old count, past what the
    // terminal had sent (events it then counted as committed). Nothing else of the row is written
    // here: the highest seq stored (last_seq) is written by the apply, which holds the row anyway.
    const journals = new Map<string, { id: string; fromOne: boolean }>();
    // every journal seen outside the terminal's cursor journal, in the order first seen
    // (edge_journals, migration 413: a status naming one seen before the live one is stale)
    const sighted = new Set<string>();
    for (const a of arrivals) {
      const journalId = a.ev.journalId ?? null;
      if (!journalId || !fresh.has(a.ev.eventId)) continue;
      const cursorJournal = journalOf.get(a.terminalId) ?? null;
      if (journalId !== cursorJournal) sighted.add(`${a.terminalId}\u0000${journalId}`);
      if (cursorJournal !== null) continue;
      // its seq 1, or a seq the old count already holds with another event (a seq counted again);
      // not one of the old count's given-up seqs coming at last with the journal id of an agent
      // updated in place (no event stored there)
      const anew = a.ev.seq <= (appliedOf.get(a.terminalId) ?? 0) && (a.ev.seq === 1 || (await exec(LEGACY_AT_SEQ, [a.terminalId, a.ev.seq, a.ev.eventId])).rows.length > 0);
      const first = journals.get(a.terminalId);
      if (!first) journals.set(a.terminalId, { id: journalId, fromOne: anew });
      else if (first.id === journalId && anew) first.fromOne = true;
    }
    // in the order of terminal ids, as the apply locks them: fewer deadlocks between instances (PostgreSQL retries those)
    for (const key of [...sighted].sort()) {
      const [terminalId, journalId] = key.split('\u0000') as [string, string];
      await exec(JOURNAL_SEEN, [terminalId, journalId, now]);
    }
    for (const id of [...journals.keys()].sort()) {
      const j = journals.get(id)!;
      await exec(j.fromOne ? PATCH_NEW_JOURNAL : PATCH_JOURNAL, [j.id, id]);
    }
    return { fresh, unknown };
  }

  // ------------------------------------------------------------------ apply

  /** Advances the batch's terminals; returns those skipped because another instance holds them. */
  private async applyBatch(batch: Map<string, { journals: Set<string | null> }>): Promise<Set<string>> {
    // a fixed order: instances that lock the same terminals lock them in the same order
    const ids = [...batch.keys()].sort();
    const svc = shipmentService(this.ctx);
    const fresh = (): AfterCommit => ({ acks: [], logs: [], resendAsked: [], applied: 0, failed: 0, busy: [] });
    let after = fresh();
    // First without a savepoint per event: nearly every event applies, and a savepoint per event
    // is what an event cost most on SQLite (RELEASE walks the in-memory sub-journal of the whole
    // batch, so a batch of n events paid O(n^2): 70 us per event at 500 events) and two round
    // trips on PostgreSQL. Should any event fail, that attempt is rolled back whole and the batch
    // runs again with a savepoint per event, which keeps the failing event's writes out and lets
    // the others apply: the outcome is the same as with savepoints from the start. After a batch
    // in which an event failed, the next starts with savepoints (savepointsFirst).
    const runAll = (savepoints: boolean) =>
      svc.tx.run(async (trx) => {
        after = fresh(); // a retried attempt (PostgreSQL) starts over
        for (const id of ids) await this.advanceIn(trx, id, batch.get(id)!.journals, after, savepoints);
      });
    try {
      const first = this.savepointsFirst;
      if (first) this.stats.withSavepointsFirst++;
      try {
        await runAll(first);
      } catch (err) {
        if (first || !(err instanceof RedoWithSavepoints)) throw err;
        this.stats.redoneWithSavepoints++;
        await runAll(true);
      }
      this.savepointsFirst = after.failed > 0;
      this.stats.applyBatches++;
      this.stats.applied += after.applied;
      this.stats.maxApplyBatch = Math.max(this.stats.maxApplyBatch, ids.length);
      this.afterCommit(after);
      return new Set(after.busy);
    } catch (err) {
      if (ids.length > 1) this.log.warn({ err: (err as Error).message, terminals: ids.length }, 'applying a batch of terminal events failed; applying terminal by terminal');
      const busy = new Set<string>();
      for (const id of ids) {
        let one = fresh();
        try {
          await svc.tx.run(async (trx) => {
            one = fresh();
            await this.advanceIn(trx, id, batch.get(id)!.journals, one, true);
          });
          this.stats.applied += one.applied;
          this.afterCommit(one);
          for (const b of one.busy) busy.add(b);
        } catch (e) {
          this.log.error({ err: (e as Error).message, terminal: id }, 'applying terminal events failed; retried');
        }
      }
      return busy;
    }
  }

  private afterCommit(after: AfterCommit): void {
    for (const [id, at] of after.resendAsked) this.resendAsked.set(id, at);
    for (const l of after.logs) l();
    for (const { terminalId, msg } of after.acks) {
      // not awaited: lost, the terminal sends the events again and is acknowledged then
      this.host.bus.publish(edgeTopics.down(terminalId, 'eventAcks'), JSON.stringify(msg), { qos: 1 }).catch((err) => {
        this.log.warn({ terminal: terminalId, err: (err as Error).message }, 'event acknowledgement not published');
      });
    }
  }

  private exec(trx: Trx): ObsExec {
    const db = this.ctx.db;
    return <R>(text: string, params: readonly unknown[]) => rawQuery<R>(trx, db, text, params);
  }

  /**
   * SAVEPOINT / RELEASE / ROLLBACK TO around one event. SQLite: straight on the handle, as tx.ts
   * does. PostgreSQL: each is a round trip, so the RELEASE of an event that succeeded is sent
   * with the next event's SAVEPOINT in one simple query (`releasePending`), and a rollback with
   * its RELEASE; a savepoint left unreleased at the end is released by the COMMIT. Statements run
   * between (the cursor, the next terminal's reads) belong to a savepoint no one rolls back to.
   */
  private async savepoint(trx: Trx, what: 'begin' | 'release' | 'rollback'): Promise<void> {
    const db = this.ctx.db;
    if (db.engine === 'sqlite') {
      if (what === 'begin') sqliteStatement(db.sqlite!, 'SAVEPOINT edge_event').run();
      else {
        if (what === 'rollback') sqliteStatement(db.sqlite!, 'ROLLBACK TO SAVEPOINT edge_event').run();
        sqliteStatement(db.sqlite!, 'RELEASE SAVEPOINT edge_event').run();
      }
      return;
    }
    if (what === 'release') {
      this.releasePending.add(trx);
      return;
    }
    const pending = this.releasePending.delete(trx);
    const text = what === 'begin' ? (pending ? 'RELEASE SAVEPOINT edge_event; SAVEPOINT edge_event' : 'SAVEPOINT edge_event') : 'ROLLBACK TO SAVEPOINT edge_event; RELEASE SAVEPOINT edge_event';
    await trx.executeQuery(CompiledQuery.raw(text));
  }

  /**
   * Applies a terminal's stored events in seq order from its applied_seq on, as far as they are
   * contiguous, inside the batch's transaction; queues its acknowledgement. A missing seq holds the
   * later ones (they stay stored, unprocessed: bounded by the database, not memory); after
   * edge.gapResendSeconds the terminal is asked to send again from the gap, after
   * edge.gapGiveUpSeconds the gap is skipped (an error in the log); an event the cursor is past
   * when it comes (lateEvents) is applied late, first. The cursor row is locked
   * (PostgreSQL: FOR UPDATE SKIP LOCKED; SQLite has one writer) for the transaction, applied_seq
   * still moves by compare-and-set and each door event is claimed in the transaction that applies
   * it. A row another transaction holds is not waited for: the terminal goes to `after.busy` and
   * is taken again shortly (its stored events stay unprocessed until then; none is lost).
   */
  private async advanceIn(trx: Trx, terminalId: string, arrived: Set<string | null>, after: AfterCommit, savepoints: boolean): Promise<void> {
    const exec = this.exec(trx);
    const pg = this.ctx.db.engine === 'postgres';
    const cur = (await exec<CursorRow>(pg ? CURSOR_LOCK_PG : CURSOR_SQL, [terminalId])).rows[0];
    if (!cur) {
      // no row, or (PostgreSQL) a row someone else holds
      if (pg && (await exec(CURSOR_EXISTS, [terminalId])).rows.length) after.busy.push(terminalId);
      return;
    }
    const start = { applied: Number(cur.applied_seq ?? 0), journal: cur.journal_id ?? null, gap: cur.gap_since ?? null };
    let applied = start.applied;
    let journal = start.journal;
    let gapSince = start.gap;
    let resendFrom: number | undefined;
    const done = new Set<string>();
    // Events that only record what they say ('stored': the lock's observation, no door
    // transition) are marked processed together, in one statement per advance instead of one per
    // event (on PostgreSQL a round trip each: most of a journal's events are of this kind). Same
    // transaction, the terminal's cursor row locked: no one else processes them meanwhile. Written
    // before anything here reads edge_events again, and before the cursor moves.
    const stored: string[] = [];
    const finishStored = async () => {
      if (!stored.length) return;
      const ids = stored.splice(0);
      if (pg) await exec(FINISH_STORED_PG, [ids]);
      else for (const id of ids) await exec(FINISH_ONE, ['stored', id]);
    };
    let pending: PendingRow[] = [];
    // the highest seq stored (last_seq: status and logs; receivedThrough's fallback), written with the cursor
    let lastSeq = Number(cur.last_seq);
    let byKey = new Map<string, PendingRow>();
    let strays: PendingRow[] = [];
    let full = false;
    const key = (j: string | null, seq: number) => `${j ?? ''}\u0000${seq}`;
    const read = async () => {
      await finishStored();
      pending = (await exec<PendingRow>(PENDING_SQL, [terminalId])).rows.map((r) => ({ ...r, seq: Number(r.seq) }));
      for (const r of pending) if (r.seq > lastSeq) lastSeq = r.seq;
      full = pending.length >= PENDING_READ;
      byKey = new Map(pending.map((r) => [key(r.journal_id ?? null, r.seq), r]));
      strays = pending.filter((r) => r.journal_id == null || r.seq === 1);
    };
    await read();
    // without a savepoint per event, what the events say about the locks is written once per
    // locker when the advance ends (ObservationBatch); with savepoints, event by event (an event
    // rolled back to its savepoint takes its observation with it)
    const observations = savepoints ? null : new ObservationBatch(exec, this.log);
    const apply = (row: PendingRow, ctl?: DoorControl) => {
      done.add(row.event_id);
      return this.processIn(trx, exec, terminalId, row, cur, after, savepoints, stored, observations, ctl);
    };
    // Late events first: unprocessed events the cursor is already past. The gap before them was
    // given up on (EVENT_GAP_SKIPPED) and they came after all (a broker delivers a queued message
    // late; a terminal's resend crossed the acknowledgement past the gap), or their journal was
    // replaced by a newer one meanwhile. Each is applied now, before what follows in order, as
    // what it says at its own door time: the shipment transitions check the shipment's state (a
    // drop-off whose booking expired meanwhile is the expiry race, docs/state-machine.md), and an
    // observation older than the locker's changes nothing (observations.ts isNewer). Left below
    // the cursor it was never applied: a drop-off in it was lost in effect. One that fails for a
    // transient reason holds the rest, as an event in order does. Door events of the same journal
    // after a late one that changed a shipment, refused for that shipment's state or code while
    // the late one was missing, are applied again in the same seq-ordered pass (applyLate, replayOne).
    const live = cur.live_journal_id ?? null;
    const late = await this.lateEvents(exec, terminalId, pending, journal, applied, live);
    const lateHeld = !(await this.applyLate(trx, exec, terminalId, late, cur, after, savepoints, apply, { applied, journal }));
    /**
     * The live journal the terminal's status names takes over from its seq 1 on (those of its
     * events applied late meanwhile, while an older status named the old journal, are stepped over
     * as processed), once the current journal has nothing more in order: what it still holds behind
     * a gap is left to the late events of the next advances (it has an event applied, or waits
     * edge.otherJournalWaitSeconds: lateEvents), applied with the refused door events after them
     * again (applyLate). Also when a late event is held by a transient failure: the live journal is
     * not left unacknowledged meanwhile.
     */
    /**
     * The cursor leaves journal `j` (a new store) with events of it held behind a gap: the seqs
     * missing below them are given up on now, as a gap is after edge.gapGiveUpSeconds (logged
     * EVENT_GAP_SKIPPED and counted: the old store will not send them again), and the held ones
     * are applied (late, or before the new journal's seq 1). Before, the missing ones went unflagged.
     */
    const skippedOnLeaving = (j: string): (() => void) => {
      const held = pending.filter((r) => r.journal_id === j && r.seq > applied && !done.has(r.event_id)).map((r) => r.seq);
      if (!held.length) return () => {};
      const seqs = [...new Set(held)].sort((a, b) => a - b);
      const missing: [number, number][] = [];
      let from = applied + 1;
      for (const q of seqs) {
        if (q > from) missing.push([from, q - 1]);
        from = q + 1;
        // a read that did not hold every unprocessed event (PENDING_READ): what lies past its
        // lowest held seq is not known to be missing
        if (full) break;
      }
      if (!missing.length) return () => {};
      const count = missing.reduce((n, [a, b]) => n + b - a + 1, 0);
      return () =>
        after.logs.push(() => {
          centralMetrics.edgeIrregular.inc({ kind: 'gap_skipped' }, count);
          this.log.error({ terminal: terminalId, journal: j, missing, errorCode: 'EVENT_GAP_SKIPPED' }, 'the terminal left a journal with a gap (a new store): the missing events are given up on; the held ones are applied');
        });
    };
    const moveToLive = (): boolean => {
      if (journal === null || live === null || live === journal) return false;
      const j = journal;
      skippedOnLeaving(j)();
      after.logs.push(() => this.log.warn({ terminal: terminalId, from: j, to: live }, "the terminal's status names another journal (a new store): the cursor moves to it"));
      journal = live;
      applied = 0;
      gapSince = null;
      return true;
    };
    if (lateHeld) moveToLive();
    for (let guard = 0; !lateHeld && guard < 100_000 && this.host.running(); guard++) {
      // events outside the current journal: legacy ones (no journal id, from agents older than
      // ordered delivery) are applied as they come; the live journal the status names takes over
      // (moveToLive); when no status names one (an older agent), a new journal (a new store,
      // counting from 1 again) takes over at its seq 1, once what the current one still holds is applied
      if (journal !== null) {
        const stray = strays.find((r) => !done.has(r.event_id) && (r.journal_id == null || (live === null && r.journal_id !== journal && r.seq === 1)));
        if (stray && stray.journal_id == null) {
          if (!(await apply(stray))) break;
          continue;
        }
        if (stray) {
          const skipped = skippedOnLeaving(journal);
          let ok = true;
          for (const h of pending) if (h.journal_id === journal && !done.has(h.event_id) && !(ok = await apply(h))) break;
          if (!ok) break;
          skipped();
          const j = journal;
          after.logs.push(() => this.log.warn({ terminal: terminalId, from: j, to: stray.journal_id }, 'the terminal started a new journal (a new store): its seq counts from 1 again'));
          journal = stray.journal_id;
          applied = 0;
          gapSince = null;
          continue;
        }
      }
      const next = byKey.get(key(journal, applied + 1));
      if (next && !done.has(next.event_id)) {
        if (!(await apply(next))) break;
        applied++;
        gapSince = null;
        continue;
      }
      if (full && !next) {
        // more unprocessed events than one read holds: read on from here
        await read();
        if (byKey.has(key(journal, applied + 1))) continue;
      }
      // not among the unprocessed: stored and processed already (an instance that stopped between
      // applying it and moving the cursor, before batching; events of the live journal applied late
      // before a status named it), or missing. One lookup of the next seq (the common case: none,
      // or a gap with held events behind it, is not read through); when it is processed, the run
      // of processed ones from here is stepped over together, up to STEP_READ at a time (one
      // read, not one per seq)
      await finishStored();
      const processed = await exec<{ n: number }>(journal === null ? PROCESSED_AT_LEGACY : PROCESSED_AT_JOURNAL, journal === null ? [terminalId, applied + 1] : [terminalId, journal, applied + 1]);
      if (processed.rows.length) {
        const run = await exec<{ seq: number | string; processed: number | string }>(journal === null ? STEP_LEGACY : STEP_JOURNAL, journal === null ? [terminalId, applied] : [terminalId, journal, applied]);
        for (const r of run.rows) {
          if (Number(r.seq) !== applied + 1 || Number(r.processed) !== 1) break;
          applied++;
        }
        gapSince = null;
        continue;
      }
      // nothing more in order here: the live journal, when the status names another
      if (moveToLive()) continue;
      // nothing at applied + 1: a gap when a later event waits
      let later: PendingRow | undefined;
      let heldSince = Number.POSITIVE_INFINITY;
      for (const r of pending) {
        if (r.journal_id !== journal || r.seq <= applied + 1 || done.has(r.event_id)) continue;
        if (!later || r.seq < later.seq) later = r;
        heldSince = Math.min(heldSince, Date.parse(r.received_at));
      }
      if (!later) break;
      const nowMs = this.ctx.clock.now().getTime();
      if (!gapSince) {
        // Open since the first event behind it was stored (the agent publishes in seq order, so
        // the missing one was overdue from then on), but given up on no sooner than
        // edge.gapResendSeconds after it is noticed: a gap noticed late (a second gap found only
        // once the one before it was given up on; a new journal's; after the central service was
        // down) is asked for (unless the terminal was asked within edge.gapResendSeconds) and
        // waits that long, not a whole edge.gapGiveUpSeconds
        const minWaitMs = Math.max(0, (this.ctx.config.edge.gapGiveUpSeconds - this.ctx.config.edge.gapResendSeconds) * 1000);
        gapSince = toDbTime(new Date(Math.min(nowMs, Math.max(Number.isFinite(heldSince) ? heldSince : nowMs, nowMs - minWaitMs))));
        const a = applied;
        const heldSeq = later.seq;
        after.logs.push(() => this.log.info({ terminal: terminalId, missing: a + 1, held: heldSeq }, 'event gap: later events held until it is filled'));
      }
      const waitedMs = nowMs - Date.parse(gapSince);
      if (waitedMs >= this.ctx.config.edge.gapGiveUpSeconds * 1000) {
        const missing = [applied + 1, later.seq - 1];
        after.logs.push(() => {
          centralMetrics.edgeIrregular.inc({ kind: 'gap_skipped' }, missing[1]! - missing[0]! + 1);
          this.log.error({ terminal: terminalId, missing, waitedMs, errorCode: 'EVENT_GAP_SKIPPED' }, 'event gap given up on: the missing events never came; the held ones are applied');
        });
        applied = later.seq - 1;
        gapSince = null;
        continue;
      }
      if (waitedMs >= this.ctx.config.edge.gapResendSeconds * 1000) {
        const last = this.resendAsked.get(terminalId) ?? 0;
        if (nowMs - last >= this.ctx.config.edge.gapResendSeconds * 1000) {
          after.resendAsked.push([terminalId, nowMs]);
          resendFrom = applied + 1;
          const from = resendFrom;
          after.logs.push(() => this.log.warn({ terminal: terminalId, from, waitedMs }, 'event gap: asking the terminal to send again'));
        }
      }
      break;
    }
    if (observations) {
      try {
        await observations.flush();
      } catch (err) {
        // as an event's own failure without savepoints (processIn): run again, or with savepoints
        if (isRetryablePgError(err)) throw err;
        throw new RedoWithSavepoints(err);
      }
    }
    await finishStored();
    if (applied !== start.applied || journal !== start.journal || gapSince !== start.gap || lastSeq !== Number(cur.last_seq)) {
      const r = await exec(
        start.journal === null
          ? 'UPDATE edge_terminals SET applied_seq = ?, journal_id = ?, gap_since = ?, last_seq = ? WHERE terminal_id = ? AND applied_seq = ? AND journal_id IS NULL'
          : 'UPDATE edge_terminals SET applied_seq = ?, journal_id = ?, gap_since = ?, last_seq = ? WHERE terminal_id = ? AND applied_seq = ? AND journal_id = ?',
        start.journal === null ? [applied, journal, gapSince, lastSeq, terminalId, start.applied] : [applied, journal, gapSince, lastSeq, terminalId, start.applied, start.journal],
      );
      // the row is locked for this transaction: another writer moving it is a bug; roll the batch back
      if (r.numAffectedRows !== 1) throw new Error(`edge cursor of ${terminalId} moved under a locked batch`);
    }
    // down/eventAcks: every event of the current journal up to applied_seq is committed here.
    // Agents from before journal ids do not listen for it (their events are acknowledged by PUBACK);
    // an event of another journal than the cursor's (a new store while the old one is still held)
    // gets no acknowledgement of the old journal, unless the terminal is asked to resend; a journal
    // the cursor moved to is acknowledged at once (its events may all be in already)
    const ackable = journal !== start.journal || [...arrived].some((j) => j === null || j === journal);
    if (journal && (ackable || resendFrom !== undefined)) {
      after.acks.push({ terminalId, msg: { v: 1, journalId: journal, upTo: applied, ...(resendFrom !== undefined ? { resendFrom } : {}), at: this.ctx.clock.now().toISOString() } });
    }
  }

  /**
   * Applies the late events (lateEvents), journal by journal, in one seq-ordered pass with the
   * door events of that journal after the first of them that were refused for a shipment's state
   * or code (REFUSED_AFTER): a refused one is applied again when its code's shipment was changed
   * by a late event, or by an event applied again, before it in the pass (a pick-up refused while
   * its drop-off was missing; a chain follows). Without this the late drop-off would leave its
   * shipment ReadyForPickup with the parcel already collected. False when a late event failed for
   * a transient reason (it holds the rest, as an event in order does).
   */
  private async applyLate(trx: Trx, exec: ObsExec, terminalId: string, late: Map<string | null, PendingRow[]>, cur: CursorRow, after: AfterCommit, savepoints: boolean, apply: (row: PendingRow, ctl?: DoorControl) => Promise<boolean>, at: { applied: number; journal: string | null }): Promise<boolean> {
    const refusedIn = async (j: string, afterSeq: number) => (await exec<PendingRow & { outcome: string }>(REFUSED_AFTER, [terminalId, j, afterSeq])).rows.map((r) => ({ row: { ...r, seq: Number(r.seq) }, outcome: r.outcome as string | null }));
    for (const [j, rows] of late) {
      const refused = j === null ? [] : await refusedIn(j, rows[0]!.seq);
      const pass = [...rows.map((row) => ({ row, outcome: null as string | null })), ...refused].sort((x, y) => x.row.seq - y.row.seq);
      // The late events of the store the live journal replaced (the status said so: not just any
      // other journal, which may be a newer store whose status has not come) came before
      // everything of the live journal, the cursor's: its refused door events follow in the pass,
      // in their seq order (a pick-up with the new store refused while the old store's drop-off
      // was held)
      if (j !== null && j === cur.previous_live_journal_id && at.journal !== null && at.journal === cur.live_journal_id) pass.push(...(await refusedIn(at.journal, 0)));
      const changed = new Set<string>();
      for (const { row, outcome } of pass) {
        if (outcome === null) {
          if (!(await apply(row, { changed: (u) => changed.add(u) }))) return false;
          after.logs.push(() => {
            centralMetrics.edgeIrregular.inc({ kind: 'late' });
            this.log.warn({ terminal: terminalId, journal: row.journal_id, seq: row.seq, type: row.type, appliedSeq: at.applied, currentJournal: at.journal, errorCode: 'EVENT_LATE' }, 'an event came after the cursor had passed it (its gap given up, or its journal replaced): acted on late, out of seq order');
          });
        } else if (changed.size) await this.replayOne(trx, exec, terminalId, row, outcome, cur, after, savepoints, changed);
      }
    }
    return true;
  }

  /**
   * A door event refused earlier (`outcome`) applied again when the shipment of its code is among
   * `changed` (applyLate; processOne checks it with the code it reads anyway), inside a savepoint:
   * refused again, it keeps its outcome; applied, its shipment joins `changed`. Without savepoints
   * the batch runs again with them (rare: only when refused door events follow a late door event
   * that changed a shipment). A deadlock or serialization failure runs the batch again
   * (PostgreSQL); any other failure leaves the event as it was (logged).
   */
  private async replayOne(trx: Trx, exec: ObsExec, terminalId: string, row: PendingRow, outcome: string, cur: CursorRow, after: AfterCommit, savepoints: boolean, changed: Set<string>): Promise<void> {
    if (!savepoints) throw new RedoWithSavepoints(new Error('a late door event: refused door events after it are tried again'));
    await this.savepoint(trx, 'begin');
    let reapplied = false;
    try {
      await this.processOne(trx, exec, terminalId, row, cur, after, async () => undefined, null, { replayOf: outcome, only: changed, changed: (u) => changed.add(u), applied: () => (reapplied = true) });
      await this.savepoint(trx, 'release');
    } catch (err) {
      await this.savepoint(trx, 'rollback');
      if (isRetryablePgError(err)) throw err;
      if (!(err instanceof ApiError)) {
        const msg = (err as Error).message;
        after.logs.push(() => {
          centralMetrics.edgeIrregular.inc({ kind: 'reapply_failed' });
          this.log.error({ terminal: terminalId, seq: row.seq, type: row.type, err: msg, errorCode: 'EVENT_REAPPLY_FAILED' }, 'applying a refused door event again after a late one failed; it stays refused');
        });
      }
      return;
    }
    if (reapplied) {
      after.logs.push(() => {
        centralMetrics.edgeIrregular.inc({ kind: 'reapplied' });
        this.log.warn({ terminal: terminalId, seq: row.seq, type: row.type, before: outcome, errorCode: 'EVENT_REAPPLIED' }, 'a door event refused while an earlier one was missing is applied now that it came');
      });
    }
  }

  /**
   * The unprocessed events among `pending` that the cursor is past, by journal, each in seq order:
   * of the current journal at or below applied_seq (their gap was given up on before they came),
   * and of an older journal of the terminal (one with an event applied already: the terminal has
   * replaced that store since), or of any journal but the live one its status names (`live`, once
   * its events have waited edge.otherJournalWaitSeconds). Without a live journal named (an older agent),
   * a journal with nothing applied is a new one waiting for its seq 1 (advanceIn takes it over
   * then; the agent sends its unacknowledged events again every mqtt.publishTimeoutMs): it is not
   * late, and it is never taken over without its seq 1 (which of two journals is the terminal's
   * live one cannot be told from the events alone; moving the cursor to the wrong one would leave
   * the live one unacknowledged for good).
   */
  private async lateEvents(exec: ObsExec, terminalId: string, pending: PendingRow[], journal: string | null, applied: number, live: string | null): Promise<Map<string | null, PendingRow[]>> {
    const late = new Map<string | null, PendingRow[]>();
    const add = (r: PendingRow) => {
      const j = r.journal_id ?? null;
      const rows = late.get(j);
      if (rows) rows.push(r);
      else late.set(j, [r]);
    };
    const others = new Map<string, PendingRow[]>();
    for (const r of pending) {
      if (r.journal_id == null) {
        // legacy events (no journal id): behind a legacy cursor they count in its seq; behind a
        // journal's cursor they are applied as they come (advanceIn)
        if (journal === null && r.seq <= applied) add(r);
        continue;
      }
      if (journal === null) continue; // the first journal id names the cursor's journal (storeIn)
      if (r.journal_id === journal) {
        if (r.seq <= applied) add(r);
      } else if (r.journal_id !== live) {
        // (the live journal is never late: advanceIn takes it over)
        const rows = others.get(r.journal_id);
        if (rows) rows.push(r);
        else others.set(r.journal_id, [r]);
      }
    }
    // A journal other than the live one the terminal's status names is a store replaced since:
    // nothing more of it will come in order, so its events are late, once the earliest of them has
    // waited edge.otherJournalWaitSeconds (a status naming it may still be on its way: a new store's
    // first events can overtake its status, which arrives on another topic and may queue behind a
    // reconnect storm's; the retry sweep comes back)
    const nowMs = this.ctx.clock.now().getTime();
    const waitMs = this.ctx.config.edge.otherJournalWaitSeconds * 1000;
    for (const [j, rows] of others) {
      const replaced = live !== null && rows.some((r) => nowMs - Date.parse(r.received_at) >= waitMs);
      if (replaced || (await exec(JOURNAL_APPLIED, [terminalId, j])).rows.length) late.set(j, rows);
    }
    return late;
  }

  /**
   * Acts on one stored event; false when it failed for a transient reason (it stays unprocessed,
   * attempts counted, and holds the later ones until a retry succeeds). With `savepoints` the
   * event runs inside a SAVEPOINT, so a failure undoes its writes alone; without, a failure
   * throws RedoWithSavepoints and the batch runs again with them (applyBatch).
   */
  private async processIn(trx: Trx, exec: ObsExec, terminalId: string, row: PendingRow, cur: CursorRow, after: AfterCommit, savepoints: boolean, stored: string[], observations: ObservationBatch | null, ctl?: DoorControl): Promise<boolean> {
    // 'stored' is written with the advance's others (advanceIn), once the event went through: an
    // event rolled back to its savepoint is not among them
    let isStored = false;
    const finish = async (outcome: string) => {
      if (outcome === 'stored') isStored = true;
      else await exec(FINISH_ONE, [outcome, row.event_id]);
    };
    if (savepoints) await this.savepoint(trx, 'begin');
    try {
      const ok = await this.processOne(trx, exec, terminalId, row, cur, after, finish, observations, ctl);
      if (savepoints) await this.savepoint(trx, 'release');
      if (isStored) stored.push(row.event_id);
      after.applied++;
      return ok;
    } catch (err) {
      if (savepoints) await this.savepoint(trx, 'rollback');
      // a deadlock or serialization failure: the whole batch runs again (PgTxRunner)
      if (isRetryablePgError(err)) throw err;
      // without a savepoint the event's writes cannot be undone alone: the batch runs again with them
      if (!savepoints) throw new RedoWithSavepoints(err);
      after.failed++;
      if (err instanceof ApiError) {
        const code = err.code;
        after.logs.push(() => this.log.warn({ terminal: terminalId, seq: row.seq, type: row.type, errorCode: code }, 'door event not applicable'));
        await finish(`rejected:${code}`);
        after.applied++;
        return true;
      }
      if (isPgDataError(err) && row.type !== 'dropOff' && row.type !== 'pickUp') {
        // a value an observed event carries that PostgreSQL cannot take (SQLSTATE class 22: a
        // number out of range, text with U+0000): it fails the same way on every retry, so it is
        // refused and acknowledged like a malformed event, not retried for ever (which held the
        // terminal's later events for good). Not a door event: its fields are checked by their
        // schema (AccessDoneFields) before any statement, so a data exception there is the
        // service's own and the event waits (attempts counted, LockerEdgeEventsStuck) for the fix
        const msg = (err as Error).message;
        after.logs.push(() => this.log.error({ terminal: terminalId, seq: row.seq, type: row.type, err: msg, errorCode: 'EVENT_MALFORMED' }, 'event refused: a value in it does not fit the store'));
        await finish('rejected:MalformedEvent');
        after.applied++;
        return true;
      }
      await exec('UPDATE edge_events SET attempts = attempts + 1 WHERE event_id = ?', [row.event_id]);
      const msg = (err as Error).message;
      after.logs.push(() => this.log.error({ terminal: terminalId, seq: row.seq, type: row.type, err: msg }, row.type === 'dropOff' || row.type === 'pickUp' ? 'door event failed; will retry' : 'recording a lock observation failed; will retry'));
      return false;
    }
  }

  private async processOne(trx: Trx, exec: ObsExec, terminalId: string, row: PendingRow, cur: CursorRow, after: AfterCommit, finish: (outcome: string) => Promise<void>, observations: ObservationBatch | null, ctl?: DoorControl): Promise<boolean> {
    const pup = cur.pup_uid;
    if (row.type !== 'dropOff' && row.type !== 'pickUp') {
      // the lock's observed state (edge/observations.ts)
      if (pup) await (observations ? observations.record(terminalId, pup, row) : recordObservationWith(exec, this.log, terminalId, pup, row));
      await finish('stored');
      return true;
    }
    const body = JSON.parse(row.payload) as Record<string, unknown>;
    const f = AccessDoneFields.safeParse(body);
    if (!f.success) {
      await finish('rejected:MalformedEvent');
      return true;
    }
    const code = (await exec<{ value: string; pup_uid: string; shipment_uid: string; valid: number | string; shared: number | string }>('SELECT value, pup_uid, shipment_uid, valid, shared FROM access_codes WHERE uid = ?', [f.data.codeId])).rows[0];
    if (!code || !pup || code.pup_uid !== pup) {
      await finish('rejected:UnknownCode');
      return true;
    }
    if (ctl?.only && !ctl.only.has(code.shipment_uid)) return true; // not applied again: its shipment did not change
    const item = typeof body.item === 'boolean' ? body.item : null;
    // door time (docs/state-machine.md "Door time"): the event's time at the terminal, corrected by
    // the terminal's measured clock offset when it is flagged (edge/clock.ts), never after arrival
    const receivedAt = new Date(row.received_at);
    const at = doorTime(row.at, receivedAt, { offsetMs: cur.clock_offset_ms, skewed: cur.clock_skewed } as Parameters<typeof doorTime>[2]);
    // claimed in the transaction that applies it: applied once, whichever instance gets there first
    const claim = ctl?.replayOf
      ? async () => (await exec("UPDATE edge_events SET outcome = 'applying' WHERE event_id = ? AND processed = 1 AND outcome = ?", [row.event_id, ctl.replayOf])).numAffectedRows === 1
      : async () => (await exec("UPDATE edge_events SET processed = 1, outcome = 'applying' WHERE event_id = ? AND processed = 0", [row.event_id])).numAffectedRows === 1;
    // a code invalidated since (not a swap's shared copy): its value matches only its own shipment's codes
    const codeShipmentUid = Number(code.valid) === 0 && Number(code.shared) === 0 ? code.shipment_uid : undefined;
    const r = await shipmentService(this.ctx).applyLockerAccessIn(trx, { pupUid: pup, lockerUid: f.data.lockerUid, code: code.value, codeId: f.data.codeId, codeShipmentUid, itemPresent: item, at, receivedAt, claim, cause: 'door' });
    if (r.skipped) return true; // another instance applied it
    after.logs.push(() => this.log.info({ terminal: terminalId, seq: row.seq, type: row.type, shipment: r.shipmentUid, changed: r.changed, state: r.stateCode }, 'door event applied'));
    await exec('UPDATE edge_events SET outcome = ? WHERE event_id = ?', [`${r.action}:${r.changed ? 'applied' : 'unchanged'}:${r.stateCode}`, row.event_id]);
    if (r.changed) ctl?.changed?.(r.shipmentUid);
    ctl?.applied?.();
    return true;
  }
}
