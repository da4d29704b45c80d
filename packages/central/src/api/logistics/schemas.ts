// Request and response schemas of the Logistics endpoints (the API document's field names; keys
// are matched case-insensitively by v1Post, so PupUid and pupUid both work).
import { z } from 'zod';
import { Dimension, envelope, optBool, optStr, paged, pagingRequestShape } from '../../http/envelope';
import { STATES } from '../../shipments/types';

export const DetailsObject = z.object({ ReferenceNo: optStr(), ReferenceCaseNo: optStr(), Description: optStr() }).nullish();
export const IssueObject = z.object({ ReferenceCaseNo: optStr() }).nullish();

const uidStr = () => z.string().min(1).max(64);
const optUid = () => uidStr().nullish();

export const bookingShape = {
  PupUid: uidStr(),
  Dimension,
  AllowLargerLockers: z.boolean(),
  AllowOverflowLockers: z.boolean(),
  LockerUid: optUid(),
};

export const CreateLocalShipmentBody = z.object({
  FromUserUid: optUid(),
  ToUserUid: optUid(),
  ...bookingShape,
  ReferenceNo: optStr(),
  ReferenceCaseNo: optStr(),
  Description: optStr(),
  IsReceiverDelayed: optBool(),
  SwapsShipmentUid: optUid(),
});

export const CreateCollectOnlyBody = z.object({
  ...bookingShape,
  KeepBookedAfterPickUp: z.boolean(),
  ToUserUid: optUid(),
  Details: DetailsObject,
});

export const AsIssueBody = z.object({ ...bookingShape, ToUserUid: uidStr(), Details: DetailsObject });
export const AsIssueAndSwapIntakeBody = z.object({ ...bookingShape, ToUserUid: uidStr(), Details: DetailsObject, Return: DetailsObject });
export const AsStockBody = z.object({ ...bookingShape, Details: DetailsObject });
export const AsStockAfterSwapIntakeBody = z.object({ PriorShipmentUid: uidStr(), Dimension, Details: DetailsObject });
export const AsIssueFromStockBody = z.object({ PriorShipmentUid: uidStr(), ToUserUid: uidStr(), Issue: IssueObject });
export const AsIssueFromStockAndSwapIntakeBody = z.object({ PriorShipmentUid: uidStr(), ToUserUid: uidStr(), Issue: IssueObject, Return: DetailsObject });
export const AsIntakeBody = z.object({ ...bookingShape, FromUserUid: uidStr(), Details: DetailsObject });
export const AsSubsequentBody = z.object({
  PriorShipmentUid: uidStr(),
  ToUserUid: uidStr(),
  Issue: IssueObject,
  Return: DetailsObject,
  Details: DetailsObject,
  ReferenceCaseNo: optStr(),
});
export const CollectByDispatcherBody = z.object({ ...bookingShape, KeepBookedAfterPickUp: z.boolean(), Details: DetailsObject });
export const CollectByUserBody = z.object({ ...bookingShape, ToUserUid: uidStr(), KeepBookedAfterPickUp: z.boolean(), Details: DetailsObject });

export const SingleShipmentResponse = envelope({ shipmentUid: z.string(), pupUid: z.string(), lockerName: z.string().nullable() });
export const ShipmentUidsResponse = envelope({ shipmentUids: z.array(z.string()) });
export const EmptyResponse = envelope({});

// ---- managing ----

const INT32_MAX = 2_147_483_647;

export const ShipmentUidBody = z.object({ shipmentUid: uidStr() });
export const SetDetailsBody = z.object({ shipmentUid: uidStr(), Description: optStr(), ReferenceNo: optStr(), ReferenceCaseNo: optStr() });
export const ObjectDetails = z.object({
  referenceNo: optStr(),
  description: optStr(),
  // stored as 32-bit integers on both engines
  weight: z.number().int().min(0).max(INT32_MAX),
  count: z.number().int().min(1).max(INT32_MAX),
  dimension: Dimension,
  objectTypeUid: optStr(),
});
export const AddObjectBody = z.object({ shipmentUid: uidStr(), details: ObjectDetails, changePickUpAccess: optBool(), changeDropOffAccess: optBool() });
export const ObjectRefResponse = envelope({ shipmentUid: z.string(), shipmentObjectUid: z.string() });
export const RemoveObjectBody = z.object({ shipmentUid: uidStr(), shipmentObjectUid: uidStr() });
// removeReceiver true: toUserUid is ignored (the API document), so its value is checked only when
// the receiver is set; it must still be a string or null (the documented type).
export const SetReceiverBody = z
  .object({
    shipmentUid: uidStr(),
    toUserUid: z.string().nullish().describe('the new receiver (1 to 64 characters); ignored when removeReceiver is true'),
    caseReferenceNew: optStr(),
    removeReceiver: optBool(),
  })
  .superRefine((b, ctx) => {
    if (b.removeReceiver || b.toUserUid == null) return;
    if (!uidStr().safeParse(b.toUserUid).success) ctx.addIssue({ code: 'custom', path: ['toUserUid'], message: 'must be 1 to 64 characters (unless removeReceiver is true)' });
  });
export const SimulateBody = z.object({ pupUid: uidStr(), lockerName: z.string().min(1), pinCode: z.string().min(1) });
export const UnlockBody = z.object({ shipmentUid: uidStr(), unlockGoal: z.enum(['DropOff', 'PickUp']).nullish(), pinCode: optStr() });

// ---- reading ----

export const Address = z.object({ name: z.string().optional(), street: z.string().optional(), mailbox: z.string().optional(), city: z.string().optional(), countryIso2: z.string().optional() });

export const ShipmentItem = z.object({
  shipmentUid: z.string(),
  dateCreated: z.string(),
  typeCode: z.string(),
  stateStart: z.string(),
  stateCode: z.string(),
  referenceNo: z.string().optional(),
  referenceCaseNo: z.string().optional(),
  description: z.string().optional(),
  fromUserName: z.string().optional(),
  fromUserUid: z.string().optional(),
  fromAddress: Address.optional(),
  toUserName: z.string().optional(),
  toUserUid: z.string().optional(),
  toAddress: Address.optional(),
  swapsShipmentUid: z.string().nullable(),
  bookedPupName: z.string().nullable(),
  bookedPupUid: z.string().nullable(),
  bookedLockerName: z.string().nullable(),
});

export const SORTS = ['CreatedAsc', 'CreatedDesc', 'ActivityAsc', 'ActivityDesc'] as const;

export const GetShipmentsBody = z.object({
  ...pagingRequestShape,
  activeShipments: optBool(),
  shipmentState: z.array(z.enum(STATES)).nullish(),
  userUid: optUid(),
  bookedPupUid: optUid(),
  shipmentUid: optUid(),
  updatedSince: z.string().min(1).nullish(),
  sortBy: z.enum(SORTS).nullish(),
});
export const ShipmentsPage = paged(ShipmentItem);

export const ShipmentObjectItem = z.object({
  shipmentObjectUid: z.string(),
  referenceNo: z.string(),
  description: z.string(),
  weight: z.number().int(),
  count: z.number().int(),
  dimension: z.object({ width: z.number(), height: z.number(), length: z.number() }),
  objectTypeUid: z.string().optional(),
});
export const GetObjectsBody = z.object({ shipmentUid: uidStr(), pageNo: z.number().int().min(1).nullish(), pageSize: z.number().int().min(1).max(500).nullish() });
export const ObjectsPage = paged(ShipmentObjectItem, { shipmentUid: z.string() });

export const GetSwapsBody = z.object({ ...pagingRequestShape, shipmentUid: uidStr() });
export const SwapsResponse = envelope({
  shipmentUid: z.string(),
  swapsShipmentUid: z.string().nullable(),
  swapWithShipments: z.array(z.string()),
  pageNo: z.number().int(),
  pageSize: z.number().int(),
  totalItems: z.number().int(),
  totalPages: z.number().int(),
});

export const AccessCodeItem = z.object({ usage: z.enum(['DropOff', 'PickUp', 'LinkCode']), type: z.enum(['Code', 'Qr']), value: z.string() });
export const GetAccessConfigBody = z.object({ shipmentUid: uidStr(), usage: z.enum(['DropOff', 'PickUp', 'LinkCode']).nullish() });
export const AccessConfigResponse = envelope({ items: z.array(AccessCodeItem) });

export const HistoryItem = z.object({ seq: z.number().int(), fromState: z.string().nullable(), toState: z.string(), cause: z.string(), detail: z.string().nullable(), at: z.string() });
export const HistoryResponse = envelope({ shipmentUid: z.string(), items: z.array(HistoryItem) });
