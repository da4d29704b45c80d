// The callback outbox (owned by the callbacks area). Shipment code calls enqueueShipmentStatus in
// the SAME transaction as every state change, so a committed state change always has its
// ShipmentStatusUpdate queued, and a rolled-back one never does. Enqueueing is only an insert:
// delivery happens in the delivery worker (worker.ts), apart from the API call.
import type { Kysely, Transaction } from 'kysely';
import type { Database } from '../db/schema';
import { newSeqUid, toApiTime } from '../ids';
import { loadCallbackRegistration } from './registration';

export interface ShipmentStatusEvent {
  tenantUid: string;
  shipmentUid: string;
  stateCode: string;
  /** stored (db) timestamp of the start of the new state */
  stateStart: string;
  shipmentType: string;
  referenceNo: string | null;
  referenceCaseNo: string | null;
  description: string | null;
  pupUid: string | null;
  fromUserUid: string | null;
  toUserUid: string | null;
}

/** The JSON body of a ShipmentStatusUpdate callback (docs/callbacks.md). */
export interface ShipmentStatusMessage {
  messageType: 'ShipmentStatusUpdate';
  /** the event's fields (stateStart as an API time) plus its id and per-shipment sequence */
  message: Omit<ShipmentStatusEvent, 'tenantUid'> & { eventId: string; sequence: number };
}

export interface EnqueuedEvent {
  eventId: string;
  sequence: number;
  /** pending: will be delivered; skipped: the tenant had no callback URL (kept for the record) */
  status: 'pending' | 'skipped';
}

// In-process wake-up of delivery workers after an enqueue (the row becomes visible on commit;
// workers also poll, so a missed wake-up only costs one poll interval).
const wakers = new Set<() => void>();
export function onOutboxEnqueued(fn: () => void): () => void {
  wakers.add(fn);
  return () => wakers.delete(fn);
}

/** Runs portable SQL (`?` placeholders) in the caller's transaction; the booking hot path passes one. */
export type RawExec = (sqlText: string, params: readonly unknown[]) => Promise<{ rows: unknown[] }>;

const OUTBOX_COLS = ['event_id', 'tenant_uid', 'shipment_uid', 'sequence', 'message_type', 'payload', 'status', 'attempts', 'next_attempt_at', 'lease_until', 'lease_owner', 'last_status', 'last_error', 'created_at', 'delivered_at'] as const;
// One statement for the hot path: the status is decided inside the INSERT from the tenant's
// registration (pending with a callback URL, skipped without), so the lookup costs no extra
// round trip on PostgreSQL. RETURNING says which it was.
const MAX_SEQUENCE = 'SELECT max(sequence) AS m FROM callback_outbox WHERE shipment_uid = ?';
const INSERT_OUTBOX_CHECKED = `INSERT INTO callback_outbox (${OUTBOX_COLS.join(', ')}) VALUES (${OUTBOX_COLS.map((c) =>
  c === 'status' ? `CASE WHEN EXISTS (SELECT 1 FROM callback_configs WHERE tenant_uid = ? AND url IS NOT NULL AND url <> '') THEN 'pending' ELSE 'skipped' END` : '?',
).join(', ')}) RETURNING status`;

/**
 * `opts.sequence`: the caller already knows the event's sequence (a shipment created in this
 * transaction has none queued yet: 1), which saves the MAX(sequence) query; the unique
 * (shipment_uid, sequence) constraint still rejects a wrong one.
 * `opts.exec`: when given, the last sequence, the registration lookup and the insert run as fixed
 * SQL statements through it (prepared once) instead of as Kysely query builders.
 */
export async function enqueueShipmentStatus(
  trx: Transaction<Database> | Kysely<Database>,
  ev: ShipmentStatusEvent,
  now: string,
  opts: { sequence?: number; exec?: RawExec } = {},
): Promise<EnqueuedEvent> {
  let sequence = opts.sequence;
  if (sequence === undefined) {
    const last = opts.exec
      ? ((await opts.exec(MAX_SEQUENCE, [ev.shipmentUid])).rows[0] as { m: unknown } | undefined)
      : await trx
          .selectFrom('callback_outbox')
          .select((eb) => eb.fn.max('sequence').as('m'))
          .where('shipment_uid', '=', ev.shipmentUid)
          .executeTakeFirst();
    sequence = Number(last?.m ?? 0) + 1;
  }
  const eventId = newSeqUid(); // time-ordered: the outbox's primary key grows at its right edge
  // without exec: the registration is read first (Kysely); with exec the INSERT decides (below)
  let status: 'pending' | 'skipped' = 'skipped';
  if (!opts.exec) status = (await loadCallbackRegistration(trx, ev.tenantUid))?.url ? 'pending' : 'skipped';
  const body: ShipmentStatusMessage = {
    messageType: 'ShipmentStatusUpdate',
    message: {
      shipmentUid: ev.shipmentUid,
      stateCode: ev.stateCode,
      stateStart: toApiTime(ev.stateStart) ?? '',
      shipmentType: ev.shipmentType,
      referenceNo: ev.referenceNo ?? null,
      referenceCaseNo: ev.referenceCaseNo ?? null,
      description: ev.description ?? null,
      pupUid: ev.pupUid ?? null,
      fromUserUid: ev.fromUserUid ?? null,
      toUserUid: ev.toUserUid ?? null,
      eventId,
      sequence,
    },
  };
  const row = {
    event_id: eventId,
    tenant_uid: ev.tenantUid,
    shipment_uid: ev.shipmentUid,
    sequence,
    message_type: body.messageType,
    payload: JSON.stringify(body),
    status,
    attempts: 0,
    next_attempt_at: now,
    lease_until: null,
    lease_owner: null,
    last_status: null,
    last_error: null,
    created_at: now,
    delivered_at: null,
  };
  if (opts.exec) {
    const res = await opts.exec(INSERT_OUTBOX_CHECKED, OUTBOX_COLS.map((c) => (c === 'status' ? ev.tenantUid : row[c])));
    status = (res.rows[0] as { status: 'pending' | 'skipped' } | undefined)?.status ?? 'skipped';
  } else await trx.insertInto('callback_outbox').values(row).execute();
  if (status === 'pending') for (const w of wakers) w();
  return { eventId, sequence, status };
}
