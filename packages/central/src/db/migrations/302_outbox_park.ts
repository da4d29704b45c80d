import type { Kysely } from 'kysely';
import { sql } from 'kysely';

// The delivery worker now parks a message queued behind an undelivered one of its shipment (moves
// its next_attempt_at ahead; callbacks/worker.ts) instead of checking it on every poll. Messages
// already waiting that way when this runs are parked once here, so the first polls after the
// upgrade do not have to work through the whole backlog (the worker would park them too, a few
// hundred per poll). Parked for a minute; the worker takes over from there.
export async function up(db: Kysely<any>): Promise<void> {
  const until = new Date(Date.now() + 60_000).toISOString();
  await sql`update callback_outbox set next_attempt_at = ${until}
    where status = 'pending' and next_attempt_at < ${until}
      and exists (select 1 from callback_outbox p where p.shipment_uid = callback_outbox.shipment_uid and p.status = 'pending' and p.sequence < callback_outbox.sequence)`.execute(db);
}

// Parked messages are simply due a little later; nothing to undo.
export async function down(): Promise<void> {}
