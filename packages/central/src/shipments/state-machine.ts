// The shipment state machine as a pure function: (state, input) -> {state, steps, effects}.
// No I/O: the service (service.ts) reads the shipment, calls transition(), stores every entered
// state with its cause (the audit trail) and carries out the effects in the same transaction.
// docs/state-machine.md shows the same table in prose; test/state-machine.test.ts walks it.
import { isActive, type StateCode, type WaitKind } from './types';

export interface MachineState {
  state: StateCode;
  /** the shipment has a To user (receiver) */
  hasReceiver: boolean;
  /** collect-only with KeepBookedAfterPickUp (rule 9): a pick-up re-arms the booking */
  keepBooked: boolean;
  /** when in LockerAssigned: how this shipment waits on the shipment that holds its locker */
  waitKind: WaitKind | null;
  /** the kind of the shipment waiting on this one, if any */
  waiter: WaitKind | null;
}

export type Input =
  /** the item was put in the locker with this shipment's drop-off code (door event or simulation) */
  | { type: 'DropOff' }
  /** the item was taken out with this shipment's pick-up code */
  | { type: 'PickUp' }
  /** the shipment this one waits on (swap/subsequent) was picked up */
  | { type: 'PriorPickedUp' }
  /** the shipment this one waits on (circular) was dropped off */
  | { type: 'PriorDroppedOff' }
  /** the shipment this one waits on released the locker without its event (cancelled, expired) */
  | { type: 'PriorReleased' }
  | { type: 'SetReceiver'; via: 'SetShipmentReceiver' | 'IssueFromStock' }
  | { type: 'RemoveReceiver' }
  | { type: 'Cancel' }
  /** the drop-off deadline passed (clock) */
  | { type: 'Expire' }
  /**
   * the expiry race (docs/state-machine.md): a drop-off reported after the booking expired.
   * beforeDeadline: its door time is before the deadline the booking missed; lockerFree: its
   * locker is free again (released at the expiry, or freed by moving the booking that took it)
   */
  | { type: 'LateDropOff'; beforeDeadline: boolean; lockerFree: boolean }
  /**
   * this booking's locker turned out to hold another shipment's parcel (that one won the expiry
   * race): it moves to another free locker that fits, with the same codes, and stays ready for drop-off
   */
  | { type: 'Displaced' };

export type Effect =
  /** mark codes of this usage invalid ('all': every code, link codes included) */
  | { type: 'InvalidateCodes'; usage: 'DropOff' | 'PickUp' | 'all' }
  /** give this shipment fresh drop-off codes of its own (a waiter that took over the locker) */
  | { type: 'RenewDropOffCodes' }
  /** a new LinkCode becomes the valid one (the receiver changed) */
  | { type: 'NewLinkCode' }
  | { type: 'StartDropOffDeadline' }
  | { type: 'ClearDropOffDeadline' }
  /**
   * this shipment gives up its locker: to the shipment waiting on it (which then receives
   * waiterInput), or free when none waits
   */
  | { type: 'ReleaseLocker'; waiterInput: 'PriorPickedUp' | 'PriorDroppedOff' | 'PriorReleased' }
  /** this shipment never held its locker and leaves the chain: its waiter now waits where it waited */
  | { type: 'Unlink' }
  /** an expired shipment whose parcel is in its locker after all books that locker again */
  | { type: 'ReclaimLocker' }
  /** its pick-up codes (invalidated at the expiry) are valid again, or a fresh pair when a PIN was taken meanwhile */
  | { type: 'ReinstatePickUpCodes' }
  /** the shipment moves to another free locker that fits it; its valid codes follow */
  | { type: 'MoveLocker' };

/**
 * Refusals: InvalidShipmentState, except the two outcomes of the expiry race that must say why
 * (the parcel is in the locker all the same): DropOffAfterDeadline, LockerRebooked.
 */
export type Refusal = 'InvalidShipmentState' | 'DropOffAfterDeadline' | 'LockerRebooked';

export type Result =
  | { ok: true; state: MachineState; steps: StateCode[]; effects: Effect[] }
  | { ok: false; error: Refusal; reason: string };

const fail = (reason: string, error: Refusal = 'InvalidShipmentState'): Result => ({ ok: false, error, reason });

function go(s: MachineState, steps: StateCode[], effects: Effect[], patch: Partial<MachineState> = {}): Result {
  const state = { ...s, ...patch, state: steps.length ? steps[steps.length - 1]! : s.state };
  return { ok: true, state, steps, effects };
}

/** Where the item goes after it is in the locker: to the receiver, or it waits for one. */
const inLocker = (s: MachineState): StateCode => (s.hasReceiver ? 'ReadyForPickup' : 'WaitForReceiver');

/** The first state of a new shipment. */
export function initial(p: { hasReceiver: boolean; keepBooked: boolean; waitKind: WaitKind | null }): { state: MachineState; steps: StateCode[]; effects: Effect[] } {
  const state: MachineState = { state: p.waitKind ? 'LockerAssigned' : 'ReadyForDropoff', hasReceiver: p.hasReceiver, keepBooked: p.keepBooked, waitKind: p.waitKind, waiter: null };
  const effects: Effect[] = state.state === 'ReadyForDropoff' && !p.keepBooked ? [{ type: 'StartDropOffDeadline' }] : [];
  return { state, steps: [state.state], effects };
}

/**
 * Whether this shipment's drop-off codes can still open its locker for a drop-off later: before
 * the drop-off (ReadyForDropoff, or LockerAssigned waiting for its turn), and in every active state
 * of a keep-booked collect-only, whose drop-off codes serve every round (rule 9). After a drop-off
 * otherwise, or once inactive, no drop-off code will ever be used again.
 */
export function dropOffAhead(s: Pick<MachineState, 'state' | 'keepBooked'>): boolean {
  if (!isActive(s.state)) return false;
  return s.state === 'ReadyForDropoff' || s.state === 'LockerAssigned' || s.keepBooked;
}

export function transition(s: MachineState, input: Input): Result {
  const active = isActive(s.state);
  switch (input.type) {
    case 'DropOff': {
      if (s.state !== 'ReadyForDropoff') return fail(`a drop-off needs state ReadyForDropoff, the shipment is ${s.state}`);
      if (s.waiter === 'circular') {
        // Rule 8: the returned item becomes the circular stock shipment's item; this intake is done.
        return go(s, ['PickedUp'], [{ type: 'ClearDropOffDeadline' }, { type: 'InvalidateCodes', usage: 'all' }, { type: 'ReleaseLocker', waiterInput: 'PriorDroppedOff' }]);
      }
      const effects: Effect[] = [{ type: 'ClearDropOffDeadline' }];
      if (!s.keepBooked) effects.push({ type: 'InvalidateCodes', usage: 'DropOff' });
      return go(s, [inLocker(s)], effects);
    }
    case 'PickUp': {
      if (s.state !== 'ReadyForPickup') return fail(`a pick-up needs state ReadyForPickup, the shipment is ${s.state}`);
      if (s.keepBooked) {
        // Rule 9: the collection is recorded and the same locker is ready for the next drop-off,
        // with the same codes and no deadline (an infinite booking, until cancelled).
        return go(s, ['PickedUp', 'ReadyForDropoff'], []);
      }
      return go(s, ['PickedUp'], [{ type: 'InvalidateCodes', usage: 'all' }, { type: 'ReleaseLocker', waiterInput: 'PriorPickedUp' }]);
    }
    case 'PriorPickedUp': {
      if (s.state !== 'LockerAssigned') return fail(`not waiting on another shipment (state ${s.state})`);
      if (s.waitKind === 'swap') {
        // Rule 7: the drop-off of the swapping shipment is assumed at the same moment.
        return go(s, [inLocker(s)], [{ type: 'InvalidateCodes', usage: 'DropOff' }], { waitKind: null });
      }
      if (s.waitKind === 'subsequent') {
        return go(s, ['ReadyForDropoff'], s.keepBooked ? [] : [{ type: 'StartDropOffDeadline' }], { waitKind: null });
      }
      return fail(`a ${s.waitKind ?? 'non-waiting'} shipment does not react to a pick-up of the shipment it waits on`);
    }
    case 'PriorDroppedOff': {
      if (s.state !== 'LockerAssigned' || s.waitKind !== 'circular') return fail(`not a circular stock shipment waiting for its intake (state ${s.state})`);
      // Rule 8: the stock shipment is marked ready for pick-up.
      return go(s, ['ReadyForPickup'], [{ type: 'InvalidateCodes', usage: 'DropOff' }], { waitKind: null });
    }
    case 'PriorReleased': {
      if (s.state !== 'LockerAssigned') return fail(`not waiting on another shipment (state ${s.state})`);
      const effects: Effect[] = [{ type: 'RenewDropOffCodes' }];
      if (!s.keepBooked) effects.push({ type: 'StartDropOffDeadline' });
      return go(s, ['ReadyForDropoff'], effects, { waitKind: null });
    }
    case 'SetReceiver': {
      if (!active) return fail(`the shipment is ${s.state}`);
      if (s.hasReceiver) return fail('the shipment already has a receiver');
      // Rule 2 (SetShipmentReceiver). Issuing a stock item is allowed while it is ready for pick-up
      // without a receiver (circular stock after rule 8).
      if (input.via === 'SetShipmentReceiver' && s.state === 'ReadyForPickup') return fail('the shipment is ReadyForPickup: the receiver can no longer be set');
      const steps: StateCode[] = s.state === 'WaitForReceiver' ? ['ReadyForPickup'] : [];
      return go(s, steps, [{ type: 'NewLinkCode' }], { hasReceiver: true });
    }
    case 'RemoveReceiver': {
      // Rule 3.
      if (!active) return fail(`the shipment is ${s.state}`);
      if (!s.hasReceiver) return fail('the shipment has no receiver to remove');
      if (s.state === 'ReadyForPickup') return fail('the shipment is ReadyForPickup: the receiver can no longer be removed');
      return go(s, [], [{ type: 'NewLinkCode' }], { hasReceiver: false });
    }
    case 'Cancel': {
      // Rule 6.
      if (!active) return fail(`the shipment is already ${s.state}`);
      const effects: Effect[] = [{ type: 'ClearDropOffDeadline' }, { type: 'InvalidateCodes', usage: 'all' }];
      effects.push(s.state === 'LockerAssigned' ? { type: 'Unlink' } : { type: 'ReleaseLocker', waiterInput: 'PriorReleased' });
      return go(s, ['Cancelled'], effects, { waitKind: null });
    }
    case 'Expire': {
      if (s.state !== 'ReadyForDropoff' || s.keepBooked) return fail(`only a booking in ReadyForDropoff with a deadline expires (state ${s.state})`);
      return go(s, ['Expired'], [{ type: 'ClearDropOffDeadline' }, { type: 'InvalidateCodes', usage: 'all' }, { type: 'ReleaseLocker', waiterInput: 'PriorReleased' }]);
    }
    case 'LateDropOff': {
      // The doors win: a parcel put in before the deadline, reported after the expiry.
      if (s.state !== 'Expired') return fail(`a late drop-off needs state Expired, the shipment is ${s.state}`);
      if (!input.beforeDeadline) return fail('the drop-off happened at the door after the deadline the booking missed', 'DropOffAfterDeadline');
      if (!input.lockerFree) return fail('the locker was booked by another shipment after the expiry', 'LockerRebooked');
      return go(s, [inLocker(s)], [{ type: 'ReclaimLocker' }, { type: 'ReinstatePickUpCodes' }]);
    }
    case 'Displaced': {
      if (s.state !== 'ReadyForDropoff' || s.keepBooked || s.waiter !== null) return fail(`only a plain booking in ReadyForDropoff moves to another locker (state ${s.state})`);
      return go(s, ['ReadyForDropoff'], [{ type: 'MoveLocker' }]);
    }
  }
}
