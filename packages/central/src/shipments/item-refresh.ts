// PostgreSQL: writes the items of the shipments that show a changed name which provisioning or
// RemoveAccount did not write themselves (a name changed by hand, an account made again under a
// removed uid, a refresh that could not get its lock), every second (shipments/items.ts:
// refreshShipmentItems). Nothing to do costs one small read. Rounds that find shipments busy are
// told once they come ten in a row (the items stay stale while they do).
import type { AppContext, Worker } from '../context';
import type { Logger } from '../logger';
import { Periodic } from '../periodic';
import { checkRefreshLockTimeout, REFRESH_LOCK_TIMEOUT_MS, refreshShipmentItems } from './items';

export class ShipmentItemRefresher implements Worker {
  readonly name = 'shipment-item-refresh';
  private readonly log: Logger;
  private readonly loop: Periodic;
  /** rounds in a row that could not get the lock */
  private busyRounds = 0;

  constructor(
    private readonly ctx: AppContext,
    everyMs = 1000,
    /** how long a round waits for its lock on shipments (tests shorten it) */
    lockTimeoutMs = REFRESH_LOCK_TIMEOUT_MS,
  ) {
    checkRefreshLockTimeout(lockTimeoutMs);
    this.log = ctx.log.child({ ns: 'central.shipment-items' });
    this.loop = new Periodic(
      () => everyMs,
      () =>
        refreshShipmentItems(this.ctx.db.kysely, lockTimeoutMs).then(
          (n) => {
            if (n === 'busy') {
              if (++this.busyRounds % 10 === 0) this.log.warn({ rounds: this.busyRounds }, 'shipment items for changed names wait: shipments busy');
              return;
            }
            this.busyRounds = 0;
            if (n) this.log.info({ recorded: n }, 'shipment items written for changed names');
          },
          (err) => this.log.error({ err: (err as Error).message, code: (err as { code?: string }).code }, 'writing shipment items for changed names failed'),
        ),
    );
  }

  async start(): Promise<void> {
    this.loop.start();
  }

  async stop(): Promise<void> {
    await this.loop.stop();
  }
}
