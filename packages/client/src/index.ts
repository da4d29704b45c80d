// @locker/client: a typed client of the locker platform's tenant API (docs/client.md).
export { LockerClient, createLockerClient, isIdempotentPath, type ApiPath, type RequestOf, type ResponseOf, type IdempotentPath, type LockerClientOptions, type CallOptions, type paths } from './client';
export { LockerApiError, errorFromResponse, API_ERROR_CODES, TOKEN_ERROR_CODES, CLIENT_ERROR_CODES, type ErrorCode, type ApiErrorCode, type TokenErrorCode, type ClientErrorCode } from './errors';
export { verifyCallback, type VerifyCallbackInput, type VerifyCallbackResult, type CallbackRejection, type CallbackHeaders, type ShipmentStatusUpdate } from './callbacks';
export type { components, operations } from './generated/api';
