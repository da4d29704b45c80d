// The MQTT protocol between a terminal agent and the central service (docs/edge-protocol.md).
// Both sides parse every message with these schemas; a message that does not parse is dropped.
import crypto from 'node:crypto';
import { z } from 'zod';

export const EDGE_PROTOCOL_VERSION = 1 as const;
export const TOPIC_ROOT = 'locker/v1/t';

export type UpKind = 'status' | 'sync' | 'events' | 'acks';
export type DownKind = 'codes' | 'commands' | 'eventAcks' | 'lockers';

export const edgeTopics = {
  up: (terminalId: string, kind: UpKind) => `${TOPIC_ROOT}/${terminalId}/up/${kind}`,
  down: (terminalId: string, kind: DownKind) => `${TOPIC_ROOT}/${terminalId}/down/${kind}`,
  /** central: every terminal's up/<kind> */
  allUp: (kind: UpKind) => `${TOPIC_ROOT}/+/up/${kind}`,
};

/** `locker/v1/t/<id>/<dir>/<kind>` -> its parts; null otherwise. */
export function parseEdgeTopic(topic: string): { terminalId: string; dir: 'up' | 'down'; kind: string } | null {
  const p = topic.split('/');
  if (p.length !== 6 || `${p[0]}/${p[1]}/${p[2]}` !== TOPIC_ROOT || (p[4] !== 'up' && p[4] !== 'down') || !p[3]) return null;
  return { terminalId: p[3], dir: p[4], kind: p[5]! };
}

/** How a code value travels and rests: never in clear. */
export function hashCode(value: string): string {
  return crypto.createHash('sha256').update(`locker-code:v1:${value}`, 'utf8').digest('hex');
}

const v = z.literal(EDGE_PROTOCOL_VERSION);
// No control characters in what the central stores (PostgreSQL text cannot hold U+0000, and a
// message the store refuses would be retried forever instead of acknowledged).
const CONTROL = /[\u0000-\u001f\u007f]/;
const text = (max: number) => z.string().min(1).max(max).refine((s) => !CONTROL.test(s), 'must not contain control characters');
/** a timestamp: ISO 8601 that parses */
const iso = text(64).refine((s) => !Number.isNaN(Date.parse(s)), 'must be an ISO 8601 timestamp');
const id = text(200);

export const LockRef = z.object({ bus: z.string().min(1), board: z.number().int().min(0).max(255), lock: z.number().int().min(1).max(255) });
export type LockRef = z.infer<typeof LockRef>;

export const CodeEntry = z.object({
  id,
  shipmentUid: id,
  usage: z.enum(['DropOff', 'PickUp']),
  type: z.enum(['Code', 'Qr']),
  hash: z.string().regex(/^[0-9a-f]{64}$/),
  locker: LockRef.extend({ uid: id }),
});
export type CodeEntry = z.infer<typeof CodeEntry>;

export const CodesSnapshot = z.object({ v, type: z.literal('snapshot'), epoch: id, version: z.number().int().min(0), at: iso, codes: z.array(CodeEntry) });
export const CodesDelta = z.object({
  v,
  type: z.literal('delta'),
  epoch: id,
  baseVersion: z.number().int().min(0),
  version: z.number().int().min(1),
  at: iso,
  upserts: z.array(CodeEntry),
  revoke: z.array(id),
});
export const CodesMessage = z.discriminatedUnion('type', [CodesSnapshot, CodesDelta]);
export type CodesSnapshot = z.infer<typeof CodesSnapshot>;
export type CodesDelta = z.infer<typeof CodesDelta>;
export type CodesMessage = z.infer<typeof CodesMessage>;

export const SyncRequest = z.object({
  v,
  requestId: id,
  want: z.literal('snapshot'),
  reason: z.enum(['gap', 'epoch', 'empty', 'manual']),
  have: z.object({ epoch: z.string().nullable(), version: z.number().int().min(0) }).nullable(),
});
export type SyncRequest = z.infer<typeof SyncRequest>;

export const BusHealth = z.object({ name: z.string(), portOpen: z.boolean(), boards: z.array(z.object({ address: z.number().int(), online: z.boolean().nullable() })) });

/**
 * down/lockers: the pick up point's lockers as the central service knows them (provisioning and the
 * state of the shipment holding each), for the technician's page. A full list every time (no
 * deltas); `epoch` is the terminal's code epoch, `version` counts up by one per change of the list
 * within it. The terminal keeps the newest: a list of the held epoch with a lower version is
 * ignored. No personal data: names, sizes, positions and state codes only.
 */
export const LockerServiceState = z.enum(['active', 'outOfService']);
export type LockerServiceState = z.infer<typeof LockerServiceState>;
export const LockerSize = z.object({
  /** the provisioned size code (S, M, ...), null when the locker has none */
  code: text(40).nullable(),
  /** inner dimensions in cm */
  width: z.number().min(0),
  height: z.number().min(0),
  length: z.number().min(0),
});
export type LockerSize = z.infer<typeof LockerSize>;
export const LockerEntry = LockRef.extend({
  uid: id,
  name: text(200),
  size: LockerSize,
  serviceState: LockerServiceState,
  /** the state of the shipment holding the locker (e.g. ReadyForPickup), null when it is free */
  shipmentState: text(64).nullable(),
});
export type LockerEntry = z.infer<typeof LockerEntry>;
export const LockersMessage = z.object({ v, epoch: id, version: z.number().int().min(1), at: iso, lockers: z.array(LockerEntry) });
export type LockersMessage = z.infer<typeof LockersMessage>;

export const StatusOnline = z.object({
  v,
  state: z.literal('online'),
  terminalId: id,
  agentVersion: z.string(),
  startedAt: iso,
  at: iso,
  codes: z.object({ epoch: z.string().nullable(), version: z.number().int().min(0), count: z.number().int().min(0) }),
  /** the down/lockers list held (absent: an agent that does not take it) */
  lockers: z.object({ epoch: z.string().nullable(), version: z.number().int().min(0) }).optional(),
  /**
   * id: the journal the terminal writes now (its store's journalId; absent: an agent from before
   * it was sent). The central service takes it as the terminal's live journal (edge/ingest.ts).
   */
  journal: z.object({ unsent: z.number().int().min(0), lastSeq: z.number().int().min(0), id: id.optional() }),
  buses: z.array(BusHealth),
});
export const StatusOffline = z.object({ v, state: z.literal('offline'), terminalId: id, reason: z.enum(['connection-lost', 'shutdown']), at: iso.optional() });
export const StatusMessage = z.discriminatedUnion('state', [StatusOnline, StatusOffline]);
export type StatusOnline = z.infer<typeof StatusOnline>;
export type StatusMessage = z.infer<typeof StatusMessage>;

export const UnlockCommandMessage = z.object({
  v,
  type: z.literal('unlock'),
  commandId: id,
  lockerUid: id,
  bus: z.string().min(1),
  board: z.number().int().min(0).max(255),
  lock: z.number().int().min(1).max(255),
  shipmentUid: z.string().nullable(),
  reason: z.string(),
  issuedAt: iso,
  expiresAt: iso,
});
export type UnlockCommandMessage = z.infer<typeof UnlockCommandMessage>;
export const CommandMessage = z.discriminatedUnion('type', [UnlockCommandMessage]);

export const AckErrorCode = z.enum(['EXPIRED', 'UNKNOWN_LOCK', 'BUS_UNAVAILABLE', 'HARDWARE_FAULT', 'OUTCOME_UNKNOWN', 'BAD_COMMAND']);
export type AckErrorCode = z.infer<typeof AckErrorCode>;
export const AckMessage = z.union([
  z.object({ v, commandId: id, ok: z.literal(true), at: iso, duplicate: z.boolean().optional() }),
  z.object({ v, commandId: id, ok: z.literal(false), error: AckErrorCode, message: z.string(), at: iso, duplicate: z.boolean().optional() }),
]);
export type AckMessage = z.infer<typeof AckMessage>;

export const EVENT_TYPES = [
  'credentialAccepted',
  'credentialRefused',
  'unlockSent',
  'doorOpened',
  'doorClosed',
  'itemPlaced',
  'itemRemoved',
  'dropOff',
  'pickUp',
  'accessIncomplete',
  'jam',
  /** an unlock whose outcome could not be watched (board unreadable, agent dead); the door is closed now */
  'unlockUnobserved',
  'forcedOpen',
  'doorLeftOpen',
  'boardOffline',
  'boardOnline',
  'busPortLost',
  'busPortRestored',
  /** what a technician did on the diagnostics page ({who: 'technician', action, target..., outcome}) */
  'technicianAction',
] as const;
export type EdgeEventType = (typeof EVENT_TYPES)[number];

/**
 * The envelope every event has; the type-specific fields ride along (passthrough). `at` is the
 * time at the terminal (the door time); `seq` orders the events of one journal, which `journalId`
 * names (a new store starts again at 1; absent from agents older than ordered delivery).
 */
export const EventMessage = z
  .object({ v, eventId: id, seq: z.number().int().min(1), terminalId: id, at: iso, type: z.enum(EVENT_TYPES), journalId: id.optional() })
  .passthrough();
export type EventMessage = z.infer<typeof EventMessage> & Record<string, unknown>;

/** The fields of a dropOff / pickUp event (central acts on them). */
export const AccessDoneFields = z.object({
  sessionId: id,
  shipmentUid: id,
  codeId: id,
  lockerUid: id,
  bus: z.string(),
  board: z.number().int(),
  lock: z.number().int(),
});
export type AccessDoneFields = z.infer<typeof AccessDoneFields>;

/**
 * down/eventAcks: the central service's acknowledgement of a terminal's events (application level,
 * after its database committed them: the broker's PUBACK is not enough, a broker can lose what it
 * acknowledged). Every event of journal `journalId` with seq <= `upTo` is stored and applied; the
 * terminal marks them sent. `resendFrom`: the central misses that seq while it holds later ones
 * (a gap): the terminal sends its journal again from there.
 */
export const EventAck = z.object({ v, journalId: id, upTo: z.number().int().min(0), resendFrom: z.number().int().min(1).optional(), at: iso });
export type EventAck = z.infer<typeof EventAck>;

/** Parses a JSON payload with a schema; null when it is not JSON or does not fit. */
export function parseMessage<T>(schema: z.ZodType<T>, payload: Buffer | string): T | null {
  let raw: unknown;
  try {
    raw = JSON.parse(typeof payload === 'string' ? payload : payload.toString('utf8'));
  } catch {
    return null;
  }
  const r = schema.safeParse(raw);
  return r.success ? r.data : null;
}
