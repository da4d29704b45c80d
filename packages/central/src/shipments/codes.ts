// Access codes: a numeric PIN (type Code) and a Qr value for drop-off and for pick-up, plus
// LinkCode Qr values (the newest valid). PINs are unique among the valid codes of one pick up
// point (a partial unique index; an insert that collides is retried with a new PIN). Qr values
// carry 144 random bits. The table is what a terminal needs to validate codes offline.
import crypto from 'node:crypto';
import { sql } from 'kysely';
import { newUid } from '../ids';
import type { Trx } from './tx';

export const PIN_DIGITS = 6;

export const newPin = (): string => String(crypto.randomInt(0, 10 ** PIN_DIGITS)).padStart(PIN_DIGITS, '0');
export const newQr = (): string => crypto.randomBytes(18).toString('base64url');

export interface CodeOwner {
  shipmentUid: string;
  tenantUid: string;
  pupUid: string;
  lockerUid: string | null;
}

/** Inserts a fresh PIN + Qr pair for a usage (DropOff or PickUp). */
export async function insertCodePair(trx: Trx, o: CodeOwner, usage: 'DropOff' | 'PickUp', now: string): Promise<{ pin: string; qr: string }> {
  const row = { shipment_uid: o.shipmentUid, tenant_uid: o.tenantUid, pup_uid: o.pupUid, locker_uid: o.lockerUid, usage, valid: 1 as const, shared: 0 as const, created_at: now, invalidated_at: null };
  let pin = '';
  for (let attempt = 0; ; attempt++) {
    pin = newPin();
    const res = await trx
      .insertInto('access_codes')
      .values({ ...row, uid: newUid(), type: 'Code', value: pin })
      .onConflict((oc) => oc.columns(['pup_uid', 'value']).where(sql.ref('valid'), '=', sql.lit(1)).where(sql.ref('shared'), '=', sql.lit(0)).where(sql.ref('type'), '=', sql.lit('Code')).doNothing())
      .executeTakeFirst();
    if (Number(res.numInsertedOrUpdatedRows ?? 0) === 1) break;
    if (attempt > 50) throw new Error('could not find a free PIN at this pick up point');
  }
  const qr = newQr();
  await trx.insertInto('access_codes').values({ ...row, uid: newUid(), type: 'Qr', value: qr }).execute();
  return { pin, qr };
}

export async function insertLinkCode(trx: Trx, o: CodeOwner, now: string): Promise<string> {
  const value = newQr();
  await trx
    .insertInto('access_codes')
    .values({ uid: newUid(), shipment_uid: o.shipmentUid, tenant_uid: o.tenantUid, pup_uid: o.pupUid, locker_uid: o.lockerUid, usage: 'LinkCode', type: 'Qr', value, valid: 1, shared: 0, created_at: now, invalidated_at: null })
    .execute();
  return value;
}

/** Copies another shipment's valid codes of one usage as this shipment's codes of another usage (swap). */
export async function copyCodes(trx: Trx, fromShipment: string, fromUsage: 'DropOff' | 'PickUp', to: CodeOwner, toUsage: 'DropOff' | 'PickUp', now: string): Promise<void> {
  const src = await trx.selectFrom('access_codes').select(['type', 'value']).where('shipment_uid', '=', fromShipment).where('usage', '=', fromUsage).where('valid', '=', 1).execute();
  if (src.length === 0) return;
  await trx
    .insertInto('access_codes')
    .values(src.map((c) => ({ uid: newUid(), shipment_uid: to.shipmentUid, tenant_uid: to.tenantUid, pup_uid: to.pupUid, locker_uid: to.lockerUid, usage: toUsage, type: c.type, value: c.value, valid: 1 as const, shared: 1 as const, created_at: now, invalidated_at: null })))
    .execute();
}

export async function invalidateCodes(trx: Trx, shipmentUid: string, usage: 'DropOff' | 'PickUp' | 'LinkCode' | 'all', now: string): Promise<void> {
  let q = trx.updateTable('access_codes').set({ valid: 0, invalidated_at: now }).where('shipment_uid', '=', shipmentUid).where('valid', '=', 1);
  if (usage !== 'all') q = q.where('usage', '=', usage);
  await q.execute();
}
