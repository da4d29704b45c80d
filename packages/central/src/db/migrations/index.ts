// Versioned migrations, applied in name order on both engines. Each area owns a number range:
// 0xx foundation, 1xx accounts, 2xx shipments, 3xx callbacks/outbox, 4xx edge sync.
import type { Migration } from 'kysely';
import * as m001 from './001_foundation';

export const migrations: Record<string, Migration> = {
  '001_foundation': m001,
};
