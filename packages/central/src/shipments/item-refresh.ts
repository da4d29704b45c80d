// PostgreSQL: writes the items of the shipments that show a name changed by any other way than
// provisioning or RemoveAccount (which refresh them themselves), every second (shipments/items.ts:
// refreshShipmentItems). Nothing to do costs one small read.
import type { AppContext, Worker } from '../context';
import type { Logger } from '../logger';
import { refreshShipmentItems } from './items';

export class ShipmentItemRefresher implements Worker {
  readonly name = 'shipment-item-refresh';
  private running = false;
  private timer: NodeJS.Timeout | null = null;
  private current: Promise<void> | null = null;
  private readonly log: Logger;

  constructor(
    private readonly ctx: AppContext,
    private readonly everyMs = 1000,
  ) {
    this.log = ctx.log.child({ ns: 'central.shipment-items' });
  }

  async start(): Promise<void> {
    if (this.running) return;
    this.running = true;
    this.schedule();
  }

  private schedule(): void {
    if (!this.running) return;
    this.timer = setTimeout(() => {
      this.current = refreshShipmentItems(this.ctx.db.kysely)
        .then((n) => {
          if (n) this.log.info({ names: n }, 'shipment items written for changed names');
        })
        .catch((err) => this.log.error({ err: (err as Error).message, code: (err as { code?: string }).code }, 'writing shipment items for changed names failed'))
        .finally(() => {
          this.current = null;
          this.schedule();
        });
    }, this.everyMs);
  }

  async stop(): Promise<void> {
    this.running = false;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.current;
  }
}
