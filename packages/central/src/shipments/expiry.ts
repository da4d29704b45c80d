// The expiry sweep: every shipments.expirySweepSeconds, bookings not dropped off before their
// deadline become Expired and their lockers are released (ShipmentService.expireDue, which tests
// call directly with a moved ManualClock).
import type { AppContext, Worker } from '../context';
import { shipmentService } from './service';

export class ExpiryWorker implements Worker {
  readonly name = 'shipments.expiry';
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;

  constructor(private readonly ctx: AppContext) {}

  async start(): Promise<void> {
    const log = this.ctx.log.child({ ns: 'central.shipments.expiry' });
    const tick = () => {
      if (this.running) return;
      this.running = shipmentService(this.ctx)
        .expireDue()
        .then((n) => {
          if (n) log.info({ expired: n }, 'expired bookings');
        })
        .catch((err) => log.error({ err }, 'expiry sweep failed'))
        .finally(() => {
          this.running = null;
        });
    };
    this.timer = setInterval(tick, this.ctx.config.shipments.expirySweepSeconds * 1000);
    this.timer.unref();
    tick();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.running;
  }
}
