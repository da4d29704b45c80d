// The central side of the edge sync (docs/edge-protocol.md): keeps each terminal's offline code
// cache up to date over MQTT and takes in the terminals' events.
//
// Codes: the code set last pushed to each terminal is remembered (edge_pushed_codes); a change is
// pushed as a delta whose version is claimed with a compare-and-set on edge_terminals, so several
// central instances never publish two different deltas under one version. Changes are noticed by
// polling a cheap marker per pick up point, by a periodic full reconcile, by notifyCodesChanged(),
// and on every terminal status; a terminal whose status shows another epoch/version, or that asks
// on up/sync, gets a full snapshot.
//
// Lockers: the point's locker list (names, sizes, service state, the holding shipment's state) is
// pushed on down/lockers whenever it differs from the list last pushed to the terminal (the same
// triggers as codes: a shipment transition touches the codes), and after a status that shows the
// terminal holds another list.
//
// Events: stored in edge_events (deduplicated by eventId) before the broker acknowledges them to
// the terminal, then applied in each terminal journal's seq order; both in batches of whatever
// arrived meanwhile, one transaction each (edge/ingest.ts). dropOff / pickUp events run the shipment
// transition (the same code as SimulateLockerAccess) with cause "door". An event whose processing
// failed for a transient reason stays unprocessed and is retried.
import type { Kysely, Selectable } from 'kysely';
import {
  EventMessage,
  StatusMessage,
  SyncRequest,
  edgeTopics,
  parseEdgeTopic,
  parseMessage,
  type CodeEntry,
  type CodesDelta,
  type CodesSnapshot,
  type LockersMessage,
} from '@locker/common';
import type { AppContext, Worker } from '../context';
import type { Database } from '../db/schema';
import type { MessageBus } from '../mqtt/bus';
import type { Logger } from '../logger';
import { newUid, toDbTime } from '../ids';
import { currentCodes, diffCodes, entryDigest } from './codes';
import { currentLockers, lockersDigest } from './lockers';
import { preparedReader, type ReadAll } from '../db/prepared-read';
import { rawQuery } from '../shipments/sqlq';
import { onCodesChanged } from './notify';
import { EventIngest, JOURNAL_SEEN } from './ingest';
import { onlineStatusColumns } from './clock';
import { centralMetrics } from '../ops/metrics';
import { shipmentService } from '../shipments/service';

const CHUNK = 300;
/** terminals with unprocessed events the retry sweep advances at a time (retryUnprocessed) */
const RETRY_SWEEP = 1000;

// The statements of a terminal's status and of the pushes it answers, as fixed texts (prepared
// once: db/prepared-read.ts, shipments/sqlq.ts) rather than Kysely queries built per call: a
// reconnecting fleet runs about twenty per terminal, and building and compiling them was a quarter
// of the central service's CPU in a 10,000-terminal restart (its profile: kysely 26 %, garbage
// collection 20 %).
const SQL_TERMINAL_PUP = 'select pup_uid from terminals where id = ?';
const SQL_EDGE_TERMINAL = 'select * from edge_terminals where terminal_id = ?';
const SQL_PUSHED_CODES = 'select code_uid, digest from edge_pushed_codes where terminal_id = ?';
const SQL_CLAIM_CODES = 'update edge_terminals set codes_version = ?, updated_at = ? where terminal_id = ? and codes_version = ?';
const SQL_DELETE_PUSHED = 'delete from edge_pushed_codes where terminal_id = ?';
const SQL_CODE_MARKERS = 'select pup_uid, version from pup_code_versions';
const SQL_LOCKER_MARKERS = 'select pup_uid, max(updated_at) as u from lockers group by pup_uid';
/** marker rows read between two yields to the event loop */
export const MARKER_SLICE = 500;
const SQL_CLAIM_LOCKERS = 'update edge_terminals set lockers_version = ?, lockers_digest = ?, updated_at = ? where terminal_id = ? and lockers_version = ?';
/** the status update's text for a set of column names (ours, never input): a few shapes in all */
const statusUpdateTexts = new Map<string, string>();
/**
 * The journal a status names (the parameter) was first seen no earlier than the live journal and
 * the cursor's (edge_journals, migration 413): a status naming an older one was recorded late (a
 * slower instance; journals never come back) and changes nothing.
 */
const NAMED_IS_NEWEST =
  '(select generation from edge_journals j where j.terminal_id = edge_terminals.terminal_id and j.journal_id = cast(? as text)) >= ' +
  'coalesce((select max(generation) from edge_journals j where j.terminal_id = edge_terminals.terminal_id and j.journal_id in (edge_terminals.live_journal_id, edge_terminals.journal_id)), 0)';
/**
 * The live journal a status names (the parameter, four times), unless it is stale
 * (NAMED_IS_NEWEST); the live journal it replaces is kept (the cross-journal replay, edge/ingest.ts).
 * Every SET expression reads the row as it was before the update (both engines).
 */
const LIVE_JOURNAL_SET =
  `live_journal_id = case when ${NAMED_IS_NEWEST} then cast(? as text) else live_journal_id end, ` +
  `previous_live_journal_id = case when ${NAMED_IS_NEWEST} and live_journal_id is not null and live_journal_id <> cast(? as text) then live_journal_id else previous_live_journal_id end`;
/** an online status of an agent that names no journal (older than journal.id): the live journal is unknown */
const LIVE_JOURNAL_UNKNOWN = 'live_journal_id = null';
function statusUpdateText(columns: readonly string[], live: 'named' | 'unknown' | null): string {
  const key = `${columns.join(',')}+${live}`;
  let t = statusUpdateTexts.get(key);
  if (t === undefined) statusUpdateTexts.set(key, (t = `update edge_terminals set ${columns.map((c) => `${c} = ?`).join(', ')}${live === 'named' ? `, ${LIVE_JOURNAL_SET}` : live === 'unknown' ? `, ${LIVE_JOURNAL_UNKNOWN}` : ''} where terminal_id = ?`));
  return t;
}
/**
 * How long a push (snapshot, delta, locker list) counts as on its way to the terminal: a status or
 * sync request that names a version the push brings the terminal past was sent before the
 * terminal took the push in, and is not answered with another snapshot (snapshot ping-pong, see
 * onStatus). After this long without a status that shows the push held, it counts as lost.
 */
export const PUSH_IN_FLIGHT_MS = 15_000;
/** how long the terminal -> pick up point mapping is cached (a terminal moved by provisioning: at most this late) */
const PUP_CACHE_MS = 30_000;
/** the first full reconcile after start, at the latest (edge.reconcileSeconds when shorter) */
const FIRST_RECONCILE_MS = 5_000;
/** every this many reconciles, every online terminal is checked (else only those not verified since their point's last change) */
const FULL_RECONCILE_EVERY = 10;

/** A push this instance made: the epoch, the version it brings the terminal to, the base (null: a full snapshot). */
interface RecentPush {
  epoch: string;
  base: number | null;
  version: number;
  atMs: number;
  /** the order of this instance's pushes (codes and locker lists counted together) */
  seq: number;
}

/**
 * True when a push in `recent` (made within PUSH_IN_FLIGHT_MS of `nowMs`) brings a terminal that
 * holds `held` to a later version: a snapshot, when the terminal holds another epoch or an older
 * version; a delta, when the terminal holds exactly its base (the deltas after it chain on).
 */
export function pushOnTheWay(recent: readonly RecentPush[] | undefined, held: { epoch: string | null; version: number } | null, nowMs: number): boolean {
  if (!recent) return false;
  for (const p of recent) {
    if (nowMs - p.atMs >= PUSH_IN_FLIGHT_MS) continue;
    if (p.base === null) {
      if (!held || held.epoch !== p.epoch || held.version < p.version) return true;
    } else if (held && held.epoch === p.epoch && held.version === p.base) return true;
  }
  return false;
}

export { notifyCodesChanged } from './notify';

export class EdgeSync implements Worker {
  readonly name = 'edge-sync';
  private running = false;
  private readonly log: Logger;
  private readonly chains = new Map<string, Promise<unknown>>();
  private markers = new Map<string, string>();
  /** the markers were read once (the first poll takes them as they are: see tick) */
  private markersRead = false;
  private timers: NodeJS.Timeout[] = [];
  private pollLoop: Promise<void> | null = null;
  private wakePoll: (() => void) | null = null;
  private lastReconcile = 0;
  private firstReconcile = true;
  private reconciles = 0;
  /** terminal -> its pick up point's marker when this instance last found its codes up to date (or pushed them) */
  private readonly verified = new Map<string, string>();
  private startedAtMs = 0;
  private lastRetry = 0;
  /** the last terminal id the retry sweep took ('': start over) */
  private sweptThrough = '';
  private subscribed = false;
  private unlisten: (() => void) | null = null;
  /** pick up points whose push is queued but has not started reading codes yet (repeats coalesce) */
  private readonly pendingPups = new Set<string>();
  /** terminal event messages this instance took in (with a shared subscription, its share) */
  eventsReceived = 0;
  /** terminal events: stored, applied and acknowledged in batches (edge/ingest.ts) */
  readonly ingest: EventIngest;
  /** events being stored right now (their PUBACK waits); stop() waits for them */
  private readonly storing = new Set<Promise<void>>();
  /** code and locker-list pushes of the last PUSH_IN_FLIGHT_MS per terminal (the snapshot ping-pong guard) */
  private readonly recentCodes = new Map<string, RecentPush[]>();
  private readonly recentLockers = new Map<string, RecentPush[]>();
  /** terminal id -> pick up point (null: not provisioned), cached for PUP_CACHE_MS */
  private readonly pupCache = new Map<string, { pup: string | null; atMs: number }>();
  private pushSeq = 0;
  /** statuses and sync requests not answered with a snapshot because one was on its way */
  snapshotsAvoided = 0;
  /** per terminal, the number of the last status recorded whose answer has not run yet (see recordStatus) */
  private readonly statusSeq = new Map<string, number>();

  constructor(
    private readonly ctx: AppContext,
    private readonly bus: MessageBus,
  ) {
    this.log = ctx.log.child({ ns: 'central.edge' });
    this.ingest = new EventIngest({ ctx, bus, log: this.log, running: () => this.running });
  }

  private get db(): Kysely<Database> {
    return this.ctx.db.kysely;
  }

  private readCache: ReadAll | null = null;
  /** fixed-text reads (db/prepared-read.ts) */
  private get read(): ReadAll {
    return (this.readCache ??= preparedReader(this.ctx.db));
  }

  /** a write statement (fixed text) in a transaction job, or on PostgreSQL in autocommit; the rows it changed */
  private async exec(trx: Kysely<Database>, text: string, params: readonly unknown[]): Promise<number> {
    return (await rawQuery(trx as never, this.ctx.db, text, params)).numAffectedRows;
  }

  private nowDb(): string {
    return toDbTime(this.ctx.clock.now());
  }

  async start(): Promise<void> {
    if (this.running) return;
    this.running = true;
    this.unlisten = onCodesChanged(this);
    if (!this.subscribed) {
      // a bus has no unsubscribe: after stop() the handlers stay, and route() refuses events
      this.subscribed = true;
      // statuses and sync requests are shared too (mqtt.sharedGroup): one instance answers each. The
      // retained statuses are taken once at start (a shared subscription gets none): `retained`
      await this.bus.subscribe(edgeTopics.allUp('status'), (t, p) => this.route(t, p, (id) => this.onStatus(id, p)), { shared: true, retained: true });
      await this.bus.subscribe(edgeTopics.allUp('sync'), (t, p) => this.route(t, p, (id) => this.onSync(id, p)), { shared: true });
      // embedded broker: an event is stored before the terminal gets its PUBACK
      await this.bus.subscribe(edgeTopics.allUp('events'), (t, p) => this.route(t, p, (id) => this.trackStoring(this.onEvent(id, p))), { beforeAck: true, shared: true });
    }
    // the first reconcile waits a little and leaves out the terminals that announced themselves
    // meanwhile (their status already brought their codes up to date): after a restart, a fleet
    // reconnecting at once does not pay for the same check twice
    this.startedAtMs = this.ctx.clock.now().getTime();
    this.lastReconcile = Date.now() - Math.max(0, this.ctx.config.edge.reconcileSeconds * 1000 - FIRST_RECONCILE_MS);
    this.firstReconcile = true;
    this.pollLoop = this.loop();
    this.log.info('edge sync started');
  }

  async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    this.unlisten?.();
    this.unlisten = null;
    for (const t of this.timers) clearTimeout(t);
    this.wakePoll?.();
    await this.pollLoop;
    await Promise.allSettled([...this.storing]);
    await this.ingest.idle();
    await Promise.allSettled([...this.chains.values()]);
  }

  private trackStoring(p: Promise<void>): Promise<void> {
    this.storing.add(p);
    void p.catch(() => undefined).then(() => this.storing.delete(p));
    return p;
  }

  private route(topic: string, _payload: Buffer, fn: (terminalId: string) => Promise<void>): Promise<void> | void {
    const p = parseEdgeTopic(topic);
    if (!this.running) {
      // an event that arrives while the sync is stopped is not stored, so it must not be
      // acknowledged: the rejection makes the broker refuse it and the terminal sends it again
      if (p?.dir === 'up' && p.kind === 'events') throw Object.assign(new Error('edge sync not running: event not stored'), { code: 'EDGE_SYNC_STOPPED' });
      return;
    }
    if (!p || p.dir !== 'up') return;
    return fn(p.terminalId).catch((err) => {
      this.log.error({ err: (err as Error).message, terminal: p.terminalId, kind: p.kind }, 'edge message handling failed');
      // an event that was not stored must not be acknowledged to the terminal (beforeAck)
      if (p.kind === 'events') throw err;
    });
  }

  /** Runs work for one terminal after the work already queued for it. */
  private serial<T>(terminalId: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.chains.get(terminalId) ?? Promise.resolve();
    const next = prev.then(fn, fn);
    const tail = next.catch(() => undefined);
    this.chains.set(terminalId, tail);
    void tail.then(() => {
      if (this.chains.get(terminalId) === tail) this.chains.delete(terminalId);
    });
    return next;
  }

  // ------------------------------------------------------------------ terminals

  private async terminalPup(terminalId: string): Promise<string | null> {
    const nowMs = Date.now();
    const c = this.pupCache.get(terminalId);
    if (c && nowMs - c.atMs < PUP_CACHE_MS) return c.pup;
    const r = (await this.read<{ pup_uid: string | null }>(SQL_TERMINAL_PUP, [terminalId]))[0];
    const pup = r?.pup_uid ?? null;
    if (this.pupCache.size > 200_000) this.pupCache.clear();
    this.pupCache.set(terminalId, { pup, atMs: nowMs });
    return pup;
  }

  private notePush(map: Map<string, RecentPush[]>, terminalId: string, p: Omit<RecentPush, 'atMs' | 'seq'>): void {
    const nowMs = Date.now();
    const list = (map.get(terminalId) ?? []).filter((x) => nowMs - x.atMs < PUSH_IN_FLIGHT_MS);
    list.push({ ...p, atMs: nowMs, seq: ++this.pushSeq });
    if (list.length > 16) list.splice(0, list.length - 16);
    map.set(terminalId, list);
  }

  /**
   * A status shows the codes (and locker list) held: the pushes up to those versions reached the
   * terminal, and are no longer on their way. A push made before one that arrived, and not held,
   * was lost (one connection delivers in order: e.g. a snapshot published before the terminal's
   * subscription was in place, while the locker list after it arrived): no longer on its way either,
   * so the status is answered.
   */
  private confirmed(terminalId: string, codes: { epoch: string | null; version: number }, lockers: { epoch: string | null; version: number } | null): void {
    const lists: [Map<string, RecentPush[]>, { epoch: string | null; version: number } | null][] = [
      [this.recentCodes, codes],
      [this.recentLockers, lockers],
    ];
    const held = (p: RecentPush, h: { epoch: string | null; version: number } | null) => h !== null && p.epoch === h.epoch && p.version <= h.version;
    // the push that brought the version held is known to have arrived: the first one of that version
    // (a locker list can be pushed again under the same version; the later copy may still be on its way)
    let arrived = -1;
    for (const [map, h] of lists) {
      let first = Infinity;
      for (const p of map.get(terminalId) ?? []) if (h !== null && p.epoch === h.epoch && p.version === h.version) first = Math.min(first, p.seq);
      if (first !== Infinity) arrived = Math.max(arrived, first);
    }
    for (const [map, h] of lists) {
      const list = map.get(terminalId);
      if (!list) continue;
      const left = list.filter((p) => !held(p, h) && p.seq > arrived);
      if (left.length) map.set(terminalId, left);
      else map.delete(terminalId);
    }
  }

  private sweepRecent(): void {
    const nowMs = Date.now();
    for (const map of [this.recentCodes, this.recentLockers]) {
      for (const [id, list] of map) if (!list.some((x) => nowMs - x.atMs < PUSH_IN_FLIGHT_MS)) map.delete(id);
    }
  }

  private async ensureTerminal(terminalId: string): Promise<Selectable<Database['edge_terminals']>> {
    const found = (await this.read<Selectable<Database['edge_terminals']>>(SQL_EDGE_TERMINAL, [terminalId]))[0];
    if (found) return found;
    await this.write((db) =>
      db
        .insertInto('edge_terminals')
        .values({ terminal_id: terminalId, epoch: newUid(), codes_version: 0, online: 0, status_at: null, last_status: null, last_seq: 0, updated_at: this.nowDb() })
        .onConflict((oc) => oc.column('terminal_id').doNothing())
        .execute(),
    );
    return this.db.selectFrom('edge_terminals').selectAll().where('terminal_id', '=', terminalId).executeTakeFirstOrThrow();
  }

  /**
   * A small write outside a batch: on SQLite a job of the shipment service's group-commit runner,
   * so the writes of a connect wave (thousands of statuses and snapshot claims arriving together)
   * share one transaction and one fsync instead of one each; on PostgreSQL as it is (autocommit).
   */
  private write<T>(fn: (db: Kysely<Database>) => Promise<T>): Promise<T> {
    if (this.ctx.db.engine === 'sqlite') return shipmentService(this.ctx).tx.run((trx) => fn(trx));
    return fn(this.db);
  }

  /** A transaction: on SQLite in the group-commit runner (write()), on PostgreSQL its own. */
  private inTransaction<T>(fn: (db: Kysely<Database>) => Promise<T>): Promise<T> {
    if (this.ctx.db.engine === 'sqlite') return shipmentService(this.ctx).tx.run((trx) => fn(trx));
    return this.db.transaction().execute((trx) => fn(trx));
  }

  private onStatus(terminalId: string, payload: Buffer): Promise<void> {
    if (payload.length === 0) return Promise.resolve(); // a cleared retained status
    const msg = parseMessage(StatusMessage, payload);
    if (!msg || msg.terminalId !== terminalId) {
      this.log.warn({ terminal: terminalId, bytes: payload.length }, 'malformed status dropped');
      return Promise.resolve();
    }
    // one terminal's statuses are recorded in the order they came (messages are handled concurrently)
    return this.serial(terminalId, () => this.recordStatus(terminalId, msg));
  }

  private async recordStatus(terminalId: string, msg: StatusMessage): Promise<void> {
    if (!(await this.terminalPup(terminalId))) {
      this.log.warn({ terminal: terminalId }, 'status from a terminal that is not provisioned');
      return;
    }
    const before = await this.ensureTerminal(terminalId);
    const online = msg.state === 'online' ? 1 : 0;
    // the terminal's clock (edge/clock.ts): offset = receive time - status.at, flagged beyond
    // edge.maxClockSkewSeconds; and the expiry proof (everything journalled by then has arrived)
    const clock = msg.state === 'online' ? onlineStatusColumns(before, msg, this.ctx.clock.now(), this.ctx.config.edge.maxClockSkewSeconds) : null;
    const set: Record<string, unknown> = { online, status_at: this.nowDb(), last_status: JSON.stringify(msg), updated_at: this.nowDb(), ...(clock?.columns ?? {}) };
    // The journal it writes now: its live one (edge/ingest.ts). An offline status names none and
    // changes nothing; an online one without it (an older agent) makes it unknown. Written when it
    // differs from the one recorded, and then not if that journal was first seen before the live
    // one or the cursor's (LIVE_JOURNAL_SET: statuses of one terminal recorded out of order by two
    // instances); a journal not seen before is recorded as seen now (JOURNAL_SEEN).
    const live = msg.state === 'online' ? (msg.journal.id ?? null) : undefined;
    const named = live !== undefined && live !== (before.live_journal_id ?? null);
    const columns = Object.keys(set);
    const params = [...columns.map((c) => set[c]), ...(named && live ? [live, live, live, live] : []), terminalId];
    const text = statusUpdateText(columns, !named ? null : live ? 'named' : 'unknown');
    await this.write(async (db) => {
      if (named && live) await this.exec(db, JOURNAL_SEEN, [terminalId, live, this.nowDb()]);
      await this.exec(db, text, params);
    });
    // Another journal than the cursor's: the ingest moves the cursor to it now (its events may all
    // be in already, applied late while an older status named the old journal); it decides again
    // on the row it locks (a stale status changed nothing: nothing to do). No cursor journal yet (a
    // terminal's first connect, or an agent from before journals): its next event's advance does it.
    if (named && live && before.journal_id != null && live !== before.journal_id) {
      void this.ingest.advance([terminalId]).catch((err: unknown) => this.log.error({ err: (err as Error).message, terminal: terminalId }, 'advancing the events after a new journal was named failed'));
    }
    if (clock?.measurement.skewed) this.log.warn({ terminal: terminalId, clockOffsetMs: clock.measurement.offsetMs, maxClockSkewSeconds: this.ctx.config.edge.maxClockSkewSeconds, errorCode: 'CLOCK_SKEW' }, 'terminal clock is off: its event times are corrected by the measured offset');
    this.log.info({ terminal: terminalId, state: msg.state, ...(msg.state === 'online' ? { version: msg.codes.version, unsent: msg.journal.unsent } : { reason: msg.reason }) }, 'terminal status');
    if (msg.state !== 'online') return;
    const held = msg.codes;
    // what the status shows held has arrived: those pushes are no longer on their way
    this.confirmed(terminalId, held, msg.lockers ?? null);
    // The answer runs after the work already queued for the terminal, which may include recording a
    // later status (statuses arrive faster than they are recorded when the store is slow). Such a
    // status says more, and its confirmed() has cleared the pushes this one's versions would be
    // compared with: answering this one would push again what the terminal already holds, and
    // that copy (never confirmed) would then pass for a push on its way for PUSH_IN_FLIGHT_MS,
    // holding back the answer to the next status that really needs one. Only the last one is answered.
    const seq = (this.statusSeq.get(terminalId) ?? 0) + 1;
    this.statusSeq.set(terminalId, seq);
    void this.serial(terminalId, async () => {
      if (this.statusSeq.get(terminalId) !== seq) return; // a later status is answered instead
      this.statusSeq.delete(terminalId);
      const row = await this.ensureTerminal(terminalId);
      // Snapshot ping-pong: a status is sent when the terminal took a push in, so one that names an
      // older version than a push made since (snapshot or delta) was in flight while that push was:
      // the push brings the terminal up to date and its next status shows it. Answering it with
      // another snapshot would raise the version again and make the next status in flight look
      // old too, without end. Only when no push is on its way is a differing version answered.
      if (held.epoch !== row.epoch || held.version !== row.codes_version) {
        if (pushOnTheWay(this.recentCodes.get(terminalId), held, Date.now())) {
          this.snapshotsAvoided++;
          await this.pushChanges(terminalId);
        } else await this.sendSnapshot(terminalId);
      } else await this.pushChanges(terminalId);
      // the locker list: again when the terminal holds another one than the last pushed
      await this.pushLockers(terminalId, msg.lockers ?? null);
    }).catch((err) => this.log.error({ err: (err as Error).message, terminal: terminalId }, 'code sync after status failed'));
  }

  private async onSync(terminalId: string, payload: Buffer): Promise<void> {
    const msg = parseMessage(SyncRequest, payload);
    if (!msg) {
      this.log.warn({ terminal: terminalId }, 'malformed sync request dropped');
      return;
    }
    this.log.info({ terminal: terminalId, reason: msg.reason }, 'terminal asks for a code snapshot');
    void this.serial(terminalId, async () => {
      // a snapshot on its way answers it already (not a manual request: that one always gets one)
      if (msg.reason !== 'manual' && pushOnTheWay(this.recentCodes.get(terminalId)?.filter((p) => p.base === null), msg.have, Date.now())) {
        this.snapshotsAvoided++;
        return;
      }
      await this.sendSnapshot(terminalId);
    }).catch((err) => this.log.error({ err: (err as Error).message, terminal: terminalId }, 'snapshot failed'));
  }

  // ------------------------------------------------------------------ codes

  /** Claims the next version (compare-and-set) and records the pushed set in one transaction. */
  private async claim(terminalId: string, fromVersion: number, apply: (trx: Kysely<Database>) => Promise<void>): Promise<number | null> {
    return this.inTransaction(async (trx) => {
      if ((await this.exec(trx, SQL_CLAIM_CODES, [fromVersion + 1, this.nowDb(), terminalId, fromVersion])) !== 1) return null;
      await apply(trx);
      return fromVersion + 1;
    });
  }

  private async insertPushed(trx: Kysely<Database>, terminalId: string, entries: readonly CodeEntry[]): Promise<void> {
    for (let i = 0; i < entries.length; i += CHUNK) {
      await trx
        .insertInto('edge_pushed_codes')
        .values(entries.slice(i, i + CHUNK).map((e) => ({ terminal_id: terminalId, code_uid: e.id, digest: entryDigest(e) })))
        .execute();
    }
  }

  /** Sends the whole code set; the pushed set becomes the current set. */
  async sendSnapshot(terminalId: string): Promise<void> {
    const started = performance.now();
    const pup = await this.terminalPup(terminalId);
    if (!pup) return;
    for (let attempt = 0; attempt < 5; attempt++) {
      const codes = await currentCodes(this.read, pup);
      const row = await this.ensureTerminal(terminalId);
      const version = await this.claim(terminalId, Number(row.codes_version), async (trx) => {
        await this.exec(trx, SQL_DELETE_PUSHED, [terminalId]);
        if (codes.length) await this.insertPushed(trx, terminalId, codes);
      });
      if (version === null) continue; // another instance pushed meanwhile: take its version
      const msg: CodesSnapshot = { v: 1, type: 'snapshot', epoch: row.epoch, version, at: this.ctx.clock.now().toISOString(), codes };
      this.notePush(this.recentCodes, terminalId, { epoch: row.epoch, base: null, version });
      await this.bus.publish(edgeTopics.down(terminalId, 'codes'), JSON.stringify(msg), { qos: 1 });
      centralMetrics.codePushDuration.observe({ kind: 'snapshot' }, (performance.now() - started) / 1000);
      this.log.info({ terminal: terminalId, version, count: codes.length }, 'code snapshot pushed');
      return;
    }
    this.log.warn({ terminal: terminalId }, 'code snapshot: version kept moving; the next status will retry');
  }

  /** Sends what changed since the last push, if anything. */
  async pushChanges(terminalId: string, changedAt = performance.now()): Promise<void> {
    const pup = await this.terminalPup(terminalId);
    if (!pup) return;
    // the point's marker before the codes are read: a change after it moves the marker again
    const marker = this.markers.get(pup);
    const verified = () => {
      if (marker !== undefined) this.verified.set(terminalId, marker);
    };
    for (let attempt = 0; attempt < 5; attempt++) {
      const codes = await currentCodes(this.read, pup);
      const row = await this.ensureTerminal(terminalId);
      const pushedRows = await this.read<{ code_uid: string; digest: string }>(SQL_PUSHED_CODES, [terminalId]);
      const diff = diffCodes(new Map(pushedRows.map((r) => [r.code_uid, r.digest])), codes);
      if (!diff.upserts.length && !diff.revoke.length) return verified();
      const version = await this.claim(terminalId, Number(row.codes_version), async (trx) => {
        const gone = [...diff.revoke, ...diff.upserts.map((e) => e.id)];
        for (let i = 0; i < gone.length; i += CHUNK) {
          await trx.deleteFrom('edge_pushed_codes').where('terminal_id', '=', terminalId).where('code_uid', 'in', gone.slice(i, i + CHUNK)).execute();
        }
        await this.insertPushed(trx, terminalId, diff.upserts);
      });
      if (version === null) continue;
      const msg: CodesDelta = { v: 1, type: 'delta', epoch: row.epoch, baseVersion: row.codes_version, version, at: this.ctx.clock.now().toISOString(), upserts: diff.upserts, revoke: diff.revoke };
      this.notePush(this.recentCodes, terminalId, { epoch: row.epoch, base: row.codes_version, version });
      await this.bus.publish(edgeTopics.down(terminalId, 'codes'), JSON.stringify(msg), { qos: 1 });
      centralMetrics.codePushDuration.observe({ kind: 'delta' }, (performance.now() - changedAt) / 1000);
      this.log.info({ terminal: terminalId, version, upserts: diff.upserts.length, revoked: diff.revoke.length }, 'code update pushed');
      return verified();
    }
  }

  /**
   * down/lockers: the pick up point's lockers (edge/lockers.ts). Pushed when the list differs from
   * the one last pushed to this terminal (its digest; the version is claimed by compare-and-set on
   * edge_terminals.lockers_version, as for codes), and, from a status, when the terminal holds
   * another epoch/version than the last pushed (`held`; null: a status without `lockers`, an agent
   * that does not take the message: only changes are pushed then).
   */
  async pushLockers(terminalId: string, held: { epoch: string | null; version: number } | null = null): Promise<void> {
    const pup = await this.terminalPup(terminalId);
    if (!pup) return;
    for (let attempt = 0; attempt < 5; attempt++) {
      const lockers = await currentLockers(this.read, pup);
      const digest = lockersDigest(lockers);
      const row = await this.ensureTerminal(terminalId);
      let version = Number(row.lockers_version ?? 0);
      if (row.lockers_digest !== digest) {
        const changed = await this.write((db) => this.exec(db, SQL_CLAIM_LOCKERS, [version + 1, digest, this.nowDb(), terminalId, version]));
        if (changed !== 1) continue; // another instance pushed meanwhile
        version += 1;
      } else if (!held || (held.epoch === row.epoch && held.version === version)) return;
      // the same list already on its way (a status sent before the terminal took it in): not again
      else if (pushOnTheWay(this.recentLockers.get(terminalId), held, Date.now())) return;
      this.notePush(this.recentLockers, terminalId, { epoch: row.epoch, base: null, version });
      const msg: LockersMessage = { v: 1, epoch: row.epoch, version, at: this.ctx.clock.now().toISOString(), lockers };
      await this.bus.publish(edgeTopics.down(terminalId, 'lockers'), JSON.stringify(msg), { qos: 1 });
      this.log.info({ terminal: terminalId, version, count: lockers.length }, 'locker list pushed');
      return;
    }
    this.log.warn({ terminal: terminalId }, 'locker list: version kept moving; the next change or status will retry');
  }

  /** The online terminals of these points: one query (one point: through its index; more: every online terminal, filtered). */
  private async onlineTerminalsAt(pups: string[]): Promise<{ id: string; pup: string }[]> {
    let q = this.db.selectFrom('edge_terminals as e').innerJoin('terminals as t', 't.id', 'e.terminal_id').select(['e.terminal_id', 't.pup_uid']).where('e.online', '=', 1);
    if (pups.length === 1) q = q.where('t.pup_uid', '=', pups[0]!);
    const wanted = new Set(pups);
    return (await q.execute()).filter((r) => wanted.has(r.pup_uid)).map((r) => ({ id: r.terminal_id, pup: r.pup_uid }));
  }

  /** A pick up point's codes changed: push to its online terminals. */
  pupChanged(pupUid: string): void {
    this.pupsChanged([pupUid]);
  }

  /** Pick up points whose codes changed: push to their online terminals (one lookup for all of them). */
  private pupsChanged(pups: string[]): void {
    if (!this.running) return;
    // a push already queued for a point reads the codes later than this change: it carries it
    const fresh = pups.filter((p) => !this.pendingPups.has(p));
    if (!fresh.length) return;
    for (const p of fresh) this.pendingPups.add(p);
    const changedAt = performance.now();
    void this.onlineTerminalsAt(fresh)
      .then((rows) => {
        const reached = new Set(rows.map((r) => r.pup));
        for (const p of fresh) if (!reached.has(p)) this.pendingPups.delete(p);
        return Promise.all(
          rows.map(({ id, pup }) =>
            this.serial(id, async () => {
              this.pendingPups.delete(pup);
              await this.pushChanges(id, changedAt);
              await this.pushLockers(id);
            }),
          ),
        );
      })
      .catch((err) => {
        for (const p of fresh) this.pendingPups.delete(p);
        this.log.error({ err: (err as Error).message, pups: fresh.length === 1 ? fresh[0] : fresh.length }, 'code push failed');
      });
  }

  /**
   * The cheap change marker per pick up point: its code version (raised in every transaction that
   * changes its codes: one row per point, however many codes it ever had) and its latest locker
   * change (a locker moved to another lock by provisioning).
   */
  private async readMarkers(): Promise<Map<string, string>> {
    // SQLite in a file: row by row from the read-only connection, yielding to the event loop every
    // MARKER_SLICE rows. Read at once this took 18-25 ms per poll at 10,000 points (the GROUP BY
    // walks 40,000 lockers) with the loop blocked, every second: bookings' pushes and terminal
    // messages waited behind it (fleet bench at 10,000 points: booking -> code p99 65-87 ms with a
    // poll every second, 9 ms with one every 5 s). Elsewhere (PostgreSQL, :memory:) read whole
    // (a yield after the rows arrived would not shorten anything).
    const iterate = this.ctx.db.committedIterate;
    const rows = async <R>(text: string): Promise<Iterable<R>> => (iterate ? iterate<R>(text, []) : this.read<R>(text, []));
    const m = new Map<string, string>();
    let n = 0;
    for (const r of await rows<{ pup_uid: string; version: number | string }>(SQL_CODE_MARKERS)) {
      m.set(r.pup_uid, String(r.version));
      if (iterate && ++n % MARKER_SLICE === 0) await new Promise((resolve) => setImmediate(resolve));
    }
    for (const r of await rows<{ pup_uid: string; u: string | Date | null }>(SQL_LOCKER_MARKERS)) {
      m.set(r.pup_uid, `${m.get(r.pup_uid) ?? ''}|${r.u ?? ''}`);
      if (iterate && ++n % MARKER_SLICE === 0) await new Promise((resolve) => setImmediate(resolve));
    }
    return m;
  }

  private async tick(): Promise<void> {
    this.sweepRecent();
    const markers = await this.readMarkers();
    // the first poll only learns the markers: what changed before it is brought to the terminals by
    // their statuses (a reconnecting terminal's status is compared with its codes) and by the first
    // reconcile (FIRST_RECONCILE_MS after start: the online terminals that sent no status since).
    // Taking every point as changed pushed to every terminal marked online, connected or not: after a
    // restart with 10,000 terminals that queue held the start (and /ready) for over a minute
    const first = !this.markersRead;
    this.markersRead = true;
    const changed = [...markers.entries()].filter(([pup, mk]) => this.markers.get(pup) !== mk).map(([pup]) => pup);
    for (const pup of this.markers.keys()) if (!markers.has(pup)) changed.push(pup);
    this.markers = markers;
    const nowMs = Date.now();
    if (nowMs - this.lastReconcile >= this.ctx.config.edge.reconcileSeconds * 1000) {
      this.lastReconcile = nowMs;
      let ids: string[];
      const rows = await this.db.selectFrom('edge_terminals as e').innerJoin('terminals as t', 't.id', 'e.terminal_id').select(['e.terminal_id', 'e.status_at', 't.pup_uid']).where('e.online', '=', 1).execute();
      if (this.firstReconcile) {
        this.firstReconcile = false;
        ids = rows.filter((r) => !r.status_at || new Date(r.status_at as string | Date).getTime() < this.startedAtMs).map((r) => r.terminal_id);
      } else if (++this.reconciles % FULL_RECONCILE_EVERY === 0) {
        ids = rows.map((r) => r.terminal_id);
      } else {
        // a terminal this instance found up to date (after its status, a push) since the last
        // change of its point's marker needs no check: the marker poll pushes the next change
        ids = rows.filter((r) => this.verified.get(r.terminal_id) !== this.markers.get(r.pup_uid)).map((r) => r.terminal_id);
      }
      if (this.verified.size > 2 * rows.length + 1000) this.verified.clear();
      await Promise.all(
        ids.map((id) =>
          this.serial(id, async () => {
            await this.pushChanges(id);
            await this.pushLockers(id);
          }),
        ),
      );
    } else if (!first && changed.length) {
      this.pupsChanged(changed);
    }
    if (nowMs - this.lastRetry >= this.ctx.config.edge.retrySeconds * 1000) {
      this.lastRetry = nowMs;
      await this.retryUnprocessed();
    }
  }

  private async loop(): Promise<void> {
    while (this.running) {
      try {
        await this.tick();
      } catch (err) {
        this.log.error({ err: (err as Error).message }, 'edge sync poll failed');
      }
      if (!this.running) return;
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, this.ctx.config.edge.pollMs);
        this.timers = [t];
        this.wakePoll = () => {
          clearTimeout(t);
          resolve();
        };
      });
      this.wakePoll = null;
    }
  }

  // ------------------------------------------------------------------ events

  private onEvent(terminalId: string, payload: Buffer): Promise<void> {
    this.eventsReceived++;
    const ev = parseMessage(EventMessage, payload);
    if (!ev || ev.terminalId !== terminalId) {
      this.log.warn({ terminal: terminalId, bytes: payload.length }, 'malformed event dropped');
      return Promise.resolve();
    }
    // stored (in a batch with what else arrived, edge/ingest.ts) before the broker acknowledges it:
    // the PUBACK waits for this promise; then applied in the journal's seq order and acknowledged
    // on down/eventAcks, batch by batch. The promise does not wait for the apply: an MQTT client
    // takes no further packet (not even the PUBACK of our own acknowledgement) until this handler
    // returns, so waiting for it would deadlock
    return this.ingest.submit(terminalId, ev, payload);
  }

  /**
   * Terminals with unprocessed events (a transient failure, held behind a gap, a late event):
   * advance them again, RETRY_SWEEP at a time in the order of their ids, each sweep going on after
   * the last terminal of the one before and starting over at the end. Without an order and a
   * place to go on from, the same first terminals came back each time, and a terminal past them
   * (more than RETRY_SWEEP with unprocessed events, e.g. ones whose apply keeps failing) was
   * never retried: its gap never given up on.
   */
  private async retryUnprocessed(): Promise<void> {
    const page = async (after: string, n: number, upTo?: string) => {
      let q = this.db.selectFrom('edge_events').select('terminal_id').distinct().where('processed', '=', 0).where('terminal_id', '>', after);
      if (upTo !== undefined) q = q.where('terminal_id', '<=', upTo);
      return (await q.orderBy('terminal_id').limit(n).execute()).map((r) => r.terminal_id);
    };
    const from = this.sweptThrough;
    let ids = await page(from, RETRY_SWEEP);
    let last = ids.length === RETRY_SWEEP ? ids[ids.length - 1]! : '';
    if (ids.length < RETRY_SWEEP && from !== '') {
      // the end reached: the sweep is filled up from the start, up to where it began
      const room = RETRY_SWEEP - ids.length;
      const more = await page('', room, from);
      ids = ids.concat(more);
      // a full page: the next sweep goes on after it; else all was covered
      last = more.length === room ? more[more.length - 1]! : '';
    }
    this.sweptThrough = last;
    await this.ingest.advance(ids);
  }
}
