// PostgreSQL: writes the items of the shipments that show a name changed by any other way than
// provisioning or RemoveAccount (which refresh them themselves), every second (shipments/items.ts:
// refreshShipmentItems). Nothing to do costs one small read.
import type { AppContext, Worker } from '../context';
import type { Logger } from '../logger';
import { Periodic } from '../periodic';
import { refreshShipmentItems } from './items';

export class ShipmentItemRefresher implements Worker {
  readonly name = 'shipment-item-refresh';
  private readonly log: Logger;
  private readonly loop: Periodic;

  constructor(
    private readonly ctx: AppContext,
    everyMs = 1000,
  ) {
    this.log = ctx.log.child({ ns: 'central.shipment-items' });
    this.loop = new Periodic(
      () => everyMs,
      () =>
        refreshShipmentItems(this.ctx.db.kysely).then(
          (n) => {
            if (n) this.log.info({ names: n }, 'shipment items written for changed names');
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
