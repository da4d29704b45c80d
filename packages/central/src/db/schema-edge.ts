// Tables of the edge sync (migration 400_edge): terminal <-> central over MQTT.

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
}

/** Raised in every transaction that changes a pick up point's codes: the edge sync's change marker. */
export interface PupCodeVersionsTable {
  pup_uid: string;
  version: number | string;
}

export interface EdgeTables {
  pup_code_versions: PupCodeVersionsTable;
  edge_terminals: EdgeTerminalsTable;
  edge_pushed_codes: EdgePushedCodesTable;
  edge_events: EdgeEventsTable;
}
