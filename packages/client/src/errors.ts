// The API's envelope errors as typed errors. Every answer of the tenant API carries the envelope
// { success, error, message } (docs/api.md); a failed call becomes a LockerApiError whose `code`
// is the envelope's `error`. /connect/token answers OAuth 2 errors (invalid_client, ...) with the
// same envelope fields, so token failures surface the same way.

/** The error codes of the tenant API (docs/api.md "Error codes and HTTP status"). */
export const API_ERROR_CODES = [
  'InvalidRequest',
  'Unauthorized',
  'NotFound',
  'RateLimited',
  'InternalError',
  'InvalidPupUid',
  'InvalidShipment',
  'InvalidShipmentState',
  'UnlockNotAllowed',
  'InvalidAccessCode',
  'UnlockFailed',
  'NoLockerAvailable',
  'InvalidUserUid',
  'EmailAlreadyRegistered',
  'AccessDenied',
  'MutationConfigFailed',
  'AccountInUse',
  'MissingFile',
  'InvalidHeader',
  'InvalidImportType',
  'NoRequestData',
  'NoRequestFile',
  'IdempotencyKeyReused',
  'IdempotencyKeyInProgress',
  'IdempotencyKeyOutcomeUnknown',
] as const;

/** The OAuth 2 error codes of POST /connect/token (docs/api.md "Authentication"). */
export const TOKEN_ERROR_CODES = ['invalid_request', 'unsupported_grant_type', 'invalid_client', 'invalid_scope', 'slow_down', 'temporarily_unavailable'] as const;

/** Raised by this client, not the service: an answer that is not the API's envelope (a proxy's HTML page, ...). */
export const CLIENT_ERROR_CODES = ['UnexpectedResponse'] as const;

export type ApiErrorCode = (typeof API_ERROR_CODES)[number];
export type TokenErrorCode = (typeof TOKEN_ERROR_CODES)[number];
export type ClientErrorCode = (typeof CLIENT_ERROR_CODES)[number];
/** A known code, or any other string a newer service may send. */
export type ErrorCode = ApiErrorCode | TokenErrorCode | ClientErrorCode | (string & {});

export class LockerApiError extends Error {
  override readonly name = 'LockerApiError';
  constructor(
    /** the envelope's `error` (e.g. `InvalidShipment`, `Unauthorized`, `invalid_client`) */
    readonly code: ErrorCode,
    message: string,
    /** the HTTP status */
    readonly status: number,
    /** the `x-request-id` of the answer (an operator finds the service's log line with it) */
    readonly requestId: string | null = null,
    /** seconds from `Retry-After` (RateLimited, IdempotencyKeyInProgress, slow_down, ...) */
    readonly retryAfterSeconds: number | null = null,
    /** the parsed answer body */
    readonly body: unknown = null,
  ) {
    super(message);
  }

  /** Narrows to one code: `if (err instanceof LockerApiError && err.is('NoLockerAvailable'))`. */
  is<C extends ErrorCode>(code: C): this is LockerApiError & { code: C } {
    return this.code === code;
  }
}

/** The error for a failed answer: its envelope code and message, or UnexpectedResponse. */
export function errorFromResponse(response: Response, body: unknown): LockerApiError {
  const requestId = response.headers.get('x-request-id');
  const ra = Number(response.headers.get('retry-after'));
  const retryAfter = response.headers.has('retry-after') && Number.isFinite(ra) ? ra : null;
  const b = body as { error?: unknown; message?: unknown; error_description?: unknown } | null;
  if (b && typeof b === 'object' && typeof b.error === 'string' && b.error) {
    const message = typeof b.message === 'string' ? b.message : typeof b.error_description === 'string' ? b.error_description : b.error;
    return new LockerApiError(b.error, message, response.status, requestId, retryAfter, body);
  }
  const text = typeof body === 'string' ? body.slice(0, 200) : '';
  return new LockerApiError('UnexpectedResponse', `HTTP ${response.status} without the API's envelope${text ? `: ${text}` : ''}`, response.status, requestId, retryAfter, body);
}
