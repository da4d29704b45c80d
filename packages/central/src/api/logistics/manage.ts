// Managing shipments: details, objects (with new access codes), receiver, cancel, unlock and the
// staging-only SimulateLockerAccess.
import type { FastifyInstance } from 'fastify';
import type { AppContext } from '../../context';
import { ApiError } from '../../errors';
import { newUid } from '../../ids';
import { v1Post } from '../../http/route';
import { shipmentService, UNLOCK_MAX_FAILURES, type PinScope } from '../../shipments/service';
import { dropOffAhead } from '../../shipments/state-machine';
import type { StateCode } from '../../shipments/types';
import * as S from './schemas';

const TAGS = ['Logistics'];

export async function manageRoutes(app: FastifyInstance, ctx: AppContext): Promise<void> {
  const svc = shipmentService(ctx);
  const env = { environment: ctx.config.environment };

  /** Wrong-PIN throttle per tenant and locker / pick up point / tenant: 429 RateLimited with Retry-After. */
  const refuseThrottledPin = async (scope: PinScope) => {
    const t = await svc.pinThrottle(scope);
    if (!t) return;
    const what = t.scope === 'locker' ? 'at this locker' : t.scope === 'pup' ? 'at this pick up point' : 'for this client';
    throw new ApiError('RateLimited', `too many wrong pinCode attempts ${what}; retry after ${t.retryAfterSeconds} s`, 429, { 'retry-after': String(t.retryAfterSeconds) });
  };

  v1Post(
    app,
    {
      path: '/v1/Logistics/SetShipmentDetails',
      summary: 'Override the reference number, case reference and description of a shipment',
      tags: TAGS,
      body: S.SetDetailsBody,
      response: S.EmptyResponse,
      handler: async (b, req) => {
        await svc.write(async (trx, now) => {
          const row = await svc.own(trx, req.tenant, b.shipmentUid);
          await trx
            .updateTable('shipments')
            .set({ description: b.Description ?? null, reference_no: b.ReferenceNo ?? null, reference_case_no: b.ReferenceCaseNo ?? null, updated_at: now })
            .where('uid', '=', row.uid)
            .execute();
        });
        return {};
      },
    },
    env,
  );

  v1Post(
    app,
    {
      path: '/v1/Logistics/AddShipmentObject',
      summary: 'Attach an object to a shipment; optionally make new pick-up and/or drop-off access codes',
      tags: TAGS,
      body: S.AddObjectBody,
      response: S.ObjectRefResponse,
      handler: async (b, req) => {
        return svc.write(async (trx, now) => {
          const row = await svc.own(trx, req.tenant, b.shipmentUid);
          if (!row.active) throw new ApiError('InvalidShipmentState', `shipment ${row.uid} is ${row.state_code}: objects can no longer be added`);
          // A new drop-off code only where a drop-off code can still be used (docs/state-machine.md,
          // "Access codes"); after the drop-off the request is refused, and nothing is added.
          if (b.changeDropOffAccess && !dropOffAhead({ state: row.state_code as StateCode, keepBooked: !!row.keep_booked })) {
            throw new ApiError('InvalidShipmentState', `shipment ${row.uid} is ${row.state_code}: its drop-off is done, no drop-off code can be used any more (changeDropOffAccess)`);
          }
          const uid = newUid();
          const d = b.details;
          const last = await trx.selectFrom('shipment_objects').select((eb) => eb.fn.max('ord').as('m')).where('shipment_uid', '=', row.uid).executeTakeFirst();
          await trx
            .insertInto('shipment_objects')
            .values({
              uid,
              shipment_uid: row.uid,
              reference_no: d.referenceNo ?? null,
              description: d.description ?? null,
              weight: d.weight,
              count: d.count,
              width: d.dimension.width,
              height: d.dimension.height,
              length: d.dimension.length,
              object_type_uid: d.objectTypeUid ?? null,
              ord: Number(last?.m ?? 0) + 1,
              created_at: now,
            })
            .execute();
          if (b.changeDropOffAccess) await svc.rotateCodes(trx, row, 'DropOff', now);
          if (b.changePickUpAccess) await svc.rotateCodes(trx, row, 'PickUp', now);
          await trx.updateTable('shipments').set({ updated_at: now }).where('uid', '=', row.uid).execute();
          return { shipmentUid: row.uid, shipmentObjectUid: uid };
        });
      },
    },
    env,
  );

  v1Post(
    app,
    {
      path: '/v1/Logistics/RemoveShipmentObject',
      summary: 'Remove an object from a shipment',
      tags: TAGS,
      body: S.RemoveObjectBody,
      response: S.ObjectRefResponse,
      handler: async (b, req) => {
        return svc.write(async (trx, now) => {
          const row = await svc.own(trx, req.tenant, b.shipmentUid);
          const res = await trx.deleteFrom('shipment_objects').where('uid', '=', b.shipmentObjectUid).where('shipment_uid', '=', row.uid).executeTakeFirst();
          if (Number(res.numDeletedRows) === 0) throw new ApiError('InvalidRequest', `shipmentObjectUid: no object ${b.shipmentObjectUid} on shipment ${row.uid}`);
          await trx.updateTable('shipments').set({ updated_at: now }).where('uid', '=', row.uid).execute();
          return { shipmentUid: row.uid, shipmentObjectUid: b.shipmentObjectUid };
        });
      },
    },
    env,
  );

  v1Post(
    app,
    {
      path: '/v1/Logistics/SetShipmentReceiver',
      summary: 'Set (or remove) the receiver of a shipment that has none yet',
      description: 'Rule 2: valid only while the shipment has no receiver and is not ReadyForPickup. Rule 3: removing works only when it has one and is not ReadyForPickup. Otherwise InvalidShipmentState.',
      tags: TAGS,
      body: S.SetReceiverBody,
      response: S.EmptyResponse,
      handler: async (b, req) => {
        await svc.write(async (trx, now) => {
          const row = await svc.own(trx, req.tenant, b.shipmentUid);
          if (b.removeReceiver) {
            await svc.apply(trx, row, { type: 'RemoveReceiver' }, 'api', 'SetShipmentReceiver', now, { to_user_uid: null, receiver_delayed: 1 });
            return;
          }
          svc.check(row, { type: 'SetReceiver', via: 'SetShipmentReceiver' });
          if (!b.toUserUid) throw new ApiError('InvalidRequest', 'toUserUid: required unless removeReceiver is true');
          await svc.checkUser(trx, req.tenant, b.toUserUid, 'toUserUid');
          await svc.apply(trx, row, { type: 'SetReceiver', via: 'SetShipmentReceiver' }, 'api', 'SetShipmentReceiver', now, {
            to_user_uid: b.toUserUid,
            receiver_delayed: 0,
            ...(b.caseReferenceNew != null ? { reference_case_no: b.caseReferenceNew } : {}),
          });
        });
        return {};
      },
    },
    env,
  );

  v1Post(
    app,
    {
      path: '/v1/Logistics/CancelShipment',
      summary: 'Cancel a registered shipment and release its booked locker',
      tags: TAGS,
      idempotent: true,
      body: S.ShipmentUidBody,
      response: S.EmptyResponse,
      handler: async (b, req) => {
        await svc.write(async (trx, now) => {
          const row = await svc.own(trx, req.tenant, b.shipmentUid);
          await svc.apply(trx, row, { type: 'Cancel' }, 'api', 'CancelShipment', now);
        });
        return {};
      },
    },
    env,
  );

  v1Post(
    app,
    {
      path: '/v1/Logistics/UnlockShipmentLocker',
      summary: "Unlock a shipment's locker, optionally for a goal and validating a code",
      description: `Errors: InvalidShipment (unknown), InvalidShipmentState (inactive or no locker), UnlockNotAllowed (the goal does not match the state), InvalidAccessCode (wrong pinCode; after ${UNLOCK_MAX_FAILURES} failures within 15 minutes every pinCode is refused), UnlockFailed (terminal or hardware); 429 RateLimited with Retry-After after too many wrong pinCodes at the locker, the pick up point or for the client (docs/api.md, Throttling and limits).`,
      tags: TAGS,
      body: S.UnlockBody,
      response: S.EmptyResponse,
      handler: async (b, req) => {
        const row = await ctx.db.kysely.selectFrom('shipments').selectAll().where('uid', '=', b.shipmentUid).where('tenant_uid', '=', req.tenant.uid).executeTakeFirst();
        if (!row) throw new ApiError('InvalidShipment', `shipmentUid: unknown shipment ${b.shipmentUid}`);
        if (!row.active || !row.locker_uid) throw new ApiError('InvalidShipmentState', `shipment ${row.uid} is ${row.state_code}${row.locker_uid ? '' : ' and has no locker'}: it cannot be unlocked`);
        const goal = b.unlockGoal ?? null;
        if (goal === 'DropOff' && row.state_code !== 'ReadyForDropoff') throw new ApiError('UnlockNotAllowed', `unlockGoal DropOff needs state ReadyForDropoff; the shipment is ${row.state_code}`);
        if (goal === 'PickUp' && row.state_code !== 'ReadyForPickup') throw new ApiError('UnlockNotAllowed', `unlockGoal PickUp needs state ReadyForPickup; the shipment is ${row.state_code}`);
        const pinScope = { tenantUid: req.tenant.uid, pupUid: row.pup_uid, lockerUid: row.locker_uid };
        if (b.pinCode) {
          await refuseThrottledPin(pinScope);
          if ((await svc.recentUnlockFailures(row.uid)) >= UNLOCK_MAX_FAILURES) {
            throw new ApiError('InvalidAccessCode', 'too many failed pinCode attempts for this shipment; try again later');
          }
          const usages = goal ? [goal] : ['DropOff', 'PickUp'];
          const hit = await ctx.db.kysely
            .selectFrom('access_codes')
            .select('uid')
            .where('shipment_uid', '=', row.uid)
            .where('valid', '=', 1)
            .where('usage', 'in', usages)
            .where('value', '=', b.pinCode)
            .executeTakeFirst();
          if (!hit) {
            await svc.recordUnlockFailure(row.uid, pinScope);
            throw new ApiError('InvalidAccessCode', `pinCode is not a valid ${goal ?? 'drop-off or pick-up'} code of this shipment`);
          }
        }
        const locker = await ctx.db.kysely.selectFrom('lockers').select(['uid', 'pup_uid', 'bus', 'board_address', 'lock_number', 'name']).where('uid', '=', row.locker_uid).executeTakeFirstOrThrow();
        const res = await ctx.terminals.unlock({ pupUid: locker.pup_uid, lockerUid: locker.uid, bus: locker.bus, boardAddress: locker.board_address, lockNumber: locker.lock_number, shipmentUid: row.uid, reason: 'api' });
        if (!res.ok) {
          req.log.warn({ ns: 'central.shipments', shipment: row.uid, locker: locker.uid, errorCode: res.code }, 'unlock failed');
          throw new ApiError('UnlockFailed', `unlocking locker ${locker.name} failed: ${res.message}`);
        }
        req.log.info({ ns: 'central.shipments', shipment: row.uid, locker: locker.uid, goal }, 'locker unlocked');
        return {};
      },
    },
    env,
  );

  v1Post(
    app,
    {
      path: '/v1/Logistics/SimulateLockerAccess',
      summary: 'Staging only: act as if the locker was opened with a code and closed (advances the matching shipment)',
      tags: TAGS,
      stagingOnly: true,
      body: S.SimulateBody,
      response: S.EmptyResponse,
      handler: async (b, req) => {
        if (!req.tenant.pupUids.has(b.pupUid)) throw new ApiError('InvalidPupUid', `pupUid ${b.pupUid} is not a pick up point of this client`);
        const locker = await ctx.db.kysely.selectFrom('lockers').select('uid').where('pup_uid', '=', b.pupUid).where('name', '=', b.lockerName).executeTakeFirst();
        const pinScope = { tenantUid: req.tenant.uid, pupUid: b.pupUid, lockerUid: locker?.uid ?? null };
        await refuseThrottledPin(pinScope);
        try {
          await svc.applyLockerAccess({ pupUid: b.pupUid, lockerName: b.lockerName, code: b.pinCode, cause: 'simulate', tenantUid: req.tenant.uid });
        } catch (e) {
          if (e instanceof ApiError && e.code === 'InvalidAccessCode') await svc.recordUnlockFailure('', pinScope);
          throw e;
        }
        return {};
      },
    },
    env,
  );
}
