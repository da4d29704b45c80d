// Tables of the shipments area (migration 200_shipments).

export interface ShipmentsTable {
  uid: string;
  tenant_uid: string;
  /** LocalPupShipment | ReceivePupShipment | DispatchPupShipment | CollectOnlyShipment */
  type_code: string;
  /** local | issue | intake | stock | circularStock | collectByDispatcher | collectByUser */
  flow: string;
  state_code: string;
  /** 1 while the state is active (ReadyForDropoff, LockerAssigned, WaitForReceiver, ReadyForPickup) */
  active: 0 | 1;
  state_start: string;
  created_at: string;
  /** time of the last change of any kind (state, details, receiver, objects): updatedSince / Activity sort */
  updated_at: string;
  reference_no: string | null;
  reference_case_no: string | null;
  description: string | null;
  from_user_uid: string | null;
  to_user_uid: string | null;
  /** JSON text {name, street, mailbox, city, countryIso2} or null */
  from_address: string | null;
  to_address: string | null;
  receiver_delayed: 0 | 1;
  keep_booked: 0 | 1;
  pup_uid: string;
  /** the locker assigned to the shipment (held by it, or by the shipment it waits on) */
  locker_uid: string | null;
  width: number;
  height: number;
  length: number;
  swaps_shipment_uid: string | null;
  prior_shipment_uid: string | null;
  /** LockerAssigned: the shipment holding the locker that this one waits on, and how */
  waits_on_uid: string | null;
  wait_kind: string | null;
  /** ReadyForDropoff: when the booking expires (null: no deadline) */
  drop_off_deadline: string | null;
  /** transitions stored so far (the seq of the last one) */
  seq: number;
  /** Expired: the drop-off deadline it missed (migration 204; the expiry race, docs/state-machine.md) */
  missed_deadline: string | null;
}

/** The audit trail: one row per state entered, with its cause. */
export interface ShipmentTransitionsTable {
  shipment_uid: string;
  seq: number;
  tenant_uid: string;
  from_state: string | null;
  to_state: string;
  /** api | door | simulate | clock */
  cause: string;
  /** e.g. the endpoint name, or "swap: <uid> picked up" for a chained transition */
  detail: string | null;
  /** when the state was entered: for a door event the (skew-corrected) time at the door */
  at: string;
  /** when the central service recorded it (migration 204; null on older rows, where it equals at) */
  received_at?: string | null;
}

export interface ShipmentObjectsTable {
  uid: string;
  shipment_uid: string;
  reference_no: string | null;
  description: string | null;
  weight: number;
  count: number;
  width: number;
  height: number;
  length: number;
  object_type_uid: string | null;
  /** order of addition within the shipment */
  ord: number;
  created_at: string;
}

/**
 * Access codes, kept so a terminal can validate them offline (the edge sync pushes this table).
 * `shared` = 1 marks a copy of another shipment's code (a swap's drop-off code equals the swapped
 * shipment's pick-up code): copies are exempt from the per-PUP PIN uniqueness index.
 */
export interface AccessCodesTable {
  uid: string;
  shipment_uid: string;
  tenant_uid: string;
  pup_uid: string;
  locker_uid: string | null;
  /** DropOff | PickUp | LinkCode */
  usage: string;
  /** Code | Qr */
  type: string;
  value: string;
  valid: 0 | 1;
  shared: 0 | 1;
  created_at: string;
  invalidated_at: string | null;
}

/** Failed pinCode attempts at UnlockShipmentLocker (throttling). */
export interface UnlockFailuresTable {
  /** '' for a wrong PIN that matched no shipment (SimulateLockerAccess) */
  shipment_uid: string;
  at: string;
  /** migration 406: what a wrong PIN counts against besides its shipment (null on older rows) */
  tenant_uid: string | null;
  pup_uid: string | null;
  locker_uid: string | null;
}

export interface ShipmentTables {
  shipments: ShipmentsTable;
  shipment_transitions: ShipmentTransitionsTable;
  shipment_objects: ShipmentObjectsTable;
  access_codes: AccessCodesTable;
  unlock_failures: UnlockFailuresTable;
}
