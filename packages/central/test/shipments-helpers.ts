// Helpers for the shipments suites: users linked to a PUP, codes, simulated door events, reading
// one shipment through the API.
import crypto from 'node:crypto';
import { expect } from 'vitest';
import { newUid, toDbTime } from '../src/ids';
import type { TestService } from './support/harness';
import { PUP_A1, S } from './support/fixtures';

let userNo = 0;

/** An account linked to a PUP (so the tenant managing that PUP can manage it). */
export async function addUser(t: TestService, pupUid: string): Promise<string> {
  const uid = newUid();
  const n = `${++userNo}-${uid.slice(0, 6)}`;
  const now = toDbTime(t.clock.now());
  await t.ctx.db.kysely
    .insertInto('accounts')
    .values({ uid, user_name: `user${n}@example.test`, user_name_key: `user${n}@example.test`, email_address: `user${n}@example.test`, email_key: `user${n}@example.test`, first_name: 'U', last_name: n, main_pup_uid: pupUid, created_at: now, updated_at: now })
    .execute();
  await t.ctx.db.kysely.insertInto('account_pups').values({ account_uid: uid, pup_uid: pupUid }).execute();
  return uid;
}

export const booking = (over: Record<string, unknown> = {}) => ({ PupUid: PUP_A1, Dimension: S, AllowLargerLockers: true, AllowOverflowLockers: false, LockerUid: null, ...over });

export async function ok(p: Promise<{ status: number; body: any }>): Promise<any> {
  const r = await p;
  if (r.status !== 200 || r.body.success !== true) throw new Error(`expected success, got ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
}

export async function fails(p: Promise<{ status: number; body: any }>, code: string, status = 400): Promise<any> {
  const r = await p;
  expect({ status: r.status, error: r.body.error, success: r.body.success }).toEqual({ status, error: code, success: false });
  expect(typeof r.body.message).toBe('string');
  return r.body;
}

export interface Codes {
  dropPin?: string;
  dropQr?: string;
  pickPin?: string;
  pickQr?: string;
  links: string[];
  all: { usage: string; type: string; value: string }[];
}

export async function codes(t: TestService, shipmentUid: string, token?: string): Promise<Codes> {
  const b = await ok(t.post('/v1/Logistics/GetShipmentAccessConfig', { shipmentUid }, token));
  const items = b.items as { usage: string; type: string; value: string }[];
  const find = (u: string, ty: string) => items.find((i) => i.usage === u && i.type === ty)?.value;
  return { dropPin: find('DropOff', 'Code'), dropQr: find('DropOff', 'Qr'), pickPin: find('PickUp', 'Code'), pickQr: find('PickUp', 'Qr'), links: items.filter((i) => i.usage === 'LinkCode').map((i) => i.value), all: items };
}

export async function shipment(t: TestService, shipmentUid: string, token?: string): Promise<any> {
  const b = await ok(t.post('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 1, shipmentUid }, token));
  expect(b.items).toHaveLength(1);
  return b.items[0];
}

export async function stateOf(t: TestService, uid: string): Promise<string> {
  return (await shipment(t, uid)).stateCode;
}

export function simulate(t: TestService, pupUid: string, lockerName: string, pinCode: string, token?: string) {
  return t.post('/v1/Logistics/SimulateLockerAccess', { pupUid, lockerName, pinCode }, token);
}

/** Drop-off with the shipment's drop-off PIN at its locker. */
export async function dropOff(t: TestService, uid: string): Promise<void> {
  const s = await shipment(t, uid);
  const c = await codes(t, uid);
  expect(c.dropPin).toBeDefined();
  await ok(simulate(t, s.bookedPupUid, s.bookedLockerName, c.dropPin!));
}

export async function pickUp(t: TestService, uid: string): Promise<void> {
  const s = await shipment(t, uid);
  const c = await codes(t, uid);
  expect(c.pickPin).toBeDefined();
  await ok(simulate(t, s.bookedPupUid, s.bookedLockerName, c.pickPin!));
}

export async function lockerHolder(t: TestService, lockerUid: string): Promise<string | null> {
  const r = await t.ctx.db.kysely.selectFrom('lockers').select('booked_shipment_uid').where('uid', '=', lockerUid).executeTakeFirstOrThrow();
  return r.booked_shipment_uid;
}

export async function lockerOf(t: TestService, shipmentUid: string): Promise<string | null> {
  const r = await t.ctx.db.kysely.selectFrom('shipments').select('locker_uid').where('uid', '=', shipmentUid).executeTakeFirstOrThrow();
  return r.locker_uid;
}

export async function transitions(t: TestService, shipmentUid: string) {
  return t.ctx.db.kysely.selectFrom('shipment_transitions').selectAll().where('shipment_uid', '=', shipmentUid).orderBy('seq').execute();
}

/**
 * A shipment booked for `user` (CreateLocalShipment), with its locker as a terminal event names
 * it (lockerUid, bus, board, lock) and the ids of its valid drop-off and pick-up codes, as door
 * events carry them (codeId).
 */
export async function bookedAtLock(t: TestService, user: string): Promise<{ uid: string; lock: { lockerUid: string; bus: string; board: number; lock: number }; dropOffCode: string; pickUpCode: string }> {
  const db = t.ctx.db.kysely;
  const uid = (await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking() }))).shipmentUid as string;
  const row = await db.selectFrom('shipments').select(['locker_uid']).where('uid', '=', uid).executeTakeFirstOrThrow();
  const locker = await db.selectFrom('lockers').selectAll().where('uid', '=', row.locker_uid!).executeTakeFirstOrThrow();
  const codeId = async (usage: string) => (await db.selectFrom('access_codes').select('uid').where('shipment_uid', '=', uid).where('usage', '=', usage).where('valid', '=', 1).executeTakeFirstOrThrow()).uid;
  const lock = { lockerUid: locker.uid, bus: locker.bus, board: locker.board_address, lock: locker.lock_number };
  return { uid, lock, dropOffCode: await codeId('DropOff'), pickUpCode: await codeId('PickUp') };
}

/**
 * A booked shipment at PUP_A1 and the fields of a terminal's door event for it (edge protocol
 * dropOff / pickUp: the code by id, the locker and its lock), as a terminal would report it.
 */
export async function doorShipment(t: TestService, user: string): Promise<{ uid: string; access: (type: 'dropOff' | 'pickUp') => Promise<Record<string, unknown>> }> {
  const uid = (await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking() }))).shipmentUid as string;
  const row = await t.ctx.db.kysely.selectFrom('shipments').select(['locker_uid']).where('uid', '=', uid).executeTakeFirstOrThrow();
  const locker = await t.ctx.db.kysely.selectFrom('lockers').selectAll().where('uid', '=', row.locker_uid!).executeTakeFirstOrThrow();
  const codeId = async (usage: string) =>
    (await t.ctx.db.kysely.selectFrom('access_codes').select('uid').where('shipment_uid', '=', uid).where('usage', '=', usage).where('valid', '=', 1).executeTakeFirstOrThrow()).uid;
  const access = async (type: 'dropOff' | 'pickUp') => ({
    sessionId: crypto.randomUUID(),
    shipmentUid: uid,
    codeId: await codeId(type === 'dropOff' ? 'DropOff' : 'PickUp'),
    lockerUid: locker.uid,
    bus: locker.bus,
    board: locker.board_address,
    lock: locker.lock_number,
    item: type === 'dropOff',
  });
  return { uid, access };
}
