// /v1/PickupPoints/: pick up points, their lockers, locker kinds and availability (read only).
// Every call is scoped to the calling tenant's PUPs; a pupUid the tenant does not manage answers
// like an unknown one (InvalidPupUid, 400) — see docs/api.md.
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { AppContext } from '../context';
import { Dimension, optBool, optStr, pageInfo, paged, pagingRequestShape } from '../http/envelope';
import { v1Post } from '../http/route';
import { PickupPointQueries } from '../pickup-points/queries';

const TAGS = ['Pick up points'];

const pupUidField = z.string().min(1).max(128).describe('uid of a pick up point the caller manages');

export const PupAddress = z.object({ streetName: z.string(), mailbox: z.string(), city: z.string(), countryIso2: z.string() });

export const PickUpPoint = z.object({
  pupUid: z.string(),
  name: z.string(),
  timeZone: z.string().optional().describe('time zone code; omitted when not configured'),
  locationAddress: PupAddress.optional().describe('only with includeDetails=true'),
  deliveryAddress: PupAddress.optional().describe('only with includeDetails=true'),
  parkingAddress: PupAddress.nullable().optional().describe('only with includeDetails=true; null when none'),
  externalReference: z.string().optional().describe('only with includeDetails=true; "" when none was provisioned'),
});

export const Locker = z.object({ pupUid: z.string(), lockerUid: z.string(), name: z.string(), dimension: Dimension });

export const LockerKind = z.object({
  sizeCode: z.string().describe('size name code, or the dimension as [Height]x[Width]x[Length] when the locker has none'),
  typeCode: z.string(),
  dimension: Dimension,
});

const SizeAvailability = z.object({ name: z.string(), freeLockers: z.number().int(), occupiedLockers: z.number().int(), totalLockers: z.number().int() });

export const PupAvailability = z.object({
  pupUid: z.string(),
  freeLockers: z.number().int(),
  occupiedLockers: z.number().int(),
  totalLockers: z.number().int(),
  availabilityBySize: z.array(SizeAvailability),
});

const GetPickUpPointsRequest = z.object({
  ...pagingRequestShape,
  pupUid: optStr().describe('only this pick up point'),
  includeDetails: optBool().describe('include addresses and external reference (default false)'),
  searchText: z.string().max(200).nullish().describe('every word must occur in the name or the location address (case-insensitive)'),
});

const PupPagedRequest = z.object({ ...pagingRequestShape, pupUid: pupUidField });

const GetLockerKindsRequest = z.object({
  pupUid: pupUidField,
  pageNo: pagingRequestShape.pageNo.nullish().describe('default 1'),
  pageSize: pagingRequestShape.pageSize.nullish().describe('default 500'),
});

export async function pickupPointRoutes(app: FastifyInstance, ctx: AppContext): Promise<void> {
  const q = new PickupPointQueries(ctx.db);
  const env = { environment: ctx.config.environment };

  v1Post(
    app,
    {
      path: '/v1/PickupPoints/GetPickUpPoints',
      summary: "The caller's pick up points",
      description: 'Paginated list of the pick up points the calling tenant manages, by name. Addresses and the external reference only with includeDetails=true.',
      tags: TAGS,
      body: GetPickUpPointsRequest,
      response: paged(PickUpPoint),
      handler: async (b, req) => {
        const page = await q.listPickUpPoints(req.tenant.uid, b);
        return { items: page.items, ...pageInfo(b.pageNo, b.pageSize, page.totalItems) };
      },
    },
    env,
  );

  v1Post(
    app,
    {
      path: '/v1/PickupPoints/GetPickUpPointAvailability',
      summary: 'Free, occupied and total lockers of a pick up point, overall and by size',
      description: 'Counts lockers in service; a size is named by its size code or [Height]x[Width]x[Length]. One item per call (the requested PUP), paginated.',
      tags: TAGS,
      body: PupPagedRequest,
      response: paged(PupAvailability),
      handler: async (b, req) => {
        const item = await q.availability(req.tenant.uid, b.pupUid);
        const items = b.pageNo === 1 ? [item] : [];
        return { items, ...pageInfo(b.pageNo, b.pageSize, 1) };
      },
    },
    env,
  );

  v1Post(
    app,
    {
      path: '/v1/PickupPoints/GetLockers',
      summary: 'All lockers of a pick up point',
      tags: TAGS,
      body: PupPagedRequest,
      response: paged(Locker),
      handler: async (b, req) => {
        const page = await q.listLockers(req.tenant.uid, b);
        // items are objects or their JSON written by the database (JsonText, pickup-points/queries.ts)
        return { items: page.items as z.input<typeof Locker>[], ...pageInfo(b.pageNo, b.pageSize, page.totalItems) };
      },
    },
    env,
  );

  v1Post(
    app,
    {
      path: '/v1/PickupPoints/GetAvailableLockers',
      summary: 'Free lockers of a pick up point (usable as LockerUid when booking)',
      tags: TAGS,
      body: PupPagedRequest,
      response: paged(Locker),
      handler: async (b, req) => {
        const page = await q.listAvailableLockers(req.tenant.uid, b);
        // items are objects or their JSON written by the database (JsonText, pickup-points/queries.ts)
        return { items: page.items as z.input<typeof Locker>[], ...pageInfo(b.pageNo, b.pageSize, page.totalItems) };
      },
    },
    env,
  );

  v1Post(
    app,
    {
      path: '/v1/PickupPoints/GetLockerKinds',
      summary: 'Distinct locker kinds (size, type, dimension) of a pick up point',
      description: 'pageNo and pageSize are optional here (default 1 and 500); the response carries the paging fields.',
      tags: TAGS,
      body: GetLockerKindsRequest,
      response: paged(LockerKind),
      handler: async (b, req) => {
        const kinds = await q.lockerKinds(req.tenant.uid, b.pupUid);
        const pageNo = b.pageNo ?? 1;
        const pageSize = b.pageSize ?? 500;
        return { items: kinds.slice((pageNo - 1) * pageSize, pageNo * pageSize), ...pageInfo(pageNo, pageSize, kinds.length) };
      },
    },
    env,
  );
}
