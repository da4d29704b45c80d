// The terminal agent: lock buses (RS485 boards through @locker/lockbus), scanners, the local
// store (offline code cache + event journal), the MQTT link to the central service and the
// diagnostics page. Constructor only assigns; start() opens everything, stop() closes it in
// reverse order. Every door, access and board event is written to the journal first and
// published from there (edge-link.ts), so nothing is lost to a dead broker or a power cut.
import crypto from 'node:crypto';
import fs from 'node:fs';
import type { Logger } from 'pino';
import {
  AckMessage,
  CommandMessage,
  CodesMessage,
  hashCode,
  parseMessage,
  type EdgeEventType,
  type LockRef,
  type StatusOnline,
  type UnlockCommandMessage,
} from '@locker/common';
import { LockBusError, LockBusManager, ScannerReader, type Credential, type LockBusOptions, type LockView } from '@locker/lockbus';
import type { AgentConfig } from './config';
import { AgentStore, type JournalEntry, type LockStateRow } from './store';
import { EdgeLink } from './edge-link';
import { decideCodes } from './codes';
import { takeLockers } from './lockers';
import { claimBusPorts } from './port-claims';
import { AccessThrottle, TERMINAL } from './throttle';
import { expireSessions, journalInput, lockKey, sessionStep, type SessionEffect, type SessionInput, type Sessions } from './session';
import { DiagnosticsServer } from './diagnostics';
import { createAgentLogger, logRingOf, type LogRing } from './logger';
import { AgentMetrics, AgentMetricsServer } from './metrics';
import type { AgentState, CredentialOutcome, TechnicianHost, TechnicianOpenOutcome, UnlockOutcome } from './host';

export const AGENT_VERSION: string = (() => {
  try {
    return JSON.parse(fs.readFileSync(new URL('../package.json', import.meta.url), 'utf8')).version as string;
  } catch {
    return '0.0.0';
  }
})();

export interface AgentOptions {
  config: AgentConfig;
  log?: Logger;
  now?: () => Date;
  /** opens each bus's port (default: the real serial / TCP transport); a test wraps it to inject a fault into the real link */
  createTransport?: LockBusOptions['createTransport'];
}

export type { AgentState, CredentialOutcome, LockState, TechnicianOpenOutcome, UnlockOutcome } from './host';

const BUS_EVENTS = ['doorOpened', 'doorClosed', 'itemPlaced', 'itemRemoved', 'jam', 'unlockUnobserved', 'forcedOpen', 'doorLeftOpen', 'boardOffline', 'boardOnline'] as const;

export class Agent implements TechnicianHost {
  store!: AgentStore;
  link!: EdgeLink;
  buses!: LockBusManager;
  scanners: ScannerReader[] = [];
  diagnostics: DiagnosticsServer | null = null;
  /**
   * The technician's scanner test (technician/actions.ts): while set, a presented code is handed
   * to it instead (true: taken; it is then not a credential: not checked, journalled or counted).
   */
  credentialTap: ((c: Pick<Credential, 'source' | 'value' | 'reader'>) => boolean) | null = null;
  /** the recent log lines of the agent's own logger (logger.ts), for GET /api/logs; null with a logger from outside */
  logRing: LogRing | null = null;
  /** the Prometheus metrics (counted always; served when metrics.enabled: metricsServer) */
  metrics!: AgentMetrics;
  metricsServer: AgentMetricsServer | null = null;
  private log!: Logger;
  private sessions: Sessions = {};
  /** sessions restored from the journal at start, not yet compared with their board's first poll */
  private restored = new Set<string>();
  /** locks of unlocks begun before the restart (restorePendingUnlocks), not yet compared with their board's first poll */
  private unlockedBeforeStart = new Set<string>();
  /** boards compared with the journal since start (`bus/board`) */
  private reconciled = new Set<string>();
  /** the last journalled physical state of each lock (mirror of the store's lock_state) */
  private lockStates = new Map<string, LockStateRow>();
  private startedAt = new Date(0);
  private running = false;
  /** stop() is under way: no new codes or commands; bus events are still journalled until the buses stopped */
  private stopping = false;
  /** the last journal write failed (cleared by the next one that succeeds): healthy() is false */
  private journalFault: string | null = null;
  private timers: NodeJS.Timeout[] = [];
  private statusTimer: NodeJS.Timeout | null = null;
  private lastSyncRequestAt = 0;
  private portDown = new Set<string>();
  /** removes this agent's claims on its bus ports (port-claims.ts) */
  private releasePorts: (() => void) | null = null;
  private credentialChain: Promise<void> = Promise.resolve();

  constructor(private readonly opts: AgentOptions) {}

  private get cfg(): AgentConfig {
    return this.opts.config;
  }

  private now(): Date {
    return this.opts.now ? this.opts.now() : new Date();
  }

  async start(): Promise<void> {
    if (this.running) return;
    const cfg = this.cfg;
    const root = this.opts.log ?? createAgentLogger({ level: cfg.log.level, terminalId: cfg.terminal.id });
    this.logRing = logRingOf(root);
    this.log = root.child({ ns: 'agent' });
    this.startedAt = this.now();
    this.store = new AgentStore(cfg.store.path);
    this.store.open();
    this.journalFault = null;
    this.restoreSessions();
    this.restorePendingUnlocks();
    this.running = true;
    this.stopping = false;

    const busOptions: LockBusOptions[] = cfg.buses.map((b) => ({
      name: b.name,
      port: b.port,
      dialect: b.dialect,
      baudRate: b.baudRate,
      polarity: b.polarity,
      boards: b.boards,
      pollIntervalMs: b.pollMs,
      pulseMs: b.pulseMs,
      replyTimeoutMs: b.replyTimeoutMs,
      jamWindowMs: b.jamWindowMs,
      doorLeftOpenMs: b.doorLeftOpenMs,
      reconnect: b.reconnect,
      createTransport: this.opts.createTransport,
    }));
    this.buses = new LockBusManager(busOptions, root);
    this.metrics = new AgentMetrics(
      {
        journalUnsent: () => this.store.unsentCount(),
        mqttConnected: () => this.link.connected,
        codesHeld: () => this.store.codesMeta().count,
        codesAgeSeconds: () => this.offlineMs() / 1000,
        boards: () => this.busHealth().map((b) => ({ bus: b.name, portOpen: b.portOpen, boards: b.boards })),
      },
      { defaultMetrics: cfg.metrics.enabled },
    );
    this.buses.on('transaction', (e) => this.metrics.transaction(e));
    for (const ev of BUS_EVENTS)
      this.buses.on(ev, (e: any) => {
        this.metrics.busEvent(ev, e);
        this.onBusEvent(ev, e);
      });
    this.buses.on('portClosed', (e) => {
      if (!this.running || this.stopping || this.portDown.has(e.bus)) return;
      this.portDown.add(e.bus);
      this.record('busPortLost', { bus: e.bus, error: e.error }, new Date(e.at));
      this.statusSoon();
    });
    this.buses.on('portOpened', (e) => {
      if (!this.running || this.stopping || !this.portDown.delete(e.bus)) return;
      this.record('busPortRestored', { bus: e.bus }, new Date(e.at));
      this.statusSoon();
    });

    this.link = new EdgeLink({
      url: cfg.mqtt.url,
      terminalId: cfg.terminal.id,
      secret: cfg.terminal.secret,
      keepaliveSeconds: cfg.mqtt.keepaliveSeconds,
      reconnectMs: cfg.mqtt.reconnectMs,
      reconnectMaxMs: cfg.mqtt.reconnectMaxMs,
      connectTimeoutMs: cfg.mqtt.connectTimeoutMs,
      publishTimeoutMs: cfg.mqtt.publishTimeoutMs,
      store: this.store,
      log: root,
      status: () => this.statusMessage(),
      now: () => this.now(),
    });
    // the offline cache's age (access.maxOfflineHours): the last moment the link was known up
    if (!this.store.getMeta('codes.syncedAt')) this.markSynced();
    this.link.on('connected', () => this.markSynced());
    this.link.on('disconnected', () => this.markSynced());
    this.link.on('message', (kind, payload) => {
      if (kind === 'codes') this.onCodes(payload);
      else if (kind === 'lockers') this.onLockers(payload);
      else
        void this.onCommand(payload).catch((err) => {
          // not begun in the store (a journal that cannot be written): not executed, not acknowledged;
          // the central service's command times out (UnlockFailed)
          this.journalFault = (err as Error).message;
          this.log.error({ err: (err as Error).message, errorCode: 'JOURNAL_UNAVAILABLE' }, 'unlock command not executed: the store cannot be written');
        });
    });

    this.scanners = cfg.scanners.map((s) => new ScannerReader({ name: s.name, port: s.port, baudRate: s.baudRate, suffix: s.suffix, logger: root }));
    for (const s of this.scanners) s.on('credential', (c) => this.presentCredential(c));

    // the wiring-check CLI refuses a port this agent holds (port-claims.ts)
    this.releasePorts = claimBusPorts(cfg, this.log);
    await this.buses.start();
    for (const s of this.scanners) await s.start();
    await this.link.start();
    if (cfg.diagnostics.enabled) {
      this.diagnostics = new DiagnosticsServer({
        agent: this,
        host: cfg.diagnostics.host,
        port: cfg.diagnostics.port,
        password: cfg.diagnostics.technicianPassword ?? null,
        sessionMinutes: cfg.diagnostics.sessionMinutes,
        timeZone: cfg.diagnostics.timeZone ?? Intl.DateTimeFormat().resolvedOptions().timeZone,
        log: root,
      });
      await this.diagnostics.start();
    }
    if (cfg.metrics.enabled) {
      this.metricsServer = new AgentMetricsServer(this.metrics, { host: cfg.metrics.host, port: cfg.metrics.port, log: root.child({ ns: 'agent.metrics' }) });
      await this.metricsServer.start();
    }
    this.timers.push(setInterval(() => void this.link.publishStatus().catch(() => undefined), cfg.mqtt.statusIntervalSeconds * 1000));
    this.timers.push(setInterval(() => this.prune(), 3600_000));
    for (const t of this.timers) t.unref();
    this.prune();
    this.log.info({ version: AGENT_VERSION, buses: cfg.buses.map((b) => b.name), scanners: cfg.scanners.map((s) => s.name), unsent: this.store.unsentCount() }, 'agent started');
  }

  async stop(): Promise<void> {
    if (!this.running || this.stopping) return;
    this.stopping = true; // codes and commands are refused from here on
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
    if (this.statusTimer) clearTimeout(this.statusTimer);
    await this.diagnostics?.stop();
    await this.metricsServer?.stop();
    for (const s of this.scanners) await s.stop();
    await this.credentialChain.catch(() => undefined);
    // bus events (a door closing right now) are journalled until the buses have stopped
    await this.buses.stop();
    this.releasePorts?.();
    this.releasePorts = null;
    this.running = false;
    if (this.link.connected) this.markSynced();
    await this.link.stop();
    this.store.close();
    this.log.info('agent stopped');
  }

  /**
   * Healthy enough to ping the systemd watchdog: the store answers, the last journal write
   * succeeded and the broker link has not been down for longer than mqtt.unhealthyAfterMinutes.
   * A store that can read but not write, or a link that stays down (a client stuck in a state no
   * retry gets out of), stops the pings, so systemd restarts the agent.
   */
  healthy(): boolean {
    if (this.journalFault) return false;
    if (this.link?.downLongerThan(this.cfg.mqtt.unhealthyAfterMinutes)) return false;
    try {
      this.store.unsentCount();
      return this.running;
    } catch {
      return false;
    }
  }

  /** Why the journal is failing (the last write's error), or null. */
  get journalError(): string | null {
    return this.journalFault;
  }

  // ---------------------------------------------------------------- journal

  /** Journals an event; false when the write failed (logged; healthy() turns false until a write succeeds). */
  private record(type: EdgeEventType, fields: Record<string, unknown>, at = this.now()): boolean {
    return this.journal([{ type, fields, at }]);
  }

  /**
   * Journals events in one transaction, with the lock states they leave and, when given, the open
   * sessions after them (the checkpoint the replay starts from). In memory, the sessions and lock
   * states move on only when the write succeeded: what is not journalled did not happen as far as
   * a restart is concerned, and the restart's comparison with the doors finds it again.
   */
  private journal(entries: JournalEntry[], next?: { sessions?: Sessions; locks?: LockStateRow[]; clearPending?: number[] }): boolean {
    try {
      const rows = this.store.appendAll(entries, { locks: next?.locks, sessions: next?.sessions as Record<string, unknown> | undefined, clearPending: next?.clearPending });
      this.journalFault = null;
      if (next?.sessions) this.sessions = next.sessions;
      for (const l of next?.locks ?? []) this.lockStates.set(lockKey(l), l);
      for (const r of rows) this.log.debug({ seq: r.seq, type: r.type }, 'event journalled');
      this.link?.kick();
      return true;
    } catch (err) {
      this.journalFault = (err as Error).message;
      this.log.error({ err: (err as Error).message, types: entries.map((e) => e.type), errorCode: 'JOURNAL_UNAVAILABLE' }, 'journal write failed');
      return false;
    }
  }

  /**
   * A session input and the event that caused it, journalled together with the input's effects
   * (dropOff, pickUp, accessIncomplete: at the same door time) and the sessions after it.
   */
  private stepSessions(input: SessionInput, trigger: JournalEntry[], at: Date, locks?: LockStateRow[]): boolean {
    const r = sessionStep(this.sessions, input);
    const effects = r.effects.map((e): JournalEntry => ({ type: e.type, fields: e.fields, at }));
    const ok = this.journal([...trigger, ...effects], { sessions: r.sessions, locks });
    if (ok) for (const e of r.effects) this.logEffect(e);
    return ok;
  }

  private logEffect(e: SessionEffect): void {
    if (e.type !== 'accessIncomplete') this.log.info({ type: e.type, shipment: e.fields.shipmentUid, bus: e.fields.bus, board: e.fields.board, lock: e.fields.lock }, 'access completed');
    else this.log.info({ reason: e.fields.reason, bus: e.fields.bus, board: e.fields.board, lock: e.fields.lock }, 'access ended without a drop-off or pick-up');
  }

  /**
   * The open sessions as the journal leaves them: the last checkpoint, then the rows journalled
   * after it replayed through the same pure step (their effects are in the journal already).
   * A store from before checkpoints replays the rows of the last access.sessionMaxHours.
   */
  private restoreSessions(): void {
    const cp = this.store.sessionCheckpoint();
    let sessions: Sessions = (cp?.sessions as Sessions | undefined) ?? {};
    const rows = cp ? this.store.rowsAfter(cp.seq) : this.store.rowsSince(new Date(this.now().getTime() - this.cfg.access.sessionMaxHours * 3_600_000).toISOString());
    for (const row of rows) {
      const input = journalInput(row.type, row.fields);
      if (input) sessions = sessionStep(sessions, input).sessions;
    }
    // nobody watched the doors while the agent was down
    this.sessions = Object.fromEntries(Object.entries(sessions).map(([k, s]) => [k, { ...s, blind: true }]));
    this.restored = new Set(Object.keys(sessions));
    this.reconciled.clear();
    this.lockStates = new Map(this.store.lockStates().map((l) => [lockKey(l), l]));
    if (this.restored.size) this.log.info({ sessions: [...this.restored], replayed: rows.length }, 'open access sessions restored from the journal');
  }

  /**
   * Unlocks a process began (a central command, a technician's open: no session covers them) and
   * died before journalling: the frame may have reached the board, so each is journalled now as
   * sent, `uncertain`, at the time it was begun, before anything the first polls find, and a door
   * of theirs found open is the unlock's (`commanded`), not a door that opened by itself. Without
   * this the unlock was lost from the journal and its opening looked uncommanded.
   */
  private clearPendingUnlock(id: number): void {
    try {
      this.store.clearUnlockPending(id);
    } catch (err) {
      // left: a restart journals it as an unlock that may have pulsed (uncertain), which is all that is known then
      this.log.error({ err: (err as Error).message, errorCode: 'JOURNAL_UNAVAILABLE' }, 'an unlock that was not sent could not be cleared from the store');
    }
  }

  private restorePendingUnlocks(): void {
    const pending = this.store.pendingUnlocks();
    if (!pending.length) return;
    const entries: JournalEntry[] = pending.map((p) => ({ type: 'unlockSent', fields: { bus: p.bus, board: p.board, lock: p.lock, ...p.fields, uncertain: true, unwatched: true }, at: new Date(p.at) }));
    if (!this.journal(entries, { clearPending: pending.map((p) => p.id) })) return;
    for (const p of pending) this.unlockedBeforeStart.add(lockKey(p));
    this.log.warn({ unlocks: pending.map((p) => ({ bus: p.bus, board: p.board, lock: p.lock, cause: p.fields.cause })) }, 'unlocks begun before the restart may have pulsed: journalled as sent, uncertain');
  }

  /**
   * A board's first good poll since start, compared with the last journalled state of its locks:
   * what the doors did while nobody watched (the agent dead, a power cut) is journalled now, with
   * `unwatched: true` and the time it was last known (`unwatchedSince`), and the restored sessions
   * of the board end by what the board shows (docs/agent.md, "What survives what").
   */
  private reconcileBoard(bus: string, board: number): void {
    const key = `${bus}/${board}`;
    if (this.reconciled.has(key)) return;
    this.reconciled.add(key);
    let views: LockView[];
    try {
      views = this.buses.bus(bus).locks(board);
    } catch {
      return;
    }
    const at = this.now();
    const atIso = at.toISOString();
    for (const v of views) {
      if (v.door === 'unknown') continue;
      const ref: LockRef = { bus, board, lock: v.lock };
      const k = lockKey(ref);
      const prev = this.lockStates.get(k) ?? null;
      const restored = this.restored.delete(k) ? (this.sessions[k] ?? null) : null;
      const unlockedBeforeStart = this.unlockedBeforeStart.delete(k);
      const now: LockStateRow = { ...ref, door: v.door, item: v.item, at: atIso };
      const base = { ...ref, lockerUid: this.store.lockerAt(bus, board, v.lock), unwatched: true, unwatchedSince: prev?.at ?? null };
      const entries: JournalEntry[] = [];
      let sessions = this.sessions;
      const step = (input: SessionInput) => {
        const r = sessionStep(sessions, input);
        sessions = r.sessions;
        for (const e of r.effects) entries.push({ type: e.type, fields: e.fields, at });
        r.effects.forEach((e) => this.logEffect(e));
      };
      const sid = () => sessions[k]?.sessionId ?? null;
      if (prev) {
        if (v.item !== null && prev.item !== null && v.item !== prev.item) {
          entries.push({ type: v.item ? 'itemPlaced' : 'itemRemoved', fields: { ...base, sessionId: sid() }, at });
          if (!v.item) step({ kind: 'itemRemoved', at: ref });
        }
        if (prev.door === 'closed' && v.door === 'open') {
          entries.push({ type: 'doorOpened', fields: { ...base, commanded: !!sessions[k] || unlockedBeforeStart, item: v.item, sessionId: sid() }, at });
          step({ kind: 'doorOpened', at: ref });
        } else if (prev.door === 'open' && v.door === 'closed') {
          entries.push({ type: 'doorClosed', fields: { ...base, item: v.item, sessionId: sid() }, at });
          step({ kind: 'doorClosed', at: ref, item: v.item });
        }
      }
      if (restored && sessions[k] && v.door === 'closed') {
        // the code was accepted before the gap and the door is shut now: the item sensor decides
        entries.push({ type: 'unlockUnobserved', fields: { ...base, item: v.item, sessionId: sid() }, at });
        step({ kind: 'unobserved', at: ref, item: v.item });
      }
      const changed = !prev || prev.door !== now.door || prev.item !== now.item;
      if (!entries.length && !changed) continue;
      if (entries.length) this.log.warn({ bus, board, lock: v.lock, events: entries.map((e) => e.type) }, 'the doors moved while they were not watched');
      this.journal(entries, { sessions: sessions === this.sessions ? undefined : sessions, locks: [now] });
    }
  }

  /** The lock state an event leaves (from the event, the driver's view filling in what it does not say). */
  private lockAfter(type: string, ref: LockRef, at: Date, item: boolean | null | undefined): LockStateRow | null {
    const prev = this.lockStates.get(lockKey(ref));
    const view = this.lockView(ref);
    const known = (d: string | undefined): 'open' | 'closed' | null => (d === 'open' || d === 'closed' ? d : null);
    let door: 'open' | 'closed' | null = known(prev?.door) ?? known(view?.door);
    let it = prev?.item ?? view?.item ?? null;
    if (type === 'doorOpened') door = 'open';
    else if (type === 'doorClosed' || type === 'unlockUnobserved') door = 'closed';
    if (type === 'itemPlaced') it = true;
    else if (type === 'itemRemoved') it = false;
    else if (item !== undefined) it = item;
    if (!door) return null;
    return { ...ref, door, item: it, at: at.toISOString() };
  }

  // ---------------------------------------------------------------- buses

  private lockView(at: LockRef): LockView | null {
    try {
      return this.buses.bus(at.bus).locks(at.board)[at.lock - 1] ?? null;
    } catch {
      return null;
    }
  }

  private onBusEvent(type: (typeof BUS_EVENTS)[number], e: any): void {
    if (!this.running) return;
    const at = new Date(e.at);
    if (type === 'boardOffline') {
      // the board's open sessions are no longer watched (session.ts: blind)
      this.stepSessions({ kind: 'blindBoard', bus: e.bus, board: e.board }, [{ type, fields: { bus: e.bus, board: e.board, error: e.error }, at }], at);
      this.statusSoon();
      return;
    }
    if (type === 'boardOnline') {
      this.record(type, { bus: e.bus, board: e.board }, at);
      this.reconcileBoard(e.bus, e.board);
      this.statusSoon();
      return;
    }
    const ref: LockRef = { bus: e.bus, board: e.board, lock: e.lock };
    const base = { ...ref, lockerUid: this.store.lockerAt(ref.bus, ref.board, ref.lock) };
    const sid = () => this.sessions[lockKey(ref)]?.sessionId ?? null;
    const lock = (item?: boolean | null) => {
      const l = this.lockAfter(type, ref, at, item);
      return l ? [l] : undefined;
    };
    switch (type) {
      case 'doorOpened': {
        const item = this.lockView(ref)?.item ?? null;
        const sessionId = sid();
        this.stepSessions({ kind: 'doorOpened', at: ref }, [{ type: 'doorOpened', fields: { ...base, commanded: e.commanded, item, sessionId }, at }], at, lock(item));
        break;
      }
      case 'itemPlaced':
        this.journal([{ type: 'itemPlaced', fields: { ...base, sessionId: sid() }, at }], { locks: lock() });
        break;
      case 'itemRemoved':
        this.stepSessions({ kind: 'itemRemoved', at: ref }, [{ type: 'itemRemoved', fields: { ...base, sessionId: sid() }, at }], at, lock());
        break;
      case 'doorClosed': {
        const item = this.lockView(ref)?.item ?? null;
        this.stepSessions({ kind: 'doorClosed', at: ref, item }, [{ type: 'doorClosed', fields: { ...base, item, sessionId: sid() }, at }], at, lock(item));
        break;
      }
      case 'unlockUnobserved': {
        // the board could not be read while the unlock played out; the door is shut now
        const item: boolean | null = e.item ?? null;
        this.stepSessions({ kind: 'unobserved', at: ref, item }, [{ type: 'unlockUnobserved', fields: { ...base, item, afterMs: e.afterMs, sessionId: sid() }, at }], at, lock(item));
        break;
      }
      case 'jam':
        this.stepSessions({ kind: 'jam', at: ref }, [{ type: 'jam', fields: { ...base, cause: e.cause, afterMs: e.afterMs, sessionId: sid() }, at }], at);
        break;
      case 'forcedOpen':
        this.record('forcedOpen', { ...base, reason: e.reason }, at);
        break;
      case 'doorLeftOpen':
        this.record('doorLeftOpen', { ...base, openMs: e.openMs }, at);
        break;
    }
  }

  /** Pulses one lock. Never retried: an unlock that may have been written is not repeated. */
  async unlock(at: LockRef): Promise<UnlockOutcome> {
    let bus;
    try {
      bus = this.buses.bus(at.bus);
      if (!bus.boards.includes(at.board)) throw new LockBusError('UNKNOWN_BOARD', `no board ${at.board}`);
    } catch {
      return { ok: false, error: 'UNKNOWN_LOCK', message: `no lock ${at.bus}/${at.board}/${at.lock} on this terminal` };
    }
    const alreadyOpen = this.lockView(at)?.door === 'open';
    try {
      const r = await bus.unlock(at.board, at.lock);
      // a write that broke off may have pulsed the lock: counted as sent, never as refused, or a
      // door opened by it would be forcedOpen and a parcel put in would be no drop-off
      return r.replyError === 'WRITE_FAILED' ? { ok: true, alreadyOpen, uncertain: true } : { ok: true, alreadyOpen };
    } catch (err) {
      const code = (err as LockBusError).code;
      // BUSY: the bus is paused for a technician's scan (nothing sent)
      if (code === 'NOT_SENT' || code === 'BUSY') return { ok: false, error: 'BUS_UNAVAILABLE', message: (err as Error).message };
      if (code === 'UNKNOWN_BOARD' || code === 'BAD_CONFIG') return { ok: false, error: 'UNKNOWN_LOCK', message: (err as Error).message };
      return { ok: false, error: 'HARDWARE_FAULT', message: (err as Error).message };
    }
  }

  // ---------------------------------------------------------------- access

  /** A code presented at a scanner or keypad. Handled one at a time, in arrival order. */
  presentCredential(c: Pick<Credential, 'source' | 'value' | 'reader'>): Promise<CredentialOutcome> {
    if (this.credentialTap?.(c)) return Promise.resolve({ accepted: false, reason: 'SCANNER_TEST' });
    const next = this.credentialChain
      .then(() => this.handleCredential(c))
      .catch((err): CredentialOutcome => {
        this.log.error({ err: (err as Error).message, errorCode: 'CREDENTIAL_FAILED' }, 'credential handling failed');
        return { accepted: false, reason: 'FAILED', error: (err as Error).message };
      });
    this.credentialChain = next.then(() => undefined);
    return next;
  }

  private throttledUntil(reader: string): number {
    return new AccessThrottle(this.store, this.cfg.access).throttledUntil(reader, this.now().getTime());
  }

  private markSynced(): void {
    try {
      this.store.setMeta('codes.syncedAt', String(this.now().getTime()));
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, 'sync time not stored');
    }
  }

  /** ms since the cache was last known current: 0 while the link is up. */
  private offlineMs(): number {
    if (this.link.connected) return 0;
    const at = Number(this.store.getMeta('codes.syncedAt') ?? 0);
    return at ? Math.max(0, this.now().getTime() - at) : 0;
  }

  private async handleCredential(c: Pick<Credential, 'source' | 'value' | 'reader'>): Promise<CredentialOutcome> {
    if (!this.running || this.stopping) return { accepted: false, reason: 'STOPPING' };
    const a = this.cfg.access;
    const nowMs = this.now().getTime();
    const base = { source: c.source, reader: c.reader };
    if (a.maxOfflineHours !== null && this.offlineMs() > a.maxOfflineHours * 3_600_000) {
      // revocations made meanwhile cannot have reached the cache: refuse rather than open on them
      this.log.warn({ reader: c.reader, offlineHours: Math.round(this.offlineMs() / 360_000) / 10 }, 'code refused: the code cache is too old (no connection to the central service)');
      this.record('credentialRefused', { ...base, reason: 'CODES_STALE' });
      return { accepted: false, reason: 'CODES_STALE' };
    }
    if (this.throttledUntil(c.reader)) {
      this.log.warn({ reader: c.reader }, 'code refused: reader locked out after failed attempts');
      this.record('credentialRefused', { ...base, reason: 'THROTTLED' });
      return { accepted: false, reason: 'THROTTLED' };
    }
    const hash = hashCode(c.value);
    const matches = this.store.findCodes(hash).filter((m) => c.source === 'qr' || m.type === 'Code');
    if (!matches.length) {
      const t = new AccessThrottle(this.store, a).fail(c.reader, nowMs);
      this.log.info({ source: c.source, reader: c.reader, length: c.value.length, failures: t.failures, terminalFailures: t.terminalFailures }, 'code refused: unknown');
      this.record('credentialRefused', { ...base, reason: 'UNKNOWN_CODE' });
      for (const l of t.locked) {
        if (l.scope === TERMINAL) this.log.warn({ seconds: l.seconds }, 'every reader of the terminal locked out after failed attempts');
        else this.log.warn({ reader: l.scope, seconds: l.seconds }, 'reader locked out after failed attempts');
      }
      return { accepted: false, reason: 'UNKNOWN_CODE' };
    }
    // an accepted code does not reset the failures: they age out of the window (src/throttle.ts)
    // every match opens the same locker (codes are per locker); keep the ones of the first locker
    const locker = matches[0]!.locker;
    const codes = matches.filter((m) => m.locker.uid === locker.uid);
    const ref: LockRef = { bus: locker.bus, board: locker.board, lock: locker.lock };
    const sessionId = crypto.randomUUID();
    const view = this.lockView(ref);
    const alreadyOpen = view?.door === 'open';
    const acceptedAt = this.now();
    const session = {
      sessionId,
      lockerUid: locker.uid,
      at: ref,
      codes: codes.map((m) => ({ id: m.id, usage: m.usage, shipmentUid: m.shipmentUid })),
      itemAtStart: view?.item ?? null,
      startedAt: acceptedAt.toISOString(),
    };
    // the session is journalled with the acceptance (and checkpointed with it): a restart knows it
    const journalled = this.stepSessions(
      { kind: 'start', session, doorOpen: alreadyOpen },
      [
        {
          type: 'credentialAccepted',
          fields: {
            ...base,
            sessionId,
            codeIds: codes.map((m) => m.id),
            usages: [...new Set(codes.map((m) => m.usage))],
            shipmentUids: [...new Set(codes.map((m) => m.shipmentUid))],
            codes: session.codes,
            itemAtStart: session.itemAtStart,
            doorOpen: alreadyOpen,
            startedAt: session.startedAt,
            lockerUid: locker.uid,
            ...ref,
          },
          at: acceptedAt,
        },
      ],
      acceptedAt,
    );
    if (!journalled) {
      // a door whose opening cannot be journalled is not opened: the drop-off or pick-up would
      // never reach the central service
      this.log.error({ bus: ref.bus, board: ref.board, lock: ref.lock, errorCode: 'JOURNAL_UNAVAILABLE' }, 'code refused: the journal cannot be written; lock not pulsed');
      this.record('credentialRefused', { ...base, reason: 'JOURNAL_UNAVAILABLE', sessionId });
      return { accepted: false, reason: 'JOURNAL_UNAVAILABLE', error: this.journalFault ?? undefined };
    }
    const r = await this.unlock(ref);
    if (r.ok) {
      this.log.info({ bus: ref.bus, board: ref.board, lock: ref.lock, usages: [...new Set(codes.map((m) => m.usage))], uncertain: r.uncertain }, r.uncertain ? 'code accepted; the unlock write broke off (the lock may have pulsed)' : 'code accepted; lock pulsed');
      this.record('unlockSent', { ...ref, lockerUid: locker.uid, cause: 'code', sessionId, alreadyOpen: r.alreadyOpen, uncertain: r.uncertain });
      return { accepted: true, lockerUid: locker.uid };
    }
    this.log.warn({ bus: ref.bus, board: ref.board, lock: ref.lock, error: r.error }, 'code accepted but the lock could not be pulsed');
    this.stepSessions({ kind: 'abort', at: ref }, [{ type: 'credentialRefused', fields: { ...base, reason: 'LOCK_UNAVAILABLE', sessionId, error: r.error, ...ref }, at: this.now() }], this.now());
    return { accepted: false, reason: 'LOCK_UNAVAILABLE', error: r.error };
  }

  // ---------------------------------------------------------------- codes

  private onCodes(payload: Buffer): void {
    if (!this.running || this.stopping) return;
    try {
      this.takeCodes(payload);
    } catch (err) {
      // A store that cannot take them (disk full, I/O error, busy past its timeout): the codes held
      // stay as they were, the next status shows their version and the central service sends
      // again. Thrown out of the MQTT client's message handler it ended the process, and every
      // restart met the same push: nobody watched the doors meanwhile.
      this.log.error({ err: (err as Error).message, errorCode: 'CODES_NOT_STORED' }, 'code update not stored; the codes held are kept');
      // asked for again (at most every mqtt.syncRetrySeconds), not only at the next periodic
      // status: a delta that failed may carry revocations
      try {
        this.requestSnapshot('gap');
      } catch {
        /* the store cannot even be read: the next status asks */
      }
    }
  }

  private takeCodes(payload: Buffer): void {
    const msg = parseMessage(CodesMessage, payload);
    if (!msg) {
      this.log.warn({ bytes: payload.length }, 'malformed codes message dropped');
      return;
    }
    this.markSynced();
    const held = this.store.codesMeta();
    const d = decideCodes(held, msg);
    switch (d.action) {
      case 'replace':
        if (msg.type !== 'snapshot') return;
        this.store.replaceCodes(msg.epoch, msg.version, msg.codes);
        this.lastSyncRequestAt = 0;
        this.log.info({ version: msg.version, count: msg.codes.length }, 'code snapshot applied');
        this.statusSoon();
        break;
      case 'apply':
        if (msg.type !== 'delta') return;
        this.store.applyDelta(msg.version, msg.upserts, msg.revoke);
        this.log.info({ version: msg.version, upserts: msg.upserts.length, revoked: msg.revoke.length }, 'code update applied');
        this.statusSoon();
        break;
      case 'ignore':
        if (d.why === 'stale-snapshot') this.log.info({ version: msg.version, held: held.version }, 'older code snapshot of the same epoch ignored');
        else this.log.debug({ version: msg.version, held: held.version }, 'code update already applied');
        break;
      case 'requestSnapshot':
        this.requestSnapshot(d.reason, held);
        break;
    }
  }

  /** down/lockers: the locker list for the page (lockers.ts); the status then shows the version held. */
  private onLockers(payload: Buffer): void {
    if (!this.running || this.stopping) return;
    try {
      if (takeLockers(this.store, payload, this.log)) this.statusSoon();
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, 'locker list not stored');
    }
  }

  private requestSnapshot(reason: 'gap' | 'epoch' | 'empty' | 'manual', held = this.store.codesMeta()): void {
    const nowMs = Date.now();
    if (reason !== 'manual' && nowMs - this.lastSyncRequestAt < this.cfg.mqtt.syncRetrySeconds * 1000) return;
    this.lastSyncRequestAt = nowMs;
    this.log.info({ reason, version: held.version }, 'asking for a code snapshot');
    const body = { v: 1, requestId: crypto.randomUUID(), want: 'snapshot', reason, have: { epoch: held.epoch, version: held.version } };
    this.link.publish('sync', JSON.stringify(body)).catch((err) => {
      this.lastSyncRequestAt = 0;
      this.log.warn({ err: (err as Error).message }, 'snapshot request not sent');
    });
  }

  // ---------------------------------------------------------------- commands

  private async onCommand(payload: Buffer): Promise<void> {
    if (!this.running || this.stopping) return;
    const cmd = parseMessage(CommandMessage, payload);
    if (!cmd) {
      let commandId: unknown;
      try {
        commandId = JSON.parse(payload.toString('utf8'))?.commandId;
      } catch {
        /* not JSON */
      }
      this.log.warn({ bytes: payload.length }, 'malformed command dropped');
      if (typeof commandId === 'string' && commandId) await this.sendAck({ v: 1, commandId, ok: false, error: 'BAD_COMMAND', message: 'the command does not fit the protocol', at: this.now().toISOString() });
      return;
    }
    const begin = this.store.beginCommand(cmd.commandId, this.now());
    if (begin.state === 'done') {
      this.log.info({ commandId: cmd.commandId }, 'repeated command: answered again, not executed');
      await this.sendAck({ ...(begin.ack as AckMessage), duplicate: true });
      return;
    }
    if (begin.state === 'started') {
      const ack: AckMessage = { v: 1, commandId: cmd.commandId, ok: false, error: 'OUTCOME_UNKNOWN', message: 'the command was begun before a restart; it is not executed again', at: this.now().toISOString() };
      this.store.finishCommand(cmd.commandId, ack);
      await this.sendAck(ack);
      return;
    }
    const ref: LockRef = { bus: cmd.bus, board: cmd.board, lock: cmd.lock };
    const ack = Date.parse(cmd.expiresAt) < this.now().getTime() ? ({ v: 1, commandId: cmd.commandId, ok: false, error: 'EXPIRED', message: `the command expired at ${cmd.expiresAt}`, at: this.now().toISOString() } satisfies AckMessage) : await this.executeUnlock(cmd, ref);
    try {
      this.store.finishCommand(cmd.commandId, ack);
    } catch (err) {
      // answered anyway (a repeat is then answered OUTCOME_UNKNOWN: its outcome is not stored)
      this.journalFault = (err as Error).message;
      this.log.error({ commandId: cmd.commandId, err: (err as Error).message, errorCode: 'JOURNAL_UNAVAILABLE' }, 'the command outcome could not be stored');
    }
    this.log.info({ commandId: cmd.commandId, ok: ack.ok, error: ack.ok ? undefined : ack.error }, 'unlock command handled');
    await this.sendAck(ack);
  }

  /** A command's unlock: pending in the store first (restorePendingUnlocks), pulsed, journalled. */
  private async executeUnlock(cmd: UnlockCommandMessage, ref: LockRef): Promise<AckMessage> {
    const at = () => this.now().toISOString();
    const fields = { lockerUid: cmd.lockerUid, cause: 'command', commandId: cmd.commandId, shipmentUid: cmd.shipmentUid };
    let pending: number;
    try {
      pending = this.store.markUnlockPending(ref, fields, this.now());
    } catch (err) {
      // as for codes: no lock pulsed whose unlock could not be journalled
      this.journalFault = (err as Error).message;
      this.log.error({ commandId: cmd.commandId, err: (err as Error).message, errorCode: 'JOURNAL_UNAVAILABLE' }, 'unlock command refused: the journal cannot be written; lock not pulsed');
      return { v: 1, commandId: cmd.commandId, ok: false, error: 'BUS_UNAVAILABLE', message: 'the terminal cannot write its journal: the lock is not pulsed', at: at() };
    }
    const r = await this.unlock(ref);
    if (!r.ok) {
      this.clearPendingUnlock(pending); // nothing was written to the board
      return { v: 1, commandId: cmd.commandId, ok: false, error: r.error, message: r.message, at: at() };
    }
    this.journal([{ type: 'unlockSent', fields: { ...ref, ...fields, alreadyOpen: r.alreadyOpen, uncertain: r.uncertain }, at: this.now() }], { clearPending: [pending] });
    // the write broke off: journalled as sent (a door it opened is not forced), answered as not
    // known, so the caller is not told the lock opened
    return r.uncertain
      ? { v: 1, commandId: cmd.commandId, ok: false, error: 'OUTCOME_UNKNOWN', message: 'the write to the board broke off: the lock may or may not have pulsed (the door events tell)', at: at() }
      : { v: 1, commandId: cmd.commandId, ok: true, at: at() };
  }

  private async sendAck(ack: AckMessage): Promise<void> {
    try {
      await this.link.publish('acks', JSON.stringify(ack));
    } catch (err) {
      this.log.warn({ commandId: ack.commandId, err: (err as Error).message }, 'ack not sent');
    }
  }

  // ---------------------------------------------------------------- technician

  /** The technician's "resync codes": asks the central service for a code snapshot now; false while the link is down. */
  requestCodeSnapshot(): boolean {
    if (!this.running || this.stopping || !this.link.connected) return false;
    this.requestSnapshot('manual');
    return true;
  }

  /** Journals what a technician did on the diagnostics page (reported like every event); false when the journal cannot be written. */
  technicianAction(fields: { action: string; outcome: string } & Record<string, unknown>): boolean {
    return this.record('technicianAction', { who: 'technician', ...fields });
  }

  /** The diagnostics page's "open lock" (password checked by the page). */
  async technicianOpen(at: LockRef): Promise<TechnicianOpenOutcome> {
    // As for codes: no door opens whose opening cannot be journalled. The opening is journalled
    // as unlockSent once the board answered; the store is proven writable first by the pending
    // unlock, which a restart journals should the process die before that (restorePendingUnlocks).
    let fields: Record<string, unknown>;
    let pending: number;
    try {
      fields = { lockerUid: this.store.lockerAt(at.bus, at.board, at.lock), cause: 'technician' };
      pending = this.store.markUnlockPending(at, fields, this.now());
    } catch (err) {
      this.journalFault = (err as Error).message;
      this.log.error({ ...at, err: (err as Error).message, errorCode: 'JOURNAL_UNAVAILABLE' }, 'technician open refused: the journal cannot be written; lock not pulsed');
      return { ok: false, error: 'JOURNAL_UNAVAILABLE', message: 'the terminal cannot write its journal: the opening would not be reported, so the lock is not pulsed' };
    }
    const r = await this.unlock(at);
    if (r.ok) this.journal([{ type: 'unlockSent', fields: { ...at, ...fields, alreadyOpen: r.alreadyOpen, uncertain: r.uncertain }, at: this.now() }], { clearPending: [pending] });
    else this.clearPendingUnlock(pending); // nothing was written to the board
    this.log.info({ ...at, ok: r.ok, error: r.ok ? undefined : r.error }, 'technician open');
    return r;
  }

  // ---------------------------------------------------------------- status

  private statusSoon(): void {
    if (this.statusTimer || !this.running) return;
    this.statusTimer = setTimeout(() => {
      this.statusTimer = null;
      void this.link.publishStatus().catch(() => undefined);
    }, 200);
    this.statusTimer.unref();
  }

  private busHealth() {
    return this.cfg.buses.map((b) => {
      let portOpen = false;
      let boards: { address: number; online: boolean | null }[] = b.boards.map((x) => ({ address: x.address, online: null }));
      try {
        const bus = this.buses.bus(b.name);
        portOpen = bus.portOpen;
        boards = bus.boards.map((address) => ({ address, online: bus.boardOnline(address) }));
      } catch {
        /* not started */
      }
      return { name: b.name, portOpen, boards };
    });
  }

  statusMessage(): StatusOnline {
    return {
      v: 1,
      state: 'online',
      terminalId: this.cfg.terminal.id,
      agentVersion: AGENT_VERSION,
      startedAt: this.startedAt.toISOString(),
      at: this.now().toISOString(),
      codes: this.store.codesMeta(),
      lockers: (({ epoch, version }) => ({ epoch, version }))(this.store.lockersMeta()),
      // the journal's id: the central service takes it as this terminal's live journal (a late
      // event of a store replaced since then cannot take its place)
      journal: { unsent: this.store.unsentCount(), lastSeq: this.store.lastSeq(), id: this.store.journalId() },
      buses: this.busHealth(),
    };
  }

  /** Everything the diagnostics page shows. */
  state(): AgentState {
    const buses = this.cfg.buses.map((b) => {
      const health = this.busHealth().find((h) => h.name === b.name)!;
      return {
        name: b.name,
        port: b.port,
        dialect: b.dialect,
        portOpen: health.portOpen,
        boards: health.boards.map((bd) => {
          let locks: LockView[] = [];
          try {
            locks = this.buses.bus(b.name).locks(bd.address);
          } catch {
            /* not started */
          }
          return { address: bd.address, online: bd.online, locks: locks.map((l) => ({ ...l, lockerUid: this.store.lockerAt(b.name, bd.address, l.lock) })) };
        }),
      };
    });
    const throttled = [...new Set(this.cfg.scanners.map((s) => s.name))]
      .map((reader) => ({ reader, untilMs: this.throttledUntil(reader) }))
      .filter((t) => t.untilMs > 0);
    return {
      terminalId: this.cfg.terminal.id,
      agentVersion: AGENT_VERSION,
      startedAt: this.startedAt.toISOString(),
      mqtt: { ...this.link.linkState(), url: this.link.safeUrl, lastError: this.link.lastError, eventsSent: this.link.sentCount, unhealthyAfterMinutes: this.cfg.mqtt.unhealthyAfterMinutes, downTooLong: this.link.downLongerThan(this.cfg.mqtt.unhealthyAfterMinutes) },
      codes: this.store.codesMeta(),
      journal: { unsent: this.store.unsentCount(), lastSeq: this.store.lastSeq() },
      buses,
      scanners: this.cfg.scanners.map((s) => ({ name: s.name, port: s.port })),
      throttled,
      openSessions: Object.keys(this.sessions).length,
      recentEvents: this.store.recent(this.cfg.diagnostics.recentEvents).map((r) => ({ seq: r.seq, type: r.type, at: r.at, sent: r.sentAt !== null, summary: summarize(r.fields) })),
    };
  }

  private prune(): void {
    // a session whose door never closed within access.sessionMaxHours (a board unreadable for that
    // long) ends as abandoned: the journal and the replay stay bounded
    const ended = expireSessions(this.sessions, new Date(this.now().getTime() - this.cfg.access.sessionMaxHours * 3_600_000).toISOString());
    if (ended.effects.length) {
      this.journal(
        ended.effects.map((e) => ({ type: e.type, fields: e.fields, at: this.now() })),
        { sessions: ended.sessions },
      );
    }
    try {
      const n = this.store.pruneSent(new Date(this.now().getTime() - this.cfg.store.keepSentEventsHours * 3600_000));
      if (n) this.log.info({ deleted: n }, 'old sent events pruned');
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, 'journal prune failed');
    }
  }
}

function summarize(f: Record<string, unknown>): string {
  const parts: string[] = [];
  if (f.bus !== undefined) parts.push(`${f.bus}/${f.board}${f.lock !== undefined ? `/${f.lock}` : ''}`);
  for (const k of ['reason', 'cause', 'item', 'commanded', 'source', 'error'] as const) if (f[k] !== undefined && f[k] !== null) parts.push(`${k}=${String(f[k])}`);
  if (typeof f.shipmentUid === 'string') parts.push(`shipment=${f.shipmentUid.slice(0, 8)}…`);
  return parts.join(' ');
}
