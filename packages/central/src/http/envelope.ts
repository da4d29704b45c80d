// The API's conventions as zod schemas: the envelope on every response, paging, dimensions.
// Route modules build their request and response schemas from these, and the same schemas feed
// validation, serialization and the OpenAPI document.
import { z } from 'zod';

export const envelopeShape = {
  success: z.boolean(),
  error: z.string().nullable(),
  message: z.string().nullable(),
};

/** A response schema: the given fields plus the envelope. */
export function envelope<T extends z.ZodRawShape>(shape: T) {
  return z.object({ ...envelopeShape, ...shape });
}

export const EnvelopeOnly = z.object(envelopeShape);
export const ErrorEnvelope = z.object({ success: z.literal(false), error: z.string(), message: z.string() });

export const pagingRequestShape = {
  pageNo: z.number().int().min(1),
  pageSize: z.number().int().min(1).max(500),
};

export const pagingResponseShape = {
  pageNo: z.number().int(),
  pageSize: z.number().int(),
  totalItems: z.number().int(),
  totalPages: z.number().int(),
};

/** A paginated response: items plus paging totals plus the envelope. */
export function paged<T extends z.ZodTypeAny, S extends z.ZodRawShape = Record<never, never>>(item: T, extra?: S) {
  return z.object({ ...envelopeShape, ...(extra ?? ({} as S)), items: z.array(item), ...pagingResponseShape });
}

export function pageInfo(pageNo: number, pageSize: number, totalItems: number) {
  return { pageNo, pageSize, totalItems, totalPages: Math.ceil(totalItems / pageSize) };
}

export const Dimension = z.object({
  width: z.number().min(1),
  height: z.number().min(1),
  length: z.number().min(1),
});
export type Dimension = z.infer<typeof Dimension>;

/** Optional strings in requests may also be sent as null (API conventions). */
export const optStr = () => z.string().nullish();
/**
 * An optional search filter (matched with LIKE): bounded, so a huge value is a clear
 * InvalidRequest naming the field instead of a database error (SQLite refuses LIKE patterns over
 * 50,000 bytes). 320 characters hold the longest e-mail address.
 */
export const searchStr = () => z.string().max(320).nullish();
export const optBool = () => z.boolean().nullish();

/** Fills the success envelope on a handler's result. */
export function ok<T extends object>(data: T): T & { success: true; error: null; message: null } {
  return { ...data, success: true, error: null, message: null };
}
