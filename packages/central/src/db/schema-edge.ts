// Tables of the edge sync (migration 400_edge): terminal <-> central over MQTT.
import type { Generated } from 'kysely';

export interface EdgeTerminalsTable {
  terminal_id: string;
  /** names this central database's version sequence for the terminal's codes */
  epoch: string;
  /** version of the code set last pushed to the terminal */
  codes_version: number;
  /** 1 while the terminal's last status says online */
  online: 0 | 1;
  status_at: string | null;
  /** JSON text of the last up/status message */
  last_status: string | null;
  /** highest event seq received */
  last_seq: number;
  updated_at: string;
  /** migration 405: every event of journal_id up to this seq is stored and processed (acknowledged to the terminal) */
  applied_seq?: number | string;
  /** the terminal journal whose seq applied_seq counts (null: none seen yet) */
  journal_id?: string | null;
  /** migration 412: the journal the terminal's latest online status names (status journal.id): its live one; null: not named */
  live_journal_id?: string | null;
  /** the live journal that one replaced (the cross-journal replay: edge/ingest.ts applyLate) */
  previous_live_journal_id?: string | null;
  /** since when the event after applied_seq counts as missing: when the first event held behind it was stored, but no earlier than edge.gapGiveUpSeconds - edge.gapResendSeconds before the gap was noticed (edge/ingest.ts) */
  gap_since?: string | null;
  /** central receive time - status.at of the last online status, ms (migration 403; edge/clock.ts) */
  clock_offset_ms?: number | string | null;
  /** 1 while |clock_offset_ms| exceeds edge.maxClockSkewSeconds: event times are corrected by the offset */
  clock_skewed?: 0 | 1;
  clock_measured_at?: string | null;
  /** central time up to which every event of the terminal has reached the central service (expiry proof) */
  reported_through?: string | null;
  /** a status that still had unsent events: its corrected time, proven once seq pending_through_seq is here */
  pending_through_at?: string | null;
  pending_through_seq?: number | string | null;
  /** migration 413: the journal whose seq pending_through_seq counts (null: a status that named none) */
  pending_through_journal?: string | null;
  /** migration 408: version of the down/lockers list last pushed (compare-and-set, as codes_version) */
  lockers_version?: number;
  /** digest of that list (null: never pushed) */
  lockers_digest?: string | null;
}

/** The code set last pushed to a terminal: one row per access code, with a digest of its entry. */
export interface EdgePushedCodesTable {
  terminal_id: string;
  code_uid: string;
  digest: string;
}

/** Every event a terminal reported (deduplicated by event_id). */
export interface EdgeEventsTable {
  event_id: string;
  terminal_id: string;
  seq: number;
  type: string;
  /** the terminal's time of the event */
  at: string;
  received_at: string;
  /** the event message, JSON text */
  payload: string;
  /** 1 once acted on (dropOff / pickUp applied or rejected; other types on receipt) */
  processed: 0 | 1;
  outcome: string | null;
  attempts: number;
  /** the terminal journal the seq belongs to (migration 405; null: an agent from before journal ids) */
  journal_id?: string | null;
}

/** Raised in every transaction that changes a pick up point's codes: the edge sync's change marker. */
export interface PupCodeVersionsTable {
  pup_uid: string;
  version: number | string;
}

/**
 * The last observed physical state of each locker (migration 404_lock_observations), from its
 * terminal's events (edge/observations.ts). A newer event of the same terminal (by seq) replaces
 * an older one; times named *_at without "received" are the terminal's, the others central's.
 */
export interface LockObservationsTable {
  locker_uid: string;
  pup_uid: string;
  /** the terminal whose event was applied last, its journal (null from older agents), seq and event id */
  terminal_id: string;
  journal_id: string | null;
  seq: number | string;
  event_id: string;
  /** the terminal's time of that event */
  at: string;
  /** central time the event was received */
  received_at: string;
  /** 'open' | 'closed'; null while unknown */
  door: string | null;
  door_at: string | null;
  /** the item sensor: 1 item, 0 empty, null unknown (no sensor, or never seen) */
  item: 0 | 1 | null;
  item_at: string | null;
  /** faults: when they were seen (terminal time), null when not (or no longer) present */
  left_open_at: string | null;
  jammed_at: string | null;
  board_offline_at: string | null;
  updated_at: string;
}

/** Disagreements currently open (edge/observations.ts DisagreementMonitor): each is logged once when it appears. */
export interface LockDisagreementsTable {
  locker_uid: string;
  kind: string;
  pup_uid: string;
  shipment_uid: string | null;
  state: string | null;
  since: string;
  /** central time it was first seen */
  detected_at: string;
}

/**
 * Migration 413: every journal of a terminal, in the order the central service first saw it (a
 * status naming it, or an event of it outside the cursor's journal). A status naming a journal
 * seen before the live one is stale (edge/sync.ts).
 */
export interface EdgeJournalsTable {
  /** grows with every journal recorded (assigned by the database: the same order on every instance) */
  generation: Generated<number>;
  terminal_id: string;
  journal_id: string;
  first_seen_at: string;
}

export interface EdgeTables {
  pup_code_versions: PupCodeVersionsTable;
  edge_terminals: EdgeTerminalsTable;
  edge_pushed_codes: EdgePushedCodesTable;
  edge_events: EdgeEventsTable;
  edge_journals: EdgeJournalsTable;
  lock_observations: LockObservationsTable;
  lock_disagreements: LockDisagreementsTable;
}
