// Domain errors carry a code (the API's `error` string) and an HTTP status. product.md: 400 for
// InvalidRequest and every failed command, 401 Unauthorized, 404 NotFound, 413 body too large,
// 429 RateLimited, 500 InternalError.
export class ApiError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly status = 400,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

export const invalidRequest = (message: string) => new ApiError('InvalidRequest', message, 400);
export const unauthorized = (message = 'missing, invalid or expired access token') => new ApiError('Unauthorized', message, 401);
export const notFound = (message: string) => new ApiError('NotFound', message, 404);
