// Creating shipments: CreateLocalShipment, CreateCollectOnlyShipment and the eleven flow
// endpoints (docs/state-machine.md tells each flow as a story).
import type { FastifyInstance } from 'fastify';
import type { z } from 'zod';
import type { AppContext, TenantPrincipal } from '../../context';
import { ApiError } from '../../errors';
import { v1Post } from '../../http/route';
import { shipmentService, type Details, type ShipmentRow } from '../../shipments/service';
import type { BookRequest, UserCheck } from '../../shipments/booking';
import type { Trx } from '../../shipments/tx';
import * as S from './schemas';

const TAGS = ['Logistics'];

type DetailsIn = z.infer<typeof S.DetailsObject>;
const details = (d: DetailsIn | undefined): Details => ({ referenceNo: d?.ReferenceNo ?? null, referenceCaseNo: d?.ReferenceCaseNo ?? null, description: d?.Description ?? null });
const hasDetails = (d: DetailsIn | undefined) => !!d && (d.ReferenceNo != null || d.ReferenceCaseNo != null || d.Description != null);
const rowDetails = (r: ShipmentRow): Details => ({ referenceNo: r.reference_no, referenceCaseNo: r.reference_case_no, description: r.description });

function booking(b: { PupUid: string; Dimension: { width: number; height: number; length: number }; AllowLargerLockers: boolean; AllowOverflowLockers: boolean; LockerUid?: string | null }): BookRequest {
  return { pupUid: b.PupUid, dimension: b.Dimension, allowLarger: b.AllowLargerLockers, allowOverflow: b.AllowOverflowLockers, lockerUid: b.LockerUid ?? null };
}

const dims = (r: ShipmentRow) => ({ width: r.width, height: r.height, length: r.length });

export async function createRoutes(app: FastifyInstance, ctx: AppContext): Promise<void> {
  const svc = shipmentService(ctx);
  const env = { environment: ctx.config.environment };

  /** Issues a stock shipment to a user (sets its receiver); returns the updated row. */
  async function issueFromStock(trx: Trx, tenant: TenantPrincipal, now: string, priorUid: string, toUserUid: string, caseNo: string | null | undefined, origin: string): Promise<ShipmentRow> {
    const stock = await svc.own(trx, tenant, priorUid, 'PriorShipmentUid');
    if (stock.flow !== 'stock' && stock.flow !== 'circularStock') throw new ApiError('InvalidShipment', `PriorShipmentUid: ${priorUid} is not a stock shipment`);
    svc.check(stock, { type: 'SetReceiver', via: 'IssueFromStock' });
    await svc.checkUser(trx, tenant, toUserUid, 'ToUserUid');
    return svc.apply(trx, stock, { type: 'SetReceiver', via: 'IssueFromStock' }, 'api', origin, now, {
      to_user_uid: toUserUid,
      receiver_delayed: 0,
      ...(caseNo != null ? { reference_case_no: caseNo } : {}),
    });
  }

  v1Post(
    app,
    {
      path: '/v1/Logistics/CreateLocalShipment',
      summary: 'Create one account-to-account shipment (LocalPupShipment) and book a locker',
      tags: TAGS,
      idempotent: true,
      body: S.CreateLocalShipmentBody,
      response: S.SingleShipmentResponse,
      handler: async (b, req) => {
        const tenant = req.tenant;
        const r = await svc.write(async (trx, now) => {
          if (b.IsReceiverDelayed && b.ToUserUid) throw new ApiError('InvalidRequest', 'ToUserUid: must not be set when IsReceiverDelayed is true');
          let from = b.FromUserUid ?? null;
          let to = b.ToUserUid ?? null;
          let swapped: ShipmentRow | undefined;
          if (b.SwapsShipmentUid) {
            swapped = await svc.own(trx, tenant, b.SwapsShipmentUid, 'SwapsShipmentUid');
            if (b.LockerUid && b.LockerUid !== swapped.locker_uid) throw new ApiError('InvalidRequest', `LockerUid: a swap uses the locker of shipment ${swapped.uid}`);
          }
          if (!tenant.pupUids.has(b.PupUid)) throw new ApiError('InvalidPupUid', `PupUid ${b.PupUid} is not a pick up point of this client`);
          if (!from && !to) {
            // A swapping shipment without a To user: its From user is the swapped shipment's To user.
            if (!(swapped && b.IsReceiverDelayed)) throw new ApiError('InvalidRequest', 'FromUserUid or ToUserUid is required (both may be absent only for a swap with IsReceiverDelayed true)');
            from = swapped.to_user_uid;
          } else if (!b.IsReceiverDelayed) {
            from ??= tenant.mainAccountUid;
            to ??= tenant.mainAccountUid;
          } else {
            from ??= tenant.mainAccountUid;
          }
          const checks: UserCheck[] = [];
          if (b.FromUserUid && b.FromUserUid !== tenant.mainAccountUid) checks.push({ uid: b.FromUserUid, field: 'FromUserUid' });
          if (b.ToUserUid && b.ToUserUid !== tenant.mainAccountUid) checks.push({ uid: b.ToUserUid, field: 'ToUserUid' });
          // PostgreSQL, a plain booking of any fitting size: the accounts are checked in the
          // booking's first statement (booking.ts userChecks), in this order, before its outcome
          const deferChecks = ctx.db.engine === 'postgres' && !swapped && b.AllowLargerLockers && !b.LockerUid && checks.length > 0;
          if (!deferChecks) for (const ch of checks) await svc.checkUser(trx, tenant, ch.uid, ch.field);
          return svc.createIn(
            trx,
            tenant,
            {
              typeCode: 'LocalPupShipment',
              flow: 'local',
              fromUserUid: from,
              toUserUid: to,
              receiverDelayed: !!b.IsReceiverDelayed,
              details: { referenceNo: b.ReferenceNo, referenceCaseNo: b.ReferenceCaseNo, description: b.Description },
              dimension: b.Dimension,
              ...(swapped ? { waitOn: { row: swapped, kind: 'swap' as const }, swapsShipmentUid: swapped.uid } : { booking: deferChecks ? { ...booking(b), userChecks: checks } : booking(b) }),
              origin: 'CreateLocalShipment',
            },
            now,
          );
        });
        return { shipmentUid: r.row.uid, pupUid: r.row.pup_uid, lockerName: r.lockerName };
      },
    },
    env,
  );

  const collectOnly = async (tenant: TenantPrincipal, b: z.infer<typeof S.CreateCollectOnlyBody>, origin: string) => {
    const r = await svc.write(async (trx, now) => {
      if (b.ToUserUid) await svc.checkUser(trx, tenant, b.ToUserUid, 'ToUserUid');
      return svc.createIn(
        trx,
        tenant,
        {
          typeCode: 'CollectOnlyShipment',
          flow: b.ToUserUid ? 'collectByUser' : 'collectByDispatcher',
          fromUserUid: null,
          toUserUid: b.ToUserUid ?? tenant.mainAccountUid,
          keepBooked: b.KeepBookedAfterPickUp,
          details: details(b.Details),
          dimension: b.Dimension,
          booking: booking(b),
          origin,
        },
        now,
      );
    });
    return r;
  };

  v1Post(
    app,
    {
      path: '/v1/Logistics/CreateCollectOnlyShipment',
      summary: 'Book a locker for a single collection (by a user, or by the dispatcher without ToUserUid)',
      tags: TAGS,
      idempotent: true,
      body: S.CreateCollectOnlyBody,
      response: S.SingleShipmentResponse,
      handler: async (b, req) => {
        const r = await collectOnly(req.tenant, b, 'CreateCollectOnlyShipment');
        return { shipmentUid: r.row.uid, pupUid: r.row.pup_uid, lockerName: r.lockerName };
      },
    },
    env,
  );

  const flow = <B extends z.ZodTypeAny>(suffix: string, summary: string, body: B, run: (trx: Trx, tenant: TenantPrincipal, now: string, b: z.infer<B>, origin: string) => Promise<string[]>) =>
    v1Post(
      app,
      {
        path: `/v1/Logistics/${suffix}`,
        summary,
        tags: TAGS,
        idempotent: true,
        body,
        response: S.ShipmentUidsResponse,
        handler: async (b, req) => ({ shipmentUids: await svc.write((trx, now) => run(trx, req.tenant, now, b, suffix)) }),
      },
      env,
    );

  flow('CreateLocalShipmentAsIssue', 'Issue: one shipment from the dispatcher to a user', S.AsIssueBody, async (trx, tenant, now, b, origin) => {
    await svc.checkUser(trx, tenant, b.ToUserUid, 'ToUserUid');
    const issue = await svc.createIn(trx, tenant, { typeCode: 'ReceivePupShipment', flow: 'issue', fromUserUid: tenant.mainAccountUid, toUserUid: b.ToUserUid, details: details(b.Details), dimension: b.Dimension, booking: booking(b), origin }, now);
    return [issue.row.uid];
  });

  flow('CreateLocalShipmentAsIssueAndSwapIntake', 'Issue to a user plus an intake from that user swapping it (same locker visit)', S.AsIssueAndSwapIntakeBody, async (trx, tenant, now, b, origin) => {
    await svc.checkUser(trx, tenant, b.ToUserUid, 'ToUserUid');
    const issue = await svc.createIn(trx, tenant, { typeCode: 'ReceivePupShipment', flow: 'issue', fromUserUid: tenant.mainAccountUid, toUserUid: b.ToUserUid, details: details(b.Details), dimension: b.Dimension, booking: booking(b), origin }, now);
    const intake = await svc.createIn(
      trx,
      tenant,
      { typeCode: 'DispatchPupShipment', flow: 'intake', fromUserUid: b.ToUserUid, toUserUid: tenant.mainAccountUid, details: details(b.Return), dimension: b.Dimension, waitOn: { row: issue.row, kind: 'swap' }, swapsShipmentUid: issue.row.uid, priorShipmentUid: issue.row.uid, origin },
      now,
    );
    return [issue.row.uid, intake.row.uid];
  });

  flow('CreateLocalShipmentAsStock', 'Stock: an item stored without a receiver', S.AsStockBody, async (trx, tenant, now, b, origin) => {
    const stock = await svc.createIn(trx, tenant, { typeCode: 'ReceivePupShipment', flow: 'stock', fromUserUid: tenant.mainAccountUid, toUserUid: null, receiverDelayed: true, details: details(b.Details), dimension: b.Dimension, booking: booking(b), origin }, now);
    return [stock.row.uid];
  });

  flow('CreateLocalShipmentAsStockAfterSwapIntake', 'Stock dropped off when an intake is collected (swap on the intake)', S.AsStockAfterSwapIntakeBody, async (trx, tenant, now, b, origin) => {
    const intake = await svc.own(trx, tenant, b.PriorShipmentUid, 'PriorShipmentUid');
    if (intake.flow !== 'intake') throw new ApiError('InvalidShipment', `PriorShipmentUid: ${intake.uid} is not an intake shipment`);
    const stock = await svc.createIn(
      trx,
      tenant,
      { typeCode: 'ReceivePupShipment', flow: 'stock', fromUserUid: tenant.mainAccountUid, toUserUid: null, receiverDelayed: true, details: details(b.Details), dimension: b.Dimension, waitOn: { row: intake, kind: 'swap' }, swapsShipmentUid: intake.uid, priorShipmentUid: intake.uid, origin },
      now,
    );
    return [stock.row.uid];
  });

  flow('CreateLocalShipmentAsIssueFromStock', 'Issue a stock shipment to a user (sets its receiver)', S.AsIssueFromStockBody, async (trx, tenant, now, b, origin) => {
    const stock = await issueFromStock(trx, tenant, now, b.PriorShipmentUid, b.ToUserUid, b.Issue?.ReferenceCaseNo, origin);
    return [stock.uid];
  });

  flow('CreateLocalShipmentAsIssueFromStockAndSwapIntake', 'Issue a stock shipment to a user plus an intake from that user swapping it', S.AsIssueFromStockAndSwapIntakeBody, async (trx, tenant, now, b, origin) => {
    const stock = await issueFromStock(trx, tenant, now, b.PriorShipmentUid, b.ToUserUid, b.Issue?.ReferenceCaseNo, origin);
    const intake = await svc.createIn(
      trx,
      tenant,
      { typeCode: 'DispatchPupShipment', flow: 'intake', fromUserUid: b.ToUserUid, toUserUid: tenant.mainAccountUid, details: details(b.Return), dimension: dims(stock), waitOn: { row: stock, kind: 'swap' }, swapsShipmentUid: stock.uid, priorShipmentUid: stock.uid, origin },
      now,
    );
    return [stock.uid, intake.row.uid];
  });

  flow('CreateLocalShipmentAsIntake', 'Intake: a user returns an item to the dispatcher', S.AsIntakeBody, async (trx, tenant, now, b, origin) => {
    await svc.checkUser(trx, tenant, b.FromUserUid, 'FromUserUid');
    const intake = await svc.createIn(trx, tenant, { typeCode: 'DispatchPupShipment', flow: 'intake', fromUserUid: b.FromUserUid, toUserUid: tenant.mainAccountUid, details: details(b.Details), dimension: b.Dimension, booking: booking(b), origin }, now);
    return [intake.row.uid];
  });

  flow('CreateLocalShipmentAsIntakeAndCircularStock', 'Intake plus a circular stock shipment: the returned item becomes stock again', S.AsIntakeBody, async (trx, tenant, now, b, origin) => {
    await svc.checkUser(trx, tenant, b.FromUserUid, 'FromUserUid');
    const intake = await svc.createIn(trx, tenant, { typeCode: 'DispatchPupShipment', flow: 'intake', fromUserUid: b.FromUserUid, toUserUid: tenant.mainAccountUid, details: details(b.Details), dimension: b.Dimension, booking: booking(b), origin }, now);
    const stock = await svc.createIn(
      trx,
      tenant,
      { typeCode: 'ReceivePupShipment', flow: 'circularStock', fromUserUid: tenant.mainAccountUid, toUserUid: null, receiverDelayed: true, details: details(b.Details), dimension: b.Dimension, waitOn: { row: intake.row, kind: 'circular' }, priorShipmentUid: intake.row.uid, origin },
      now,
    );
    return [intake.row.uid, stock.row.uid];
  });

  flow(
    'CreateLocalShipmentAsIssueFromStockAndSubsequentIntakeAndCircularStock',
    'Issue a stock shipment, then an intake from the same user in the same locker, then circular stock',
    S.AsSubsequentBody,
    async (trx, tenant, now, b, origin) => {
      const stock = await issueFromStock(trx, tenant, now, b.PriorShipmentUid, b.ToUserUid, b.Issue?.ReferenceCaseNo ?? b.ReferenceCaseNo, origin);
      const intake = await svc.createIn(
        trx,
        tenant,
        {
          typeCode: 'DispatchPupShipment',
          flow: 'intake',
          fromUserUid: b.ToUserUid,
          toUserUid: tenant.mainAccountUid,
          details: hasDetails(b.Return) ? details(b.Return) : rowDetails(stock),
          dimension: dims(stock),
          waitOn: { row: stock, kind: 'subsequent' },
          priorShipmentUid: stock.uid,
          origin,
        },
        now,
      );
      const circular = await svc.createIn(
        trx,
        tenant,
        {
          typeCode: 'ReceivePupShipment',
          flow: 'circularStock',
          fromUserUid: tenant.mainAccountUid,
          toUserUid: null,
          receiverDelayed: true,
          details: hasDetails(b.Details) ? details(b.Details) : rowDetails(stock),
          dimension: dims(stock),
          waitOn: { row: intake.row, kind: 'circular' },
          priorShipmentUid: intake.row.uid,
          origin,
        },
        now,
      );
      return [stock.uid, intake.row.uid, circular.row.uid];
    },
  );

  flow('CreateCollectOnlyShipmentAsCollectByDispatcher', 'Collect-only: the dispatcher collects', S.CollectByDispatcherBody, async (trx, tenant, now, b, origin) => {
    const r = await svc.createIn(
      trx,
      tenant,
      { typeCode: 'CollectOnlyShipment', flow: 'collectByDispatcher', fromUserUid: null, toUserUid: tenant.mainAccountUid, keepBooked: b.KeepBookedAfterPickUp, details: details(b.Details), dimension: b.Dimension, booking: booking(b), origin },
      now,
    );
    return [r.row.uid];
  });

  flow('CreateCollectOnlyShipmentAsCollectByUser', 'Collect-only: a user collects', S.CollectByUserBody, async (trx, tenant, now, b, origin) => {
    await svc.checkUser(trx, tenant, b.ToUserUid, 'ToUserUid');
    const r = await svc.createIn(
      trx,
      tenant,
      { typeCode: 'CollectOnlyShipment', flow: 'collectByUser', fromUserUid: null, toUserUid: b.ToUserUid, keepBooked: b.KeepBookedAfterPickUp, details: details(b.Details), dimension: b.Dimension, booking: booking(b), origin },
      now,
    );
    return [r.row.uid];
  });
}
