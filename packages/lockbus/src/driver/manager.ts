// Several buses at once: one LockBus per RS485 line (each with its own port, dialect, baud
// rate and polarity), their events merged. Buses run independently: a transaction on one never
// waits for another.
import { EventEmitter } from 'node:events';
import type { Logger } from 'pino';
import { LockBusError } from '../errors';
import { LockBus, type AddressScan, type LockBusEvents, type LockBusOptions, type UnlockResult } from './lock-bus';

const FORWARDED = [
  'unlockSent',
  'doorOpened',
  'doorClosed',
  'itemPlaced',
  'itemRemoved',
  'jam',
  'unlockUnobserved',
  'doorLeftOpen',
  'forcedOpen',
  'boardOffline',
  'boardOnline',
  'portOpened',
  'portClosed',
  'transaction',
] as const satisfies readonly (keyof LockBusEvents)[];

export class LockBusManager extends EventEmitter<LockBusEvents> {
  private readonly buses = new Map<string, LockBus>();

  constructor(
    private readonly busOptions: LockBusOptions[],
    private readonly logger?: Logger,
  ) {
    super();
  }

  bus(name: string): LockBus {
    const b = this.buses.get(name);
    if (!b) throw new LockBusError('UNKNOWN_BUS', `no bus named ${name}`);
    return b;
  }

  get names(): string[] {
    return [...this.buses.keys()];
  }

  async start(): Promise<void> {
    for (const o of this.busOptions) {
      if (this.buses.has(o.name)) throw new LockBusError('BAD_CONFIG', `duplicate bus name ${o.name}`);
      const bus = new LockBus({ logger: this.logger, ...o });
      for (const ev of FORWARDED) bus.on(ev, (e: unknown) => (this.emit as (t: string, p: unknown) => boolean)(ev, e));
      this.buses.set(o.name, bus);
    }
    await Promise.all([...this.buses.values()].map((b) => b.start()));
  }

  async stop(): Promise<void> {
    await Promise.all([...this.buses.values()].map((b) => b.stop()));
    for (const b of this.buses.values()) b.removeAllListeners();
    this.buses.clear();
  }

  /** A scan of one bus (LockBus.scan: its polling paused meanwhile, its own transport). */
  scan(bus: string, addresses?: number[]): Promise<AddressScan[]> {
    return this.bus(bus).scan(addresses);
  }

  unlock(bus: string, board: number, lock: number): Promise<UnlockResult> {
    return this.bus(bus).unlock(board, lock);
  }
}
