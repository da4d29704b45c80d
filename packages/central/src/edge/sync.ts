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
// Events: each is stored in edge_events (deduplicated by eventId) before the broker acknowledges
// it to the terminal; dropOff / pickUp events then run the shipment transition (the same code as
// SimulateLockerAccess) with cause "door". An event whose processing failed for a transient reason
// stays unprocessed and is retried.
import type { ExpressionBuilder, Kysely } from 'kysely';
import {
  AccessDoneFields,
  EventMessage,
  StatusMessage,
  type EventAck,
  SyncRequest,
  edgeTopics,
  parseEdgeTopic,
  parseMessage,
  type CodesDelta,
  type CodesSnapshot,
  type LockersMessage,
} from '@locker/common';
import type { AppContext, Worker } from '../context';
import type { Database } from '../db/schema';
import type { MessageBus } from '../mqtt/bus';
import type { Logger } from '../logger';
import { ApiError } from '../errors';
import { newUid, toDbTime } from '../ids';
import { handleDoorEvent } from '../shipments/service';
import { currentCodes, diffCodes, entryDigest } from './codes';
import { currentLockers, lockersDigest } from './lockers';
import { onCodesChanged } from './notify';
import { recordObservation } from './observations';
import { doorTime, onlineStatusColumns } from './clock';
import { centralMetrics } from '../ops/metrics';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const CHUNK = 300;

export { notifyCodesChanged } from './notify';

export class EdgeSync implements Worker {
  readonly name = 'edge-sync';
  private running = false;
  private readonly log: Logger;
  private readonly chains = new Map<string, Promise<unknown>>();
  private markers = new Map<string, string>();
  private timers: NodeJS.Timeout[] = [];
  private pollLoop: Promise<void> | null = null;
  private wakePoll: (() => void) | null = null;
  private lastReconcile = 0;
  private lastRetry = 0;
  private subscribed = false;
  private unlisten: (() => void) | null = null;
  /** pick up points whose push is queued but has not started reading codes yet (repeats coalesce) */
  private readonly pendingPups = new Set<string>();
  /** terminal event messages this instance took in (with a shared subscription, its share) */
  eventsReceived = 0;
  /** when each terminal was last asked to resend from a gap (ms) */
  private readonly resendAsked = new Map<string, number>();
  /** events being stored right now (their PUBACK waits); stop() waits for them */
  private readonly storing = new Set<Promise<void>>();

  constructor(
    private readonly ctx: AppContext,
    private readonly bus: MessageBus,
  ) {
    this.log = ctx.log.child({ ns: 'central.edge' });
  }

  private get db(): Kysely<Database> {
    return this.ctx.db.kysely;
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
      await this.bus.subscribe(edgeTopics.allUp('status'), (t, p) => this.route(t, p, (id) => this.onStatus(id, p)));
      await this.bus.subscribe(edgeTopics.allUp('sync'), (t, p) => this.route(t, p, (id) => this.onSync(id, p)));
      // embedded broker: an event is stored before the terminal gets its PUBACK
      await this.bus.subscribe(edgeTopics.allUp('events'), (t, p) => this.route(t, p, (id) => this.trackStoring(this.onEvent(id, p))), { beforeAck: true, shared: true });
    }
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
    const r = await this.db.selectFrom('terminals').select('pup_uid').where('id', '=', terminalId).executeTakeFirst();
    return r?.pup_uid ?? null;
  }

  private async ensureTerminal(terminalId: string) {
    const found = await this.db.selectFrom('edge_terminals').selectAll().where('terminal_id', '=', terminalId).executeTakeFirst();
    if (found) return found;
    await this.db
      .insertInto('edge_terminals')
      .values({ terminal_id: terminalId, epoch: newUid(), codes_version: 0, online: 0, status_at: null, last_status: null, last_seq: 0, updated_at: this.nowDb() })
      .onConflict((oc) => oc.column('terminal_id').doNothing())
      .execute();
    return this.db.selectFrom('edge_terminals').selectAll().where('terminal_id', '=', terminalId).executeTakeFirstOrThrow();
  }

  private async onStatus(terminalId: string, payload: Buffer): Promise<void> {
    if (payload.length === 0) return; // a cleared retained status
    const msg = parseMessage(StatusMessage, payload);
    if (!msg || msg.terminalId !== terminalId) {
      this.log.warn({ terminal: terminalId, bytes: payload.length }, 'malformed status dropped');
      return;
    }
    if (!(await this.terminalPup(terminalId))) {
      this.log.warn({ terminal: terminalId }, 'status from a terminal that is not provisioned');
      return;
    }
    const before = await this.ensureTerminal(terminalId);
    const online = msg.state === 'online' ? 1 : 0;
    // the terminal's clock (edge/clock.ts): offset = receive time - status.at, flagged beyond
    // edge.maxClockSkewSeconds; and the expiry proof (everything journalled by then has arrived)
    const clock = msg.state === 'online' ? onlineStatusColumns(before, msg, this.ctx.clock.now(), this.ctx.config.edge.maxClockSkewSeconds) : null;
    await this.db
      .updateTable('edge_terminals')
      .set({ online, status_at: this.nowDb(), last_status: JSON.stringify(msg), updated_at: this.nowDb(), ...(clock?.columns ?? {}) })
      .where('terminal_id', '=', terminalId)
      .execute();
    if (clock?.measurement.skewed) this.log.warn({ terminal: terminalId, clockOffsetMs: clock.measurement.offsetMs, maxClockSkewSeconds: this.ctx.config.edge.maxClockSkewSeconds, errorCode: 'CLOCK_SKEW' }, 'terminal clock is off: its event times are corrected by the measured offset');
    this.log.info({ terminal: terminalId, state: msg.state, ...(msg.state === 'online' ? { version: msg.codes.version, unsent: msg.journal.unsent } : { reason: msg.reason }) }, 'terminal status');
    if (msg.state !== 'online') return;
    const held = msg.codes;
    void this.serial(terminalId, async () => {
      const row = await this.ensureTerminal(terminalId);
      if (held.epoch !== row.epoch || held.version !== row.codes_version) await this.sendSnapshot(terminalId);
      else await this.pushChanges(terminalId);
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
    void this.serial(terminalId, () => this.sendSnapshot(terminalId)).catch((err) => this.log.error({ err: (err as Error).message, terminal: terminalId }, 'snapshot failed'));
  }

  // ------------------------------------------------------------------ codes

  /** Claims the next version (compare-and-set) and records the pushed set in one transaction. */
  private async claim(terminalId: string, fromVersion: number, apply: (trx: Kysely<Database>) => Promise<void>): Promise<number | null> {
    return this.db.transaction().execute(async (trx) => {
      const r = await trx
        .updateTable('edge_terminals')
        .set({ codes_version: fromVersion + 1, updated_at: this.nowDb() })
        .where('terminal_id', '=', terminalId)
        .where('codes_version', '=', fromVersion)
        .executeTakeFirst();
      if (Number(r.numUpdatedRows) !== 1) return null;
      await apply(trx);
      return fromVersion + 1;
    });
  }

  private async insertPushed(trx: Kysely<Database>, terminalId: string, entries: ReturnType<typeof currentCodes> extends Promise<infer T> ? T : never): Promise<void> {
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
      const codes = await currentCodes(this.db, pup);
      const row = await this.ensureTerminal(terminalId);
      const version = await this.claim(terminalId, row.codes_version, async (trx) => {
        await trx.deleteFrom('edge_pushed_codes').where('terminal_id', '=', terminalId).execute();
        await this.insertPushed(trx, terminalId, codes);
      });
      if (version === null) continue; // another instance pushed meanwhile: take its version
      const msg: CodesSnapshot = { v: 1, type: 'snapshot', epoch: row.epoch, version, at: this.ctx.clock.now().toISOString(), codes };
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
    for (let attempt = 0; attempt < 5; attempt++) {
      const codes = await currentCodes(this.db, pup);
      const row = await this.ensureTerminal(terminalId);
      const pushedRows = await this.db.selectFrom('edge_pushed_codes').select(['code_uid', 'digest']).where('terminal_id', '=', terminalId).execute();
      const diff = diffCodes(new Map(pushedRows.map((r) => [r.code_uid, r.digest])), codes);
      if (!diff.upserts.length && !diff.revoke.length) return;
      const version = await this.claim(terminalId, row.codes_version, async (trx) => {
        const gone = [...diff.revoke, ...diff.upserts.map((e) => e.id)];
        for (let i = 0; i < gone.length; i += CHUNK) {
          await trx.deleteFrom('edge_pushed_codes').where('terminal_id', '=', terminalId).where('code_uid', 'in', gone.slice(i, i + CHUNK)).execute();
        }
        await this.insertPushed(trx, terminalId, diff.upserts);
      });
      if (version === null) continue;
      const msg: CodesDelta = { v: 1, type: 'delta', epoch: row.epoch, baseVersion: row.codes_version, version, at: this.ctx.clock.now().toISOString(), upserts: diff.upserts, revoke: diff.revoke };
      await this.bus.publish(edgeTopics.down(terminalId, 'codes'), JSON.stringify(msg), { qos: 1 });
      centralMetrics.codePushDuration.observe({ kind: 'delta' }, (performance.now() - changedAt) / 1000);
      this.log.info({ terminal: terminalId, version, upserts: diff.upserts.length, revoked: diff.revoke.length }, 'code update pushed');
      return;
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
      const lockers = await currentLockers(this.db, pup);
      const digest = lockersDigest(lockers);
      const row = await this.ensureTerminal(terminalId);
      let version = Number(row.lockers_version ?? 0);
      if (row.lockers_digest !== digest) {
        const r = await this.db
          .updateTable('edge_terminals')
          .set({ lockers_version: version + 1, lockers_digest: digest, updated_at: this.nowDb() })
          .where('terminal_id', '=', terminalId)
          .where('lockers_version', '=', version)
          .executeTakeFirst();
        if (Number(r.numUpdatedRows) !== 1) continue; // another instance pushed meanwhile
        version += 1;
      } else if (!held || (held.epoch === row.epoch && held.version === version)) return;
      const msg: LockersMessage = { v: 1, epoch: row.epoch, version, at: this.ctx.clock.now().toISOString(), lockers };
      await this.bus.publish(edgeTopics.down(terminalId, 'lockers'), JSON.stringify(msg), { qos: 1 });
      this.log.info({ terminal: terminalId, version, count: lockers.length }, 'locker list pushed');
      return;
    }
    this.log.warn({ terminal: terminalId }, 'locker list: version kept moving; the next change or status will retry');
  }

  private async onlineTerminals(pupUid?: string): Promise<string[]> {
    let q = this.db.selectFrom('edge_terminals as e').innerJoin('terminals as t', 't.id', 'e.terminal_id').select('e.terminal_id').where('e.online', '=', 1);
    if (pupUid) q = q.where('t.pup_uid', '=', pupUid);
    return (await q.execute()).map((r) => r.terminal_id);
  }

  /** A pick up point's codes changed: push to its online terminals. */
  pupChanged(pupUid: string): void {
    if (!this.running) return;
    // a push already queued for this point reads the codes later than this change: it carries it
    if (this.pendingPups.has(pupUid)) return;
    this.pendingPups.add(pupUid);
    const changedAt = performance.now();
    void this.onlineTerminals(pupUid)
      .then((ids) => {
        if (!ids.length) this.pendingPups.delete(pupUid);
        return Promise.all(
          ids.map((id) =>
            this.serial(id, async () => {
              this.pendingPups.delete(pupUid);
              await this.pushChanges(id, changedAt);
              await this.pushLockers(id);
            }),
          ),
        );
      })
      .catch((err) => {
        this.pendingPups.delete(pupUid);
        this.log.error({ err: (err as Error).message, pup: pupUid }, 'code push failed');
      });
  }

  /**
   * The cheap change marker per pick up point: its code version (raised in every transaction that
   * changes its codes: one row per point, however many codes it ever had) and its latest locker
   * change (a locker moved to another lock by provisioning).
   */
  private async readMarkers(): Promise<Map<string, string>> {
    const codes = await this.db.selectFrom('pup_code_versions').select(['pup_uid', 'version']).execute();
    const lockers = await this.db
      .selectFrom('lockers')
      .select((eb) => ['pup_uid', eb.fn.max('updated_at').as('u')])
      .groupBy('pup_uid')
      .execute();
    const m = new Map<string, string>();
    for (const r of codes) m.set(r.pup_uid, String(r.version));
    for (const r of lockers) m.set(r.pup_uid, `${m.get(r.pup_uid) ?? ''}|${r.u ?? ''}`);
    return m;
  }

  private async tick(): Promise<void> {
    const markers = await this.readMarkers();
    const changed = [...markers.entries()].filter(([pup, mk]) => this.markers.get(pup) !== mk).map(([pup]) => pup);
    for (const pup of this.markers.keys()) if (!markers.has(pup)) changed.push(pup);
    this.markers = markers;
    const nowMs = Date.now();
    if (nowMs - this.lastReconcile >= this.ctx.config.edge.reconcileSeconds * 1000) {
      this.lastReconcile = nowMs;
      const ids = await this.onlineTerminals();
      await Promise.all(
        ids.map((id) =>
          this.serial(id, async () => {
            await this.pushChanges(id);
            await this.pushLockers(id);
          }),
        ),
      );
    } else {
      for (const pup of changed) this.pupChanged(pup);
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

  private async onEvent(terminalId: string, payload: Buffer): Promise<void> {
    this.eventsReceived++;
    const ev = parseMessage(EventMessage, payload);
    if (!ev || ev.terminalId !== terminalId) {
      this.log.warn({ terminal: terminalId, bytes: payload.length }, 'malformed event dropped');
      return;
    }
    if (!(await this.terminalPup(terminalId))) {
      this.log.warn({ terminal: terminalId }, 'event from a terminal that is not provisioned dropped');
      return;
    }
    // stored before the broker acknowledges it (beforeAck: the PUBACK waits for this promise);
    // a failing store is retried rather than acknowledged
    let fresh = false;
    for (let delay = 100; ; delay = Math.min(delay * 2, 5000)) {
      try {
        fresh = await this.storeEvent(terminalId, ev, payload);
        break;
      } catch (err) {
        if (!this.running) throw err;
        this.log.error({ err: (err as Error).message, terminal: terminalId, seq: ev.seq }, 'storing a terminal event failed; retrying');
        await sleep(delay);
      }
    }
    centralMetrics.edgeEvents.inc({ type: ev.type, outcome: fresh ? 'stored' : 'duplicate' });
    if (!fresh) this.log.debug({ terminal: terminalId, seq: ev.seq }, 'repeated event ignored');
    // applied in the journal's seq order: this one and what it unblocks, or held for a gap before it;
    // then the terminal learns how far its journal is committed (down/eventAcks). Not awaited here:
    // the broker's PUBACK means "stored"; an MQTT client takes no further packet (not even the
    // PUBACK of our own acknowledgement) until this handler returns, so waiting would deadlock
    void this.trackStoring(
      this.serial(terminalId, () => this.advance(terminalId, ev.journalId ?? null)).catch((err) =>
        this.log.error({ err: (err as Error).message, terminal: terminalId }, 'applying terminal events failed; retried'),
      ),
    );
  }

  private async storeEvent(terminalId: string, ev: EventMessage, payload: Buffer): Promise<boolean> {
    await this.ensureTerminal(terminalId);
    return this.db.transaction().execute(async (trx) => {
      const journalId = ev.journalId ?? null;
      const r = await trx
        .insertInto('edge_events')
        .values({ event_id: ev.eventId, terminal_id: terminalId, journal_id: journalId, seq: ev.seq, type: ev.type, at: ev.at, received_at: this.nowDb(), payload: payload.toString('utf8'), processed: 0, outcome: null, attempts: 0 })
        .onConflict((oc) => oc.column('event_id').doNothing())
        .executeTakeFirst();
      if (Number(r.numInsertedOrUpdatedRows ?? 0) !== 1) return false;
      const t = await trx.selectFrom('edge_terminals').select(['last_seq', 'journal_id']).where('terminal_id', '=', terminalId).executeTakeFirstOrThrow();
      // the first journal id a terminal shows names the journal whose seq applied_seq already counts
      // (an agent updated in place keeps its store); last_seq is the highest seq seen, for status
      const patch: { last_seq?: number; journal_id?: string } = {};
      if (t.journal_id == null && journalId) patch.journal_id = journalId;
      if (ev.seq > Number(t.last_seq)) patch.last_seq = ev.seq;
      if (ev.seq !== Number(t.last_seq) + 1) this.log.info({ terminal: terminalId, seq: ev.seq, lastSeq: Number(t.last_seq) }, 'event out of sequence (held until the gap is filled, or a repeat)');
      if (Object.keys(patch).length) await trx.updateTable('edge_terminals').set(patch).where('terminal_id', '=', terminalId).execute();
      return true;
    });
  }

  /** Marks an event processed with its outcome, unless another instance did already. */
  private async finish(eventId: string, outcome: string): Promise<boolean> {
    const r = await this.db.updateTable('edge_events').set({ processed: 1, outcome }).where('event_id', '=', eventId).where('processed', '=', 0).executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  private async finishTrue(eventId: string, outcome: string): Promise<true> {
    await this.finish(eventId, outcome);
    return true;
  }

  private journalIs(journal: string | null) {
    return (eb: ExpressionBuilder<Database, 'edge_events'>) => (journal === null ? eb('journal_id', 'is', null) : eb('journal_id', '=', journal));
  }

  /**
   * Applies a terminal's stored events in seq order from its applied_seq on, as far as they are
   * contiguous; then acknowledges (down/eventAcks). A missing seq holds the later ones (they stay
   * stored, unprocessed: bounded by the database, not memory); after edge.gapResendSeconds the
   * terminal is asked to send again from the gap, after edge.gapGiveUpSeconds the gap is skipped
   * (an error in the log). Several instances may run this for the same terminal: applied_seq moves
   * by compare-and-set and each door event is claimed in the transaction that applies it, so every
   * event is applied once, in order.
   */
  private async advance(terminalId: string, arrivedJournal: string | null = null): Promise<void> {
    let resendFrom: number | undefined;
    for (let guard = 0; guard < 100_000 && this.running; guard++) {
      const t = await this.db.selectFrom('edge_terminals').select(['applied_seq', 'journal_id', 'gap_since']).where('terminal_id', '=', terminalId).executeTakeFirst();
      if (!t) return;
      const applied = Number(t.applied_seq ?? 0);
      const journal = t.journal_id ?? null;
      // events outside the current journal: legacy ones (no journal id, from agents older than
      // ordered delivery) are applied as they come; a new journal (a new store, counting from 1
      // again) takes over at its seq 1, once what the old one still holds is applied
      if (journal !== null) {
        const stray = await this.db
          .selectFrom('edge_events')
          .select(['event_id', 'journal_id'])
          .where('terminal_id', '=', terminalId)
          .where('processed', '=', 0)
          .where((eb) => eb.or([eb('journal_id', 'is', null), eb.and([eb('journal_id', '!=', journal), eb('seq', '=', 1)])]))
          .orderBy('seq')
          .limit(1)
          .executeTakeFirst();
        if (stray && stray.journal_id === null) {
          if (!(await this.processEvent(terminalId, stray.event_id))) break;
          continue;
        }
        if (stray) {
          const held = await this.db.selectFrom('edge_events').select('event_id').where('terminal_id', '=', terminalId).where(this.journalIs(journal)).where('processed', '=', 0).orderBy('seq').execute();
          let ok = true;
          for (const h of held) if (!(ok = await this.processEvent(terminalId, h.event_id))) break;
          if (!ok) break;
          this.log.warn({ terminal: terminalId }, 'the terminal started a new journal (a new store): its seq counts from 1 again');
          await this.db.updateTable('edge_terminals').set({ journal_id: stray.journal_id, applied_seq: 0, gap_since: null }).where('terminal_id', '=', terminalId).where('applied_seq', '=', applied).execute();
          continue;
        }
      }
      const next = await this.db.selectFrom('edge_events').select(['event_id', 'processed']).where('terminal_id', '=', terminalId).where(this.journalIs(journal)).where('seq', '=', applied + 1).executeTakeFirst();
      if (next) {
        if (!next.processed && !(await this.processEvent(terminalId, next.event_id))) break;
        await this.db.updateTable('edge_terminals').set({ applied_seq: applied + 1, gap_since: null }).where('terminal_id', '=', terminalId).where('applied_seq', '=', applied).execute();
        continue;
      }
      // nothing at applied + 1: a gap when a later event waits
      const later = await this.db
        .selectFrom('edge_events')
        .select('seq')
        .where('terminal_id', '=', terminalId)
        .where(this.journalIs(journal))
        .where('seq', '>', applied + 1)
        .where('processed', '=', 0)
        .orderBy('seq')
        .limit(1)
        .executeTakeFirst();
      if (!later) break;
      const nowMs = this.ctx.clock.now().getTime();
      if (!t.gap_since) {
        await this.db.updateTable('edge_terminals').set({ gap_since: this.nowDb() }).where('terminal_id', '=', terminalId).execute();
        this.log.info({ terminal: terminalId, missing: applied + 1, held: Number(later.seq) }, 'event gap: later events held until it is filled');
        break;
      }
      const waitedMs = nowMs - Date.parse(t.gap_since);
      if (waitedMs >= this.ctx.config.edge.gapGiveUpSeconds * 1000) {
        this.log.error({ terminal: terminalId, missing: [applied + 1, Number(later.seq) - 1], waitedMs, errorCode: 'EVENT_GAP_SKIPPED' }, 'event gap given up on: the missing events never came; the held ones are applied');
        await this.db.updateTable('edge_terminals').set({ applied_seq: Number(later.seq) - 1, gap_since: null }).where('terminal_id', '=', terminalId).where('applied_seq', '=', applied).execute();
        continue;
      }
      if (waitedMs >= this.ctx.config.edge.gapResendSeconds * 1000) {
        const last = this.resendAsked.get(terminalId) ?? 0;
        if (nowMs - last >= this.ctx.config.edge.gapResendSeconds * 1000) {
          this.resendAsked.set(terminalId, nowMs);
          resendFrom = applied + 1;
          this.log.warn({ terminal: terminalId, from: resendFrom, waitedMs }, 'event gap: asking the terminal to send again');
        }
      }
      break;
    }
    await this.acknowledge(terminalId, arrivedJournal, resendFrom);
  }

  /** down/eventAcks: every event of the current journal up to applied_seq is committed here. */
  private async acknowledge(terminalId: string, arrivedJournal: string | null, resendFrom?: number): Promise<void> {
    const t = await this.db.selectFrom('edge_terminals').select(['applied_seq', 'journal_id']).where('terminal_id', '=', terminalId).executeTakeFirst();
    const journalId = t?.journal_id ?? null;
    // agents from before journal ids do not listen for it (their events are acknowledged by PUBACK)
    if (!t || !journalId || (arrivedJournal !== null && arrivedJournal !== journalId && resendFrom === undefined)) return;
    const msg: EventAck = { v: 1, journalId, upTo: Number(t.applied_seq ?? 0), ...(resendFrom !== undefined ? { resendFrom } : {}), at: this.ctx.clock.now().toISOString() };
    // not awaited (see onEvent); lost, the terminal sends the events again and is acknowledged then
    this.bus.publish(edgeTopics.down(terminalId, 'eventAcks'), JSON.stringify(msg), { qos: 1 }).catch((err) => {
      this.log.warn({ terminal: terminalId, err: (err as Error).message }, 'event acknowledgement not published');
    });
  }

  /**
   * Acts on one stored event; false when it failed for a transient reason (it stays unprocessed
   * and holds the later ones until a retry succeeds).
   */
  private async processEvent(terminalId: string, eventId: string): Promise<boolean> {
    const row = await this.db.selectFrom('edge_events').selectAll().where('event_id', '=', eventId).executeTakeFirst();
    if (!row || row.processed) return true;
    if (row.type !== 'dropOff' && row.type !== 'pickUp') {
      // the lock's observed state (edge/observations.ts); a failure leaves the event unprocessed: retried
      if (!(await recordObservation(this.db, this.log, terminalId, row))) return false;
      return this.finishTrue(eventId, 'stored');
    }
    const body = JSON.parse(row.payload) as Record<string, unknown>;
    const f = AccessDoneFields.safeParse(body);
    if (!f.success) return this.finishTrue(eventId, 'rejected:MalformedEvent');
    const pup = await this.terminalPup(terminalId);
    const code = await this.db.selectFrom('access_codes').select(['value', 'pup_uid']).where('uid', '=', f.data.codeId).executeTakeFirst();
    if (!code || code.pup_uid !== pup) return this.finishTrue(eventId, 'rejected:UnknownCode');
    const item = typeof body.item === 'boolean' ? body.item : null;
    // door time (docs/state-machine.md "Door time"): the event's time at the terminal, corrected by
    // the terminal's measured clock offset when it is flagged (edge/clock.ts), never after arrival
    const clk = await this.db.selectFrom('edge_terminals').select(['clock_offset_ms', 'clock_skewed']).where('terminal_id', '=', terminalId).executeTakeFirst();
    const receivedAt = new Date(row.received_at);
    const at = doorTime(row.at, receivedAt, clk ? { offsetMs: clk.clock_offset_ms, skewed: clk.clock_skewed } : null);
    try {
      // claimed in the transaction that applies it: applied once, whichever instance gets there first
      const claim = async (trx: Kysely<Database>) =>
        Number((await trx.updateTable('edge_events').set({ processed: 1, outcome: 'applying' }).where('event_id', '=', eventId).where('processed', '=', 0).executeTakeFirst()).numUpdatedRows) === 1;
      const r = await handleDoorEvent(this.ctx, { pupUid: pup!, lockerUid: f.data.lockerUid, code: code.value, codeId: f.data.codeId, itemPresent: item, at, receivedAt, claim });
      if (r.skipped) return true; // another instance applied it (its claim committed first)
      this.log.info({ terminal: terminalId, seq: row.seq, type: row.type, shipment: r.shipmentUid, changed: r.changed, state: r.stateCode }, 'door event applied');
      await this.db.updateTable('edge_events').set({ outcome: `${r.action}:${r.changed ? 'applied' : 'unchanged'}:${r.stateCode}` }).where('event_id', '=', eventId).execute();
      return true;
    } catch (err) {
      if (err instanceof ApiError) {
        this.log.warn({ terminal: terminalId, seq: row.seq, type: row.type, errorCode: err.code }, 'door event not applicable');
        return this.finishTrue(eventId, `rejected:${err.code}`);
      }
      await this.db.updateTable('edge_events').set({ attempts: row.attempts + 1 }).where('event_id', '=', eventId).execute();
      this.log.error({ terminal: terminalId, seq: row.seq, err: (err as Error).message }, 'door event failed; will retry');
      return false;
    }
  }

  /** Terminals with unprocessed events (a transient failure, or held behind a gap): advance them again. */
  private async retryUnprocessed(): Promise<void> {
    const rows = await this.db.selectFrom('edge_events').select('terminal_id').distinct().where('processed', '=', 0).limit(1000).execute();
    for (const r of rows) await this.serial(r.terminal_id, () => this.advance(r.terminal_id));
  }
}
