// The agent's local store: one SQLite file (better-sqlite3, WAL, synchronous=FULL so a commit
// survives a power cut). It holds the access-code cache (validated offline), the durable event
// journal (written before publishing; marked sent only when the central service acknowledges it
// on down/eventAcks, never on a broker PUBACK), the executed commands (at-most-once unlocks),
// the failed-attempt counters and the locker list the central service pushed (names, sizes,
// service and shipment state: down/lockers).
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import type { CodeEntry, EdgeEventType, LockerEntry, LockerServiceState, LockerSize } from '@locker/common';

/** What the central service last said about the locker at a lock position (down/lockers). */
export interface LockerInfo {
  uid: string;
  /** e.g. CS-01 */
  name: string;
  size: LockerSize;
  serviceState: LockerServiceState;
  /** the state of the shipment holding it as the central service last reported (null: free) */
  shipmentState: string | null;
}

export interface LockersMeta {
  epoch: string | null;
  version: number;
  count: number;
  /** when the list held was pushed (the central service's time), null when none is held */
  at: string | null;
}

export interface CodesMeta {
  epoch: string | null;
  version: number;
  count: number;
}

export interface JournalRow {
  seq: number;
  eventId: string;
  type: EdgeEventType;
  at: string;
  fields: Record<string, unknown>;
  sentAt: string | null;
}

/** One event of an atomic journal write. */
export interface JournalEntry {
  type: EdgeEventType;
  fields: Record<string, unknown>;
  at: Date;
}

/** The last journalled physical state of a lock (what the agent last knew before a gap). */
export interface LockStateRow {
  bus: string;
  board: number;
  lock: number;
  door: 'open' | 'closed';
  item: boolean | null;
  at: string;
}

/** The open access sessions as of a journal seq (written in the same transaction as that seq). */
export interface SessionCheckpoint {
  seq: number;
  sessions: Record<string, unknown>;
}

export type CommandBegin = { state: 'new' } | { state: 'started' } | { state: 'done'; ack: Record<string, unknown> };

const SCHEMA = `
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS codes (
  id TEXT PRIMARY KEY, hash TEXT NOT NULL, shipment_uid TEXT NOT NULL, usage TEXT NOT NULL, type TEXT NOT NULL,
  locker_uid TEXT NOT NULL, bus TEXT NOT NULL, board INTEGER NOT NULL, lock INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS codes_hash ON codes(hash);
CREATE TABLE IF NOT EXISTS journal (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL UNIQUE, type TEXT NOT NULL, at TEXT NOT NULL,
  fields TEXT NOT NULL, sent_at TEXT);
CREATE INDEX IF NOT EXISTS journal_unsent ON journal(seq) WHERE sent_at IS NULL;
CREATE TABLE IF NOT EXISTS commands (command_id TEXT PRIMARY KEY, received_at TEXT NOT NULL, ack TEXT);
CREATE TABLE IF NOT EXISTS failures (reader TEXT NOT NULL, at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS lock_state (
  bus TEXT NOT NULL, board INTEGER NOT NULL, lock INTEGER NOT NULL, door TEXT NOT NULL, item INTEGER, at TEXT NOT NULL,
  PRIMARY KEY (bus, board, lock));
CREATE INDEX IF NOT EXISTS failures_reader ON failures(reader, at);
CREATE TABLE IF NOT EXISTS lockers (
  uid TEXT PRIMARY KEY, name TEXT NOT NULL, size TEXT NOT NULL, service_state TEXT NOT NULL, shipment_state TEXT,
  bus TEXT NOT NULL, board INTEGER NOT NULL, lock INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS lockers_position ON lockers(bus, board, lock);
CREATE TABLE IF NOT EXISTS pending_unlocks (
  id INTEGER PRIMARY KEY, bus TEXT NOT NULL, board INTEGER NOT NULL, lock INTEGER NOT NULL, fields TEXT NOT NULL, at TEXT NOT NULL);
`;

/** An unlock about to be written to a board whose `unlockSent` is not journalled yet (markUnlockPending). */
export interface PendingUnlock {
  id: number;
  bus: string;
  board: number;
  lock: number;
  /** the unlockSent fields it will have (cause, commandId, lockerUid, ...) */
  fields: Record<string, unknown>;
  at: string;
}

export class AgentStore {
  private db: Database.Database | null = null;

  constructor(private readonly file: string) {}

  open(): void {
    if (this.db) return;
    if (this.file !== ':memory:') fs.mkdirSync(path.dirname(path.resolve(this.file)), { recursive: true });
    const db = new Database(this.file);
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = FULL');
    db.pragma('busy_timeout = 5000');
    db.exec(SCHEMA);
    this.db = db;
    // names this journal: its seq counts from 1 in a new store (docs/edge-protocol.md)
    if (!this.getMeta('journal.id')) this.setMeta('journal.id', crypto.randomUUID());
    this.journal = this.getMeta('journal.id')!;
  }

  /** the journal's id, read once at open (it never changes while the store is open) */
  private journal: string | null = null;

  /** The journal's id (made with the store; the central service orders events per journal). */
  journalId(): string {
    if (!this.journal) throw new Error('agent store is not open');
    return this.journal;
  }

  close(): void {
    this.db?.close();
    this.db = null;
    this.journal = null;
  }

  private get d(): Database.Database {
    if (!this.db) throw new Error('agent store is not open');
    return this.db;
  }

  // ------------------------------------------------------------------ meta

  getMeta(key: string): string | null {
    const r = this.d.prepare('SELECT value FROM meta WHERE key = ?').get(key) as { value: string } | undefined;
    return r?.value ?? null;
  }

  setMeta(key: string, value: string): void {
    this.d.prepare('INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value').run(key, value);
  }

  // ------------------------------------------------------------------ codes

  codesMeta(): CodesMeta {
    const count = (this.d.prepare('SELECT count(*) AS n FROM codes').get() as { n: number }).n;
    return { epoch: this.getMeta('codes.epoch'), version: Number(this.getMeta('codes.version') ?? 0), count };
  }

  /** Replaces the whole cache (a snapshot), in one transaction. */
  replaceCodes(epoch: string, version: number, codes: CodeEntry[]): void {
    this.d.transaction(() => {
      this.d.prepare('DELETE FROM codes').run();
      const ins = this.insertCode();
      for (const c of codes) ins(c);
      this.setMeta('codes.epoch', epoch);
      this.setMeta('codes.version', String(version));
    })();
  }

  /** Applies an incremental update and takes its version, in one transaction. */
  applyDelta(version: number, upserts: CodeEntry[], revoke: string[]): void {
    this.d.transaction(() => {
      const del = this.d.prepare('DELETE FROM codes WHERE id = ?');
      for (const id of revoke) del.run(id);
      const ins = this.insertCode();
      for (const c of upserts) ins(c);
      this.setMeta('codes.version', String(version));
    })();
  }

  private insertCode(): (c: CodeEntry) => void {
    const st = this.d.prepare(
      `INSERT INTO codes (id, hash, shipment_uid, usage, type, locker_uid, bus, board, lock) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT(id) DO UPDATE SET hash = excluded.hash, shipment_uid = excluded.shipment_uid, usage = excluded.usage, type = excluded.type,
         locker_uid = excluded.locker_uid, bus = excluded.bus, board = excluded.board, lock = excluded.lock`,
    );
    return (c) => st.run(c.id, c.hash, c.shipmentUid, c.usage, c.type, c.locker.uid, c.locker.bus, c.locker.board, c.locker.lock);
  }

  findCodes(hash: string): CodeEntry[] {
    const rows = this.d.prepare('SELECT * FROM codes WHERE hash = ? ORDER BY id').all(hash) as any[];
    return rows.map((r) => ({
      id: r.id,
      hash: r.hash,
      shipmentUid: r.shipment_uid,
      usage: r.usage,
      type: r.type,
      locker: { uid: r.locker_uid, bus: r.bus, board: r.board, lock: r.lock },
    }));
  }

  /** The locker uid at a bus position, from the codes held (null when no code names it). */
  lockerAt(bus: string, board: number, lock: number): string | null {
    const r = this.d.prepare('SELECT locker_uid FROM codes WHERE bus = ? AND board = ? AND lock = ? LIMIT 1').get(bus, board, lock) as { locker_uid: string } | undefined;
    return r?.locker_uid ?? null;
  }

  /** The usages of the codes held per lock position (the page's wall: booked / awaiting pick-up). */
  codeUsages(): { bus: string; board: number; lock: number; usage: 'DropOff' | 'PickUp' }[] {
    return this.d.prepare('SELECT DISTINCT bus, board, lock, usage FROM codes').all() as { bus: string; board: number; lock: number; usage: 'DropOff' | 'PickUp' }[];
  }

  // ------------------------------------------------------------------ lockers (down/lockers)

  lockersMeta(): LockersMeta {
    const count = (this.d.prepare('SELECT count(*) AS n FROM lockers').get() as { n: number }).n;
    return { epoch: this.getMeta('lockers.epoch'), version: Number(this.getMeta('lockers.version') ?? 0), count, at: this.getMeta('lockers.at') };
  }

  /** Replaces the whole locker list and takes its epoch and version, in one transaction. */
  replaceLockers(epoch: string, version: number, at: string, lockers: LockerEntry[]): void {
    this.d.transaction(() => {
      this.d.prepare('DELETE FROM lockers').run();
      const ins = this.d.prepare(
        `INSERT INTO lockers (uid, name, size, service_state, shipment_state, bus, board, lock) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT(uid) DO UPDATE SET name = excluded.name, size = excluded.size, service_state = excluded.service_state,
           shipment_state = excluded.shipment_state, bus = excluded.bus, board = excluded.board, lock = excluded.lock`,
      );
      for (const l of lockers) ins.run(l.uid, l.name, JSON.stringify(l.size), l.serviceState, l.shipmentState, l.bus, l.board, l.lock);
      this.setMeta('lockers.epoch', epoch);
      this.setMeta('lockers.version', String(version));
      this.setMeta('lockers.at', at);
    })();
  }

  /** Every locker held, in bus/board/lock order (the page's wall). */
  lockerList(): (LockerInfo & { bus: string; board: number; lock: number })[] {
    return (this.d.prepare('SELECT * FROM lockers ORDER BY bus, board, lock, uid').all() as any[]).map((r) => ({
      uid: r.uid,
      name: r.name,
      size: JSON.parse(r.size) as LockerSize,
      serviceState: r.service_state,
      shipmentState: r.shipment_state ?? null,
      bus: r.bus,
      board: r.board,
      lock: r.lock,
    }));
  }

  /** The locker at a lock position as the central service last described it; null when unknown. */
  lockerInfo(bus: string, board: number, lock: number): LockerInfo | null {
    const r = this.d.prepare('SELECT * FROM lockers WHERE bus = ? AND board = ? AND lock = ? ORDER BY uid LIMIT 1').get(bus, board, lock) as any;
    return r ? { uid: r.uid, name: r.name, size: JSON.parse(r.size) as LockerSize, serviceState: r.service_state, shipmentState: r.shipment_state ?? null } : null;
  }

  // ------------------------------------------------------------------ journal

  /** Appends an event (durable when this returns). */
  append(type: EdgeEventType, fields: Record<string, unknown>, at: Date): JournalRow {
    return this.appendAll([{ type, fields, at }])[0]!;
  }

  /**
   * Appends events, and optionally the lock states they leave and the open sessions after them,
   * in ONE transaction: after a power cut either all of it is there or none (a door's close is
   * never journalled without the drop-off it makes, nor the other way round).
   */
  appendAll(entries: JournalEntry[], extra: { locks?: LockStateRow[]; sessions?: Record<string, unknown>; clearPending?: number[] } = {}): JournalRow[] {
    return this.d.transaction(() => {
      const ins = this.d.prepare('INSERT INTO journal (event_id, type, at, fields) VALUES (?, ?, ?, ?)');
      const rows: JournalRow[] = [];
      for (const e of entries) {
        const eventId = crypto.randomUUID();
        const atIso = e.at.toISOString();
        const r = ins.run(eventId, e.type, atIso, JSON.stringify(e.fields));
        rows.push({ seq: Number(r.lastInsertRowid), eventId, type: e.type, at: atIso, fields: e.fields, sentAt: null });
      }
      if (extra.locks?.length) {
        const up = this.d.prepare(
          `INSERT INTO lock_state (bus, board, lock, door, item, at) VALUES (?, ?, ?, ?, ?, ?)
           ON CONFLICT(bus, board, lock) DO UPDATE SET door = excluded.door, item = excluded.item, at = excluded.at`,
        );
        for (const l of extra.locks) up.run(l.bus, l.board, l.lock, l.door, l.item === null ? null : l.item ? 1 : 0, l.at);
      }
      if (extra.sessions) {
        const seq = rows.length ? rows[rows.length - 1]!.seq : this.lastSeq();
        this.setMeta('sessions', JSON.stringify({ seq, sessions: extra.sessions } satisfies SessionCheckpoint));
      }
      for (const id of extra.clearPending ?? []) this.d.prepare('DELETE FROM pending_unlocks WHERE id = ?').run(id);
      return rows;
    })();
  }

  /**
   * Written before an unlock that no session covers (a central command, a technician's open) goes
   * to the board, and cleared in the transaction that journals its unlockSent (appendAll
   * clearPending) or once it is known nothing was sent: one still here at start was begun by a
   * process that died before it could journal it, and the lock may have pulsed.
   */
  markUnlockPending(ref: { bus: string; board: number; lock: number }, fields: Record<string, unknown>, at: Date): number {
    return Number(this.d.prepare('INSERT INTO pending_unlocks (bus, board, lock, fields, at) VALUES (?, ?, ?, ?, ?)').run(ref.bus, ref.board, ref.lock, JSON.stringify(fields), at.toISOString()).lastInsertRowid);
  }

  clearUnlockPending(id: number): void {
    this.d.prepare('DELETE FROM pending_unlocks WHERE id = ?').run(id);
  }

  pendingUnlocks(): PendingUnlock[] {
    return (this.d.prepare('SELECT * FROM pending_unlocks ORDER BY id').all() as { id: number; bus: string; board: number; lock: number; fields: string; at: string }[]).map((r) => ({ ...r, fields: JSON.parse(r.fields) as Record<string, unknown> }));
  }

  /** The open sessions as last checkpointed (null: none was ever written). */
  sessionCheckpoint(): SessionCheckpoint | null {
    const v = this.getMeta('sessions');
    return v ? (JSON.parse(v) as SessionCheckpoint) : null;
  }

  /** Journal rows after `seq`, in order (for the session replay at start). */
  rowsAfter(seq: number, limit = 100_000): JournalRow[] {
    return (this.d.prepare('SELECT * FROM journal WHERE seq > ? ORDER BY seq LIMIT ?').all(seq, limit) as any[]).map(toRow);
  }

  /** Journal rows at or after a time, in order (the replay when no checkpoint was ever written). */
  rowsSince(atIso: string): JournalRow[] {
    return (this.d.prepare('SELECT * FROM journal WHERE at >= ? ORDER BY seq').all(atIso) as any[]).map(toRow);
  }

  /** The last journalled state of every lock. */
  lockStates(): LockStateRow[] {
    return (this.d.prepare('SELECT * FROM lock_state').all() as any[]).map((r) => ({ bus: r.bus, board: r.board, lock: r.lock, door: r.door, item: r.item === null ? null : r.item === 1, at: r.at }));
  }

  /** The oldest unsent event after `afterSeq` (in seq order). */
  nextUnsent(afterSeq = 0): JournalRow | null {
    const r = this.d.prepare('SELECT * FROM journal WHERE sent_at IS NULL AND seq > ? ORDER BY seq LIMIT 1').get(afterSeq) as any;
    return r ? toRow(r) : null;
  }

  markSent(seq: number, at: Date): void {
    this.d.prepare('UPDATE journal SET sent_at = ? WHERE seq = ? AND sent_at IS NULL').run(at.toISOString(), seq);
  }

  /** Marks every event up to `seq` sent (the central service committed them); how many were unsent. */
  markSentUpTo(seq: number, at: Date): number {
    return this.d.prepare('UPDATE journal SET sent_at = ? WHERE seq <= ? AND sent_at IS NULL').run(at.toISOString(), seq).changes;
  }

  unsentCount(): number {
    return (this.d.prepare('SELECT count(*) AS n FROM journal WHERE sent_at IS NULL').get() as { n: number }).n;
  }

  lastSeq(): number {
    const r = this.d.prepare("SELECT seq FROM sqlite_sequence WHERE name = 'journal'").get() as { seq: number } | undefined;
    return r?.seq ?? 0;
  }

  recent(limit: number): JournalRow[] {
    return (this.d.prepare('SELECT * FROM journal ORDER BY seq DESC LIMIT ?').all(limit) as any[]).map(toRow);
  }

  /** Deletes sent events older than `before` (unsent ones are never deleted). */
  pruneSent(before: Date): number {
    return this.d.prepare('DELETE FROM journal WHERE sent_at IS NOT NULL AND sent_at < ?').run(before.toISOString()).changes;
  }

  // ------------------------------------------------------------------ commands

  /** Records a command before it is carried out; tells whether it was seen before. */
  beginCommand(commandId: string, at: Date): CommandBegin {
    return this.d.transaction((): CommandBegin => {
      const r = this.d.prepare('SELECT ack FROM commands WHERE command_id = ?').get(commandId) as { ack: string | null } | undefined;
      if (r) return r.ack ? { state: 'done', ack: JSON.parse(r.ack) } : { state: 'started' };
      this.d.prepare('INSERT INTO commands (command_id, received_at) VALUES (?, ?)').run(commandId, at.toISOString());
      return { state: 'new' };
    })();
  }

  finishCommand(commandId: string, ack: Record<string, unknown>): void {
    this.d.prepare('UPDATE commands SET ack = ? WHERE command_id = ?').run(JSON.stringify(ack), commandId);
  }

  // ------------------------------------------------------------------ failed attempts

  recordFailure(reader: string, atMs: number): void {
    this.d.prepare('INSERT INTO failures (reader, at) VALUES (?, ?)').run(reader, atMs);
  }

  failuresSince(reader: string, sinceMs: number): number {
    return (this.d.prepare('SELECT count(*) AS n FROM failures WHERE reader = ? AND at >= ?').get(reader, sinceMs) as { n: number }).n;
  }

  /** failed attempts of every reader at or after sinceMs (the terminal-wide budget) */
  failuresSinceAll(sinceMs: number): number {
    return (this.d.prepare('SELECT count(*) AS n FROM failures WHERE at >= ?').get(sinceMs) as { n: number }).n;
  }

  /** deletes failed attempts older than beforeMs (out of every window) */
  pruneFailures(beforeMs: number): void {
    this.d.prepare('DELETE FROM failures WHERE at < ?').run(beforeMs);
  }

  clearFailures(reader: string, beforeMs = Number.MAX_SAFE_INTEGER): void {
    this.d.prepare('DELETE FROM failures WHERE reader = ? AND at < ?').run(reader, beforeMs);
  }
}

function toRow(r: any): JournalRow {
  return { seq: r.seq, eventId: r.event_id, type: r.type, at: r.at, fields: JSON.parse(r.fields), sentAt: r.sent_at };
}
