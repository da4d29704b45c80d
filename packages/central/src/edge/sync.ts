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
// Events: each is stored in edge_events (deduplicated by eventId) before the broker acknowledges
// it to the terminal; dropOff / pickUp events then run the shipment transition (the same code as
// SimulateLockerAccess) with cause "door". An event whose processing failed for a transient reason
// stays unprocessed and is retried.
import type { Kysely } from 'kysely';
import {
  AccessDoneFields,
  EventMessage,
  StatusMessage,
  SyncRequest,
  edgeTopics,
  parseEdgeTopic,
  parseMessage,
  type CodesDelta,
  type CodesSnapshot,
} from '@locker/common';
import type { AppContext, Worker } from '../context';
import type { Database } from '../db/schema';
import type { MessageBus } from '../mqtt/bus';
import type { Logger } from '../logger';
import { ApiError } from '../errors';
import { newUid, toDbTime } from '../ids';
import { handleDoorEvent } from '../shipments/service';
import { currentCodes, diffCodes, entryDigest } from './codes';
import { onCodesChanged } from './notify';

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
      await this.bus.subscribe(edgeTopics.allUp('events'), (t, p) => this.route(t, p, (id) => this.trackStoring(this.onEvent(id, p))), { beforeAck: true });
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
    await this.ensureTerminal(terminalId);
    const online = msg.state === 'online' ? 1 : 0;
    await this.db
      .updateTable('edge_terminals')
      .set({ online, status_at: this.nowDb(), last_status: JSON.stringify(msg), updated_at: this.nowDb() })
      .where('terminal_id', '=', terminalId)
      .execute();
    this.log.info({ terminal: terminalId, state: msg.state, ...(msg.state === 'online' ? { version: msg.codes.version, unsent: msg.journal.unsent } : { reason: msg.reason }) }, 'terminal status');
    if (msg.state !== 'online') return;
    const held = msg.codes;
    void this.serial(terminalId, async () => {
      const row = await this.ensureTerminal(terminalId);
      if (held.epoch !== row.epoch || held.version !== row.codes_version) await this.sendSnapshot(terminalId);
      else await this.pushChanges(terminalId);
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
      this.log.info({ terminal: terminalId, version, count: codes.length }, 'code snapshot pushed');
      return;
    }
    this.log.warn({ terminal: terminalId }, 'code snapshot: version kept moving; the next status will retry');
  }

  /** Sends what changed since the last push, if anything. */
  async pushChanges(terminalId: string): Promise<void> {
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
      this.log.info({ terminal: terminalId, version, upserts: diff.upserts.length, revoked: diff.revoke.length }, 'code update pushed');
      return;
    }
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
    void this.onlineTerminals(pupUid)
      .then((ids) => {
        if (!ids.length) this.pendingPups.delete(pupUid);
        return Promise.all(
          ids.map((id) =>
            this.serial(id, () => {
              this.pendingPups.delete(pupUid);
              return this.pushChanges(id);
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
      await Promise.all(ids.map((id) => this.serial(id, () => this.pushChanges(id))));
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
    if (!fresh) {
      this.log.debug({ terminal: terminalId, seq: ev.seq }, 'repeated event ignored');
      return;
    }
    await this.serial(terminalId, () => this.processEvent(terminalId, ev.eventId));
  }

  private async storeEvent(terminalId: string, ev: EventMessage, payload: Buffer): Promise<boolean> {
    await this.ensureTerminal(terminalId);
    return this.db.transaction().execute(async (trx) => {
      const r = await trx
        .insertInto('edge_events')
        .values({ event_id: ev.eventId, terminal_id: terminalId, seq: ev.seq, type: ev.type, at: ev.at, received_at: this.nowDb(), payload: payload.toString('utf8'), processed: 0, outcome: null, attempts: 0 })
        .onConflict((oc) => oc.column('event_id').doNothing())
        .executeTakeFirst();
      if (Number(r.numInsertedOrUpdatedRows ?? 0) !== 1) return false;
      const t = await trx.selectFrom('edge_terminals').select('last_seq').where('terminal_id', '=', terminalId).executeTakeFirstOrThrow();
      if (ev.seq !== t.last_seq + 1) this.log.warn({ terminal: terminalId, seq: ev.seq, lastSeq: t.last_seq }, 'event sequence gap or repeat');
      if (ev.seq > t.last_seq) await trx.updateTable('edge_terminals').set({ last_seq: ev.seq }).where('terminal_id', '=', terminalId).execute();
      return true;
    });
  }

  private async finish(eventId: string, outcome: string): Promise<void> {
    await this.db.updateTable('edge_events').set({ processed: 1, outcome }).where('event_id', '=', eventId).execute();
  }

  private async processEvent(terminalId: string, eventId: string): Promise<void> {
    const row = await this.db.selectFrom('edge_events').selectAll().where('event_id', '=', eventId).executeTakeFirst();
    if (!row || row.processed) return;
    if (row.type !== 'dropOff' && row.type !== 'pickUp') return this.finish(eventId, 'stored');
    const body = JSON.parse(row.payload) as Record<string, unknown>;
    const f = AccessDoneFields.safeParse(body);
    if (!f.success) return this.finish(eventId, 'rejected:MalformedEvent');
    const pup = await this.terminalPup(terminalId);
    const code = await this.db.selectFrom('access_codes').select(['value', 'pup_uid']).where('uid', '=', f.data.codeId).executeTakeFirst();
    if (!code || code.pup_uid !== pup) return this.finish(eventId, 'rejected:UnknownCode');
    const item = typeof body.item === 'boolean' ? body.item : null;
    try {
      const r = await handleDoorEvent(this.ctx, { pupUid: pup!, lockerUid: f.data.lockerUid, code: code.value, itemPresent: item });
      this.log.info({ terminal: terminalId, seq: row.seq, type: row.type, shipment: r.shipmentUid, changed: r.changed, state: r.stateCode }, 'door event applied');
      await this.finish(eventId, `${r.action}:${r.changed ? 'applied' : 'unchanged'}:${r.stateCode}`);
    } catch (err) {
      if (err instanceof ApiError) {
        this.log.warn({ terminal: terminalId, seq: row.seq, type: row.type, errorCode: err.code }, 'door event not applicable');
        await this.finish(eventId, `rejected:${err.code}`);
        return;
      }
      await this.db.updateTable('edge_events').set({ attempts: row.attempts + 1 }).where('event_id', '=', eventId).execute();
      this.log.error({ terminal: terminalId, seq: row.seq, err: (err as Error).message }, 'door event failed; will retry');
    }
  }

  private async retryUnprocessed(): Promise<void> {
    const rows = await this.db.selectFrom('edge_events').select(['event_id', 'terminal_id']).where('processed', '=', 0).orderBy('terminal_id').orderBy('seq').limit(100).execute();
    for (const r of rows) await this.serial(r.terminal_id, () => this.processEvent(r.terminal_id, r.event_id));
  }
}
