// Keeps the callback outbox from growing without end: delivered and skipped messages older than
// callbacks.retentionDays are deleted — except each shipment's newest message, because the next
// message's per-shipment sequence continues from it.
import type { AppContext, Worker } from '../context';
import { toDbTime } from '../ids';

export class OutboxPurger implements Worker {
  readonly name = 'callbacks.purge';
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly ctx: AppContext,
    private readonly everyMs = 60 * 60_000,
  ) {}

  /** Deletes what retention allows; returns how many messages went. */
  async purge(): Promise<number> {
    const days = this.ctx.config.callbacks.retentionDays;
    if (days <= 0) return 0;
    const cutoff = toDbTime(new Date(this.ctx.clock.now().getTime() - days * 86_400_000));
    const res = await this.ctx.db.kysely
      .deleteFrom('callback_outbox as o')
      .where('o.status', 'in', ['delivered', 'skipped'])
      .where('o.created_at', '<', cutoff)
      .where((eb) =>
        eb.exists(
          eb
            .selectFrom('callback_outbox as n')
            .select('n.event_id')
            .whereRef('n.shipment_uid', '=', 'o.shipment_uid')
            .whereRef('n.sequence', '>', 'o.sequence'),
        ),
      )
      .executeTakeFirst();
    return Number(res.numDeletedRows);
  }

  async start(): Promise<void> {
    const run = () => {
      this.purge().catch((err) => this.ctx.log.warn({ ns: 'central.callbacks', err: { message: (err as Error).message } }, 'outbox purge failed'));
    };
    run();
    this.timer = setInterval(run, this.everyMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }
}
