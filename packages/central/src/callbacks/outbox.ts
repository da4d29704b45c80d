// The callback outbox (owned by the callbacks area). Shipment code calls enqueueShipmentStatus in
// the SAME transaction as every state change, so a committed state change always has its
// ShipmentStatusUpdate queued, and a rolled-back one never does.
import type { Kysely, Transaction } from 'kysely';
import type { Database } from '../db/schema';

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

export async function enqueueShipmentStatus(_trx: Transaction<Database> | Kysely<Database>, _ev: ShipmentStatusEvent, _now: string): Promise<void> {
  // Implemented by the callbacks area (durable outbox row); until then nothing is queued.
}
