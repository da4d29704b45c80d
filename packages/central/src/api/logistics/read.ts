// Reading shipments: the five GetShipments endpoints, objects, swaps, access codes, history.
import type { FastifyInstance } from 'fastify';
import type { z } from 'zod';
import type { AppContext } from '../../context';
import { ApiError } from '../../errors';
import { pageInfo } from '../../http/envelope';
import { v1Post } from '../../http/route';
import { parseApiTime, toDbTime } from '../../ids';
import { accessCodes, history, listObjects, listShipments, listSwapsWith, shipmentOfTenant } from '../../shipments/queries';
import type { TypeCode } from '../../shipments/types';
import * as S from './schemas';

const TAGS = ['Logistics'];

const LISTS: [string, TypeCode | null, string][] = [
  ['GetLocalShipments', 'LocalPupShipment', 'local shipments (LocalPupShipment)'],
  ['GetReceiveShipments', 'ReceivePupShipment', 'receive shipments (ReceivePupShipment: issue, stock, circular stock)'],
  ['GetDispatchShipments', 'DispatchPupShipment', 'dispatch shipments (DispatchPupShipment: intake)'],
  ['GetCollectOnlyShipments', 'CollectOnlyShipment', 'collect-only shipments (CollectOnlyShipment)'],
  ['GetShipments', null, 'shipments of every type'],
];

export async function readRoutes(app: FastifyInstance, ctx: AppContext): Promise<void> {
  const env = { environment: ctx.config.environment };
  const db = ctx.db.kysely;

  for (const [name, typeCode, what] of LISTS) {
    v1Post(
      app,
      {
        path: `/v1/Logistics/${name}`,
        summary: `List ${what}, filtered and sorted, one page`,
        tags: TAGS,
        body: S.GetShipmentsBody,
        response: S.ShipmentsPage,
        handler: async (b: z.infer<typeof S.GetShipmentsBody>, req) => {
          if (b.shipmentUid) {
            if (b.pageNo !== 1) throw new ApiError('InvalidRequest', 'pageNo: must be 1 when shipmentUid is given');
          } else if (b.activeShipments == null && !(b.shipmentState && b.shipmentState.length)) {
            throw new ApiError('InvalidRequest', 'activeShipments: one of activeShipments or shipmentState is required');
          }
          let since: string | null = null;
          if (b.updatedSince) {
            const d = parseApiTime(b.updatedSince);
            if (!d) throw new ApiError('InvalidRequest', 'updatedSince: not an ISO 8601 timestamp');
            since = toDbTime(d);
          }
          const r = await listShipments(ctx.db, {
            tenantUid: req.tenant.uid,
            typeCode,
            active: b.activeShipments ?? null,
            // each state once: a body may repeat them (the IN list stays within database limits)
            states: b.shipmentState ? [...new Set(b.shipmentState)] : null,
            userUid: b.userUid ?? null,
            bookedPupUid: b.bookedPupUid ?? null,
            shipmentUid: b.shipmentUid ?? null,
            updatedSince: since,
            sortBy: b.sortBy ?? 'CreatedDesc',
            pageNo: b.pageNo,
            pageSize: b.pageSize,
          });
          return { items: r.items as z.input<typeof S.ShipmentItem>[], ...pageInfo(b.pageNo, b.pageSize, r.totalItems) };
        },
      },
      env,
    );
  }

  const own = async (tenantUid: string, uid: string) => {
    const row = await shipmentOfTenant(db, tenantUid, uid);
    if (!row) throw new ApiError('InvalidShipment', `shipmentUid: unknown shipment ${uid}`);
    return row;
  };

  v1Post(
    app,
    {
      path: '/v1/Logistics/GetShipmentObjects',
      summary: 'List the objects attached to a shipment',
      tags: TAGS,
      body: S.GetObjectsBody,
      response: S.ObjectsPage,
      handler: async (b, req) => {
        const row = await own(req.tenant.uid, b.shipmentUid);
        const pageNo = b.pageNo ?? 1;
        const pageSize = b.pageSize ?? 500;
        const r = await listObjects(db, row.uid, pageNo, pageSize);
        return { shipmentUid: row.uid, items: r.items, ...pageInfo(pageNo, pageSize, r.totalItems) };
      },
    },
    env,
  );

  v1Post(
    app,
    {
      path: '/v1/Logistics/GetShipmentSwaps',
      summary: 'The shipment this one swaps, and the shipments swapping it',
      tags: TAGS,
      body: S.GetSwapsBody,
      response: S.SwapsResponse,
      handler: async (b, req) => {
        const row = await own(req.tenant.uid, b.shipmentUid);
        const r = await listSwapsWith(db, req.tenant.uid, row.uid, b.pageNo, b.pageSize);
        return { shipmentUid: row.uid, swapsShipmentUid: row.swaps_shipment_uid ?? null, swapWithShipments: r.uids, ...pageInfo(b.pageNo, b.pageSize, r.totalItems) };
      },
    },
    env,
  );

  v1Post(
    app,
    {
      path: '/v1/Logistics/GetShipmentAccessConfig',
      summary: 'Access codes of a shipment: valid drop-off and pick-up codes (PIN and Qr), link codes newest (valid) first',
      tags: TAGS,
      body: S.GetAccessConfigBody,
      response: S.AccessConfigResponse,
      handler: async (b, req) => {
        const row = await own(req.tenant.uid, b.shipmentUid);
        return { items: await accessCodes(db, row.uid, b.usage ?? null) };
      },
    },
    env,
  );

  v1Post(
    app,
    {
      path: '/v1/Logistics/GetShipmentHistory',
      summary: 'Extension: the stored transitions of a shipment with cause and time (audit trail)',
      tags: TAGS,
      body: S.ShipmentUidBody,
      response: S.HistoryResponse,
      handler: async (b, req) => {
        const row = await own(req.tenant.uid, b.shipmentUid);
        return { shipmentUid: row.uid, items: await history(db, row.uid) };
      },
    },
    env,
  );
}
