// Boards and locks of a simulated bus. Each lock runs the pure door model (door.ts); this file
// only owns the timers that the model asks for and reports what happened.
import { SimError } from './errors';
import { doorStep, initialDoor, type DoorContext, type DoorEvent, type DoorInput, type DoorState } from './door';

export interface LockEnv {
  context(board: number, lock: number): DoorContext;
  onEvent(board: number, lock: number, event: DoorEvent, state: DoorState): void;
}

export class SimLock {
  private s: DoorState = { ...initialDoor };
  private timers: { pulseEnd: NodeJS.Timeout | null; autoClose: NodeJS.Timeout | null } = {
    pulseEnd: null,
    autoClose: null,
  };

  constructor(
    readonly board: number,
    readonly lock: number,
    private readonly env: LockEnv,
  ) {}

  get state(): Readonly<DoorState> {
    return { ...this.s };
  }

  /** A person opens the door (a forced opening if the latch is engaged). */
  openDoor(): void {
    this.apply({ kind: 'open' });
  }

  /** A person pushes the door shut; the latch engages. */
  closeDoor(): void {
    this.apply({ kind: 'close' });
  }

  putItem(): void {
    this.apply({ kind: 'put' });
  }

  takeItem(): void {
    this.apply({ kind: 'take' });
  }

  /** The board drives an unlock pulse into this lock (what an unlock command does). */
  pulse(pulseMs: number): void {
    this.apply({ kind: 'pulse', pulseMs });
  }

  /** Back to the power-on state: latched, closed, empty; timers cancelled. */
  reset(state: Partial<DoorState> = {}): void {
    this.cancelTimers();
    this.s = { ...initialDoor, ...state };
  }

  cancelTimers(): void {
    for (const k of ['pulseEnd', 'autoClose'] as const) {
      const t = this.timers[k];
      if (t) clearTimeout(t);
      this.timers[k] = null;
    }
  }

  private apply(input: DoorInput): void {
    const { state, effects } = doorStep(this.s, input, this.env.context(this.board, this.lock));
    this.s = state;
    for (const e of effects) {
      if (e.kind === 'schedule') {
        const prev = this.timers[e.timer];
        if (prev) clearTimeout(prev);
        const input: DoorInput = e.timer === 'pulseEnd' ? { kind: 'pulseEnd' } : { kind: 'autoClose' };
        const t = setTimeout(() => {
          this.timers[e.timer] = null;
          this.apply(input);
        }, e.ms);
        t.unref?.();
        this.timers[e.timer] = t;
      } else if (e.kind === 'cancel') {
        const t = this.timers[e.timer];
        if (t) clearTimeout(t);
        this.timers[e.timer] = null;
      } else {
        this.env.onEvent(this.board, this.lock, e.event, this.state);
      }
    }
  }
}

export class SimBoard {
  readonly locks: SimLock[];
  /** Unlock pulse length in ms (set by setPulse commands); 500 ms is the usual factory value. */
  pulseMs = 500;

  constructor(
    readonly address: number,
    lockCount: number,
    env: LockEnv,
  ) {
    this.locks = Array.from({ length: lockCount }, (_, i) => new SimLock(address, i + 1, env));
  }

  /** Lock n (1-based); throws SimError('SIM_UNKNOWN_LOCK') if the board has no such lock. */
  lock(n: number): SimLock {
    const l = this.locks[n - 1];
    if (!l) throw new SimError('SIM_UNKNOWN_LOCK', `board ${this.address} has no lock ${n}`);
    return l;
  }

  findLock(n: number): SimLock | undefined {
    return this.locks[n - 1];
  }
}
