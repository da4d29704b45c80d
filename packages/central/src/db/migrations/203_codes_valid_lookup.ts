import type { Kysely } from 'kysely';

// Access codes are never deleted (they are the history GetShipmentAccessConfig and the audit show),
// so a pick up point collects codes for as long as it runs, nearly all of them invalidated. Every
// lookup by pick up point wants the valid ones only: a terminal's current code set (edge/codes.ts
// currentCodes) and a code typed at the locker (shipments/service.ts handleDoorEvent, valid = 1 and
// the value). On (pup_uid, value) both walked the point's whole history; on
// (pup_uid, valid, value) they read only its valid codes, with the same number of index entries
// per booking (an invalidation moves its entry).
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('access_codes_pup_value').execute();
  await db.schema.createIndex('access_codes_pup_valid_value').on('access_codes').columns(['pup_uid', 'valid', 'value']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('access_codes_pup_valid_value').execute();
  await db.schema.createIndex('access_codes_pup_value').on('access_codes').columns(['pup_uid', 'value']).execute();
}
