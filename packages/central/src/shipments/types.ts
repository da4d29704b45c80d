// Shipment vocabulary shared by the state machine, the service, the store and the API.

export const STATES = ['ReadyForDropoff', 'LockerAssigned', 'WaitForReceiver', 'ReadyForPickup', 'PickedUp', 'Cancelled', 'Expired'] as const;
export type StateCode = (typeof STATES)[number];

export const ACTIVE_STATES: readonly StateCode[] = ['ReadyForDropoff', 'LockerAssigned', 'WaitForReceiver', 'ReadyForPickup'];
export const INACTIVE_STATES: readonly StateCode[] = ['PickedUp', 'Cancelled', 'Expired'];
export const isActive = (s: StateCode): boolean => ACTIVE_STATES.includes(s);

/**
 * typeCode of a shipment. The query endpoints filter by these:
 * GetLocalShipments -> LocalPupShipment, GetReceiveShipments -> ReceivePupShipment (the user
 * receives: issue, stock, circular stock), GetDispatchShipments -> DispatchPupShipment (the user
 * dispatches: intake), GetCollectOnlyShipments -> CollectOnlyShipment, GetShipments -> all.
 */
export const TYPE_CODES = ['LocalPupShipment', 'ReceivePupShipment', 'DispatchPupShipment', 'CollectOnlyShipment'] as const;
export type TypeCode = (typeof TYPE_CODES)[number];

/** How a shipment came to be (stored; shown in docs, used by chained rules). */
export type Flow = 'local' | 'issue' | 'intake' | 'stock' | 'circularStock' | 'collectByDispatcher' | 'collectByUser';

/**
 * A shipment in LockerAssigned waits on another shipment that holds its locker:
 * - swap: when that one is picked up, this one's drop-off is assumed (rule 7);
 * - subsequent: when that one is picked up, this one becomes ReadyForDropoff in the same locker;
 * - circular: when that one (an intake) is dropped off, its item becomes this stock shipment's
 *   item and this one is ReadyForPickup (rule 8).
 */
export type WaitKind = 'swap' | 'subsequent' | 'circular';

export type CodeUsage = 'DropOff' | 'PickUp' | 'LinkCode';
export type CodeType = 'Code' | 'Qr';

/** Root cause of every stored transition (product.md). */
export type Cause = 'api' | 'door' | 'simulate' | 'clock';
