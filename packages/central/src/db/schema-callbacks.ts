// Tables of the callbacks area: each tenant's callback registration, the durable outbox of
// status messages, and the Idempotency-Key store of create and cancel calls.

/** One row per tenant that ever configured callbacks. */
export interface CallbackConfigsTable {
  tenant_uid: string;
  /** http(s) URL the messages are POSTed to; null = callbacks disabled */
  url: string | null;
  /** None | HMAC | ApiKey */
  auth_type: string;
  /** the shared secret (HMAC key or API key). Kept in the clear: it is needed to sign. Never logged. */
  auth_key: string | null;
  created_at: string;
  updated_at: string;
}

/** The outbox: one row per message, written in the transaction of the state change. */
export interface CallbackOutboxTable {
  /** the message's eventId (32 hex); primary key */
  event_id: string;
  tenant_uid: string;
  shipment_uid: string;
  /** 1, 2, 3 ... per shipment, in the order the states changed */
  sequence: number;
  message_type: string;
  /** the exact JSON body sent on every attempt */
  payload: string;
  /** pending (to deliver) | delivered (a 2xx was received) | skipped (no callback URL when queued or when due) */
  status: string;
  attempts: number;
  next_attempt_at: string;
  /** a worker that claimed the row owns it until then (several central instances on one database) */
  lease_until: string | null;
  lease_owner: string | null;
  last_status: number | null;
  last_error: string | null;
  created_at: string;
  delivered_at: string | null;
}

/** Idempotency-Key reservations and the stored answers (per tenant). */
export interface IdempotencyKeysTable {
  tenant_uid: string;
  idem_key: string;
  /** sha256 of method, route and the normalized JSON body */
  request_hash: string;
  /** pending (the first request is running) | done (response_* hold its answer) | unknown (it ran; its answer could not be stored: a repeat is refused) */
  status: string;
  /** a pending reservation older than this is abandoned (its process died) and can be taken over */
  locked_until: string;
  response_status: number | null;
  response_body: string | null;
  response_type: string | null;
  created_at: string;
  expires_at: string;
}

export interface CallbackTables {
  callback_configs: CallbackConfigsTable;
  callback_outbox: CallbackOutboxTable;
  idempotency_keys: IdempotencyKeysTable;
}
