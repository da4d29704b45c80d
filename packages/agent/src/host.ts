// What the agent's features see of it: the state it reports and the few calls the technician's
// page and actions make. The agent (agent.ts, the composition root) implements it; the diagnostics
// server and the technician's actions depend on this interface only, never on agent.ts, so there
// is no import cycle between the agent and its page.
import type { AckErrorCode } from '@locker/common';
import type { Credential, LockBusManager, LockView } from '@locker/lockbus';
import type { LinkState } from './edge-link';
import type { LogRing } from './logger';
import type { AgentStore } from './store';

/** uncertain: the write to the board broke off, so the lock may or may not have pulsed (counted as sent, its door watched) */
export type UnlockOutcome = { ok: true; alreadyOpen: boolean; uncertain?: true } | { ok: false; error: AckErrorCode; message: string };
/** The diagnostics page's open: JOURNAL_UNAVAILABLE when the store cannot be written (nothing pulsed). */
export type TechnicianOpenOutcome = UnlockOutcome | { ok: false; error: 'JOURNAL_UNAVAILABLE'; message: string };

/** What became of a presented code. JOURNAL_UNAVAILABLE: the opening could not be journalled, so no lock was pulsed. */
export type CredentialOutcome =
  | { accepted: true; lockerUid: string }
  | { accepted: false; reason: 'STOPPING' | 'CODES_STALE' | 'THROTTLED' | 'UNKNOWN_CODE' | 'LOCK_UNAVAILABLE' | 'JOURNAL_UNAVAILABLE' | 'FAILED' | 'SCANNER_TEST'; error?: string };

export interface LockState extends LockView {
  lockerUid: string | null;
}

export interface AgentState {
  terminalId: string;
  agentVersion: string;
  startedAt: string;
  /** the broker link (EdgeLink.linkState()); downTooLong: down for longer than unhealthyAfterMinutes, healthy() is false */
  mqtt: LinkState & { url: string; lastError: string | null; eventsSent: number; unhealthyAfterMinutes: number | null; downTooLong: boolean };
  codes: { epoch: string | null; version: number; count: number };
  journal: { unsent: number; lastSeq: number };
  buses: { name: string; port: string; dialect: string; portOpen: boolean; boards: { address: number; online: boolean | null; locks: LockState[] }[] }[];
  scanners: { name: string; port: string }[];
  throttled: { reader: string; untilMs: number }[];
  openSessions: number;
  recentEvents: { seq: number; type: string; at: string; sent: boolean; summary: string }[];
}

/** The agent as its technician features use it (technician/actions.ts, diagnostics.ts). */
export interface TechnicianHost {
  readonly buses: LockBusManager;
  readonly store: AgentStore;
  state(): AgentState;
  technicianOpen(at: { bus: string; board: number; lock: number }): Promise<TechnicianOpenOutcome>;
  technicianAction(fields: { action: string; outcome: string } & Record<string, unknown>): boolean;
  requestCodeSnapshot(): boolean;
  /** while set, a presented code is handed to it instead of the access path (true: taken) */
  credentialTap: ((c: Pick<Credential, 'source' | 'value' | 'reader'>) => boolean) | null;
  readonly logRing: LogRing | null;
}
