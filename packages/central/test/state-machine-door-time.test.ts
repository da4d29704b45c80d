// Table test of the expiry race in the pure state machine (docs/state-machine.md, "The expiry
// race"): a drop-off reported after the booking expired, and the booking displaced from a locker
// that holds a parcel that won the race.
import { describe, expect, it } from 'vitest';
import { transition, type Effect, type Input, type MachineState } from '../src/shipments/state-machine';
import type { StateCode } from '../src/shipments/types';

const base: MachineState = { state: 'Expired', hasReceiver: true, keepBooked: false, waitKind: null, waiter: null };
const types = (e: Effect[]) => e.map((x) => ('usage' in x ? `${x.type}:${x.usage}` : 'waiterInput' in x ? `${x.type}:${x.waiterInput}` : x.type));

type Row = [string, Partial<MachineState>, Input, StateCode[] | string, string[]?];
const late = (beforeDeadline: boolean, lockerFree: boolean): Input => ({ type: 'LateDropOff', beforeDeadline, lockerFree });

const table: Row[] = [
  ['late drop-off before the deadline, locker free: the doors win (receiver)', {}, late(true, true), ['ReadyForPickup'], ['ReclaimLocker', 'ReinstatePickUpCodes']],
  ['late drop-off before the deadline, locker free: the doors win (no receiver)', { hasReceiver: false }, late(true, true), ['WaitForReceiver'], ['ReclaimLocker', 'ReinstatePickUpCodes']],
  ['late drop-off after the deadline stays refused', {}, late(false, true), 'DropOffAfterDeadline'],
  ['late drop-off after the deadline, locker taken: the deadline is the reason', {}, late(false, false), 'DropOffAfterDeadline'],
  ['late drop-off before the deadline, locker kept by another shipment', {}, late(true, false), 'LockerRebooked'],
  ['late drop-off of a shipment that is not Expired', { state: 'Cancelled' }, late(true, true), 'InvalidShipmentState'],
  ['late drop-off of an active booking', { state: 'ReadyForDropoff' }, late(true, true), 'InvalidShipmentState'],
  ['displaced booking moves and stays ready for drop-off', { state: 'ReadyForDropoff' }, { type: 'Displaced' }, ['ReadyForDropoff'], ['MoveLocker']],
  ['a keep-booked booking is not displaced', { state: 'ReadyForDropoff', keepBooked: true }, { type: 'Displaced' }, 'InvalidShipmentState'],
  ['a booking with a shipment waiting on it is not displaced', { state: 'ReadyForDropoff', waiter: 'swap' }, { type: 'Displaced' }, 'InvalidShipmentState'],
  ['a dropped-off shipment is not displaced', { state: 'ReadyForPickup' }, { type: 'Displaced' }, 'InvalidShipmentState'],
];

describe('state machine: the expiry race (pure)', () => {
  it.each(table)('%s', (_name, patch, input, expected, effects) => {
    const s = { ...base, ...patch };
    const before = JSON.stringify(s);
    const r = transition(s, input);
    expect(JSON.stringify(s)).toBe(before);
    if (typeof expected === 'string') {
      expect(r.ok).toBe(false);
      if (!r.ok) expect(r.error).toBe(expected);
      return;
    }
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.steps).toEqual(expected);
    if (effects) expect(types(r.effects)).toEqual(effects);
  });
});
