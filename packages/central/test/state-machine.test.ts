// Table-driven test of the pure shipment state machine: every row is one (state, input) pair of
// the transition table in docs/state-machine.md, with the states entered and the effects.
import { describe, expect, it } from 'vitest';
import { dropOffAhead, initial, transition, type Effect, type Input, type MachineState } from '../src/shipments/state-machine';
import { STATES, type StateCode } from '../src/shipments/types';

const base: MachineState = { state: 'ReadyForDropoff', hasReceiver: true, keepBooked: false, waitKind: null, waiter: null };
const st = (p: Partial<MachineState>): MachineState => ({ ...base, ...p });
const types = (e: Effect[]) => e.map((x) => ('usage' in x ? `${x.type}:${x.usage}` : 'waiterInput' in x ? `${x.type}:${x.waiterInput}` : x.type));

type Row = [string, Partial<MachineState>, Input, StateCode[] | 'reject', string[]?, Partial<MachineState>?];

const table: Row[] = [
  // drop-off
  ['drop-off with receiver', {}, { type: 'DropOff' }, ['ReadyForPickup'], ['ClearDropOffDeadline', 'InvalidateCodes:DropOff']],
  ['drop-off without receiver (stock, delayed receiver)', { hasReceiver: false }, { type: 'DropOff' }, ['WaitForReceiver'], ['ClearDropOffDeadline', 'InvalidateCodes:DropOff']],
  ['drop-off of an intake with a circular stock waiting (rule 8)', { waiter: 'circular' }, { type: 'DropOff' }, ['PickedUp'], ['ClearDropOffDeadline', 'InvalidateCodes:all', 'ReleaseLocker:PriorDroppedOff']],
  ['drop-off of a keep-booked collect-only keeps its codes (rule 9)', { keepBooked: true }, { type: 'DropOff' }, ['ReadyForPickup'], ['ClearDropOffDeadline']],
  ['drop-off refused in ReadyForPickup', { state: 'ReadyForPickup' }, { type: 'DropOff' }, 'reject'],
  ['drop-off refused in LockerAssigned', { state: 'LockerAssigned', waitKind: 'swap' }, { type: 'DropOff' }, 'reject'],
  ['drop-off refused in WaitForReceiver', { state: 'WaitForReceiver', hasReceiver: false }, { type: 'DropOff' }, 'reject'],
  // pick-up
  ['pick-up', { state: 'ReadyForPickup' }, { type: 'PickUp' }, ['PickedUp'], ['InvalidateCodes:all', 'ReleaseLocker:PriorPickedUp']],
  ['pick-up with a swap waiting (rule 7: locker passes on)', { state: 'ReadyForPickup', waiter: 'swap' }, { type: 'PickUp' }, ['PickedUp'], ['InvalidateCodes:all', 'ReleaseLocker:PriorPickedUp']],
  ['pick-up of keep-booked collect-only re-arms the booking (rule 9)', { state: 'ReadyForPickup', keepBooked: true }, { type: 'PickUp' }, ['PickedUp', 'ReadyForDropoff'], []],
  ['pick-up refused in ReadyForDropoff', {}, { type: 'PickUp' }, 'reject'],
  ['pick-up refused in WaitForReceiver', { state: 'WaitForReceiver', hasReceiver: false }, { type: 'PickUp' }, 'reject'],
  ['pick-up refused when PickedUp', { state: 'PickedUp' }, { type: 'PickUp' }, 'reject'],
  // chained
  ['swap: prior picked up, drop-off assumed (rule 7)', { state: 'LockerAssigned', waitKind: 'swap' }, { type: 'PriorPickedUp' }, ['ReadyForPickup'], ['InvalidateCodes:DropOff'], { waitKind: null }],
  ['swap without receiver: prior picked up', { state: 'LockerAssigned', waitKind: 'swap', hasReceiver: false }, { type: 'PriorPickedUp' }, ['WaitForReceiver'], ['InvalidateCodes:DropOff']],
  ['subsequent intake: prior picked up, ready for its drop-off', { state: 'LockerAssigned', waitKind: 'subsequent' }, { type: 'PriorPickedUp' }, ['ReadyForDropoff'], ['StartDropOffDeadline']],
  ['circular stock ignores a pick-up', { state: 'LockerAssigned', waitKind: 'circular', hasReceiver: false }, { type: 'PriorPickedUp' }, 'reject'],
  ['circular stock: intake dropped off (rule 8)', { state: 'LockerAssigned', waitKind: 'circular', hasReceiver: false }, { type: 'PriorDroppedOff' }, ['ReadyForPickup'], ['InvalidateCodes:DropOff'], { waitKind: null }],
  ['swap ignores a prior drop-off', { state: 'LockerAssigned', waitKind: 'swap' }, { type: 'PriorDroppedOff' }, 'reject'],
  ['waiter takes over a released locker', { state: 'LockerAssigned', waitKind: 'swap' }, { type: 'PriorReleased' }, ['ReadyForDropoff'], ['RenewDropOffCodes', 'StartDropOffDeadline'], { waitKind: null }],
  ['PriorReleased refused when not waiting', { state: 'ReadyForPickup' }, { type: 'PriorReleased' }, 'reject'],
  // receiver (rules 2 and 3)
  ['set receiver in WaitForReceiver', { state: 'WaitForReceiver', hasReceiver: false }, { type: 'SetReceiver', via: 'SetShipmentReceiver' }, ['ReadyForPickup'], ['NewLinkCode'], { hasReceiver: true }],
  ['set receiver in ReadyForDropoff keeps the state', { hasReceiver: false }, { type: 'SetReceiver', via: 'SetShipmentReceiver' }, [], ['NewLinkCode'], { hasReceiver: true }],
  ['set receiver in LockerAssigned keeps the state', { state: 'LockerAssigned', waitKind: 'swap', hasReceiver: false }, { type: 'SetReceiver', via: 'SetShipmentReceiver' }, [], ['NewLinkCode']],
  ['set receiver refused when a receiver exists', {}, { type: 'SetReceiver', via: 'SetShipmentReceiver' }, 'reject'],
  ['set receiver refused in ReadyForPickup', { state: 'ReadyForPickup', hasReceiver: false }, { type: 'SetReceiver', via: 'SetShipmentReceiver' }, 'reject'],
  ['issue from stock allowed in ReadyForPickup without receiver', { state: 'ReadyForPickup', hasReceiver: false }, { type: 'SetReceiver', via: 'IssueFromStock' }, [], ['NewLinkCode'], { hasReceiver: true }],
  ['issue from stock in WaitForReceiver (AsIssueFromStock)', { state: 'WaitForReceiver', hasReceiver: false }, { type: 'SetReceiver', via: 'IssueFromStock' }, ['ReadyForPickup'], ['NewLinkCode'], { hasReceiver: true }],
  ['issue from stock in ReadyForDropoff keeps the state', { hasReceiver: false }, { type: 'SetReceiver', via: 'IssueFromStock' }, [], ['NewLinkCode'], { hasReceiver: true }],
  ['issue from stock in LockerAssigned keeps the state', { state: 'LockerAssigned', waitKind: 'circular', hasReceiver: false }, { type: 'SetReceiver', via: 'IssueFromStock' }, [], ['NewLinkCode'], { hasReceiver: true }],
  ['remove receiver in LockerAssigned keeps the state', { state: 'LockerAssigned', waitKind: 'swap' }, { type: 'RemoveReceiver' }, [], ['NewLinkCode'], { hasReceiver: false }],
  ['set receiver refused when Cancelled', { state: 'Cancelled', hasReceiver: false }, { type: 'SetReceiver', via: 'SetShipmentReceiver' }, 'reject'],
  ['remove receiver in ReadyForDropoff', {}, { type: 'RemoveReceiver' }, [], ['NewLinkCode'], { hasReceiver: false }],
  ['remove receiver refused without receiver', { hasReceiver: false }, { type: 'RemoveReceiver' }, 'reject'],
  ['remove receiver refused in ReadyForPickup', { state: 'ReadyForPickup' }, { type: 'RemoveReceiver' }, 'reject'],
  ['remove receiver refused when PickedUp', { state: 'PickedUp' }, { type: 'RemoveReceiver' }, 'reject'],
  // cancel (rule 6) and expiry
  ['cancel ReadyForDropoff releases the locker', {}, { type: 'Cancel' }, ['Cancelled'], ['ClearDropOffDeadline', 'InvalidateCodes:all', 'ReleaseLocker:PriorReleased']],
  ['cancel ReadyForPickup releases the locker', { state: 'ReadyForPickup' }, { type: 'Cancel' }, ['Cancelled'], ['ClearDropOffDeadline', 'InvalidateCodes:all', 'ReleaseLocker:PriorReleased']],
  ['cancel WaitForReceiver releases the locker', { state: 'WaitForReceiver', hasReceiver: false }, { type: 'Cancel' }, ['Cancelled'], ['ClearDropOffDeadline', 'InvalidateCodes:all', 'ReleaseLocker:PriorReleased']],
  ['cancel LockerAssigned unlinks from the chain', { state: 'LockerAssigned', waitKind: 'swap' }, { type: 'Cancel' }, ['Cancelled'], ['ClearDropOffDeadline', 'InvalidateCodes:all', 'Unlink']],
  ['cancel refused when PickedUp', { state: 'PickedUp' }, { type: 'Cancel' }, 'reject'],
  ['cancel refused when Expired', { state: 'Expired' }, { type: 'Cancel' }, 'reject'],
  ['cancel refused when Cancelled', { state: 'Cancelled' }, { type: 'Cancel' }, 'reject'],
  ['expire ReadyForDropoff', {}, { type: 'Expire' }, ['Expired'], ['ClearDropOffDeadline', 'InvalidateCodes:all', 'ReleaseLocker:PriorReleased']],
  ['keep-booked never expires', { keepBooked: true }, { type: 'Expire' }, 'reject'],
  ['expire refused after drop-off', { state: 'ReadyForPickup' }, { type: 'Expire' }, 'reject'],
  ['expire refused in LockerAssigned', { state: 'LockerAssigned', waitKind: 'swap' }, { type: 'Expire' }, 'reject'],
];

describe('shipment state machine (pure)', () => {
  it.each(table)('%s', (_name, patch, input, expected, effects, after) => {
    const s = st(patch);
    const before = JSON.stringify(s);
    const r = transition(s, input);
    expect(JSON.stringify(s)).toBe(before); // pure: the input state is not mutated
    if (expected === 'reject') {
      expect(r.ok).toBe(false);
      if (!r.ok) expect(r.error).toBe('InvalidShipmentState');
      return;
    }
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.steps).toEqual(expected);
    expect(r.state.state).toBe(expected.length ? expected[expected.length - 1] : s.state);
    if (effects) expect(types(r.effects)).toEqual(effects);
    if (after) expect(r.state).toMatchObject(after);
  });

  it('inactive states accept no input but are reported, never thrown', () => {
    const inputs: Input[] = [{ type: 'DropOff' }, { type: 'PickUp' }, { type: 'Cancel' }, { type: 'Expire' }, { type: 'RemoveReceiver' }, { type: 'SetReceiver', via: 'SetShipmentReceiver' }];
    for (const state of ['PickedUp', 'Cancelled', 'Expired'] as const) for (const i of inputs) expect(transition(st({ state }), i).ok).toBe(false);
  });

  // Explores the machine itself from every first state initial() gives a new shipment: every
  // input, and a shipment joining the chain behind this one (its waiter) at any moment.
  const ALL_INPUTS: Input[] = [
    { type: 'DropOff' }, { type: 'PickUp' }, { type: 'PriorPickedUp' }, { type: 'PriorDroppedOff' }, { type: 'PriorReleased' },
    { type: 'SetReceiver', via: 'SetShipmentReceiver' }, { type: 'SetReceiver', via: 'IssueFromStock' }, { type: 'RemoveReceiver' }, { type: 'Cancel' }, { type: 'Expire' },
  ];
  const reachable = () => {
    const key = (m: MachineState) => JSON.stringify([m.state, m.hasReceiver, m.keepBooked, m.waitKind, m.waiter]);
    const seen = new Map<string, MachineState>();
    const queue: MachineState[] = [];
    const visit = (m: MachineState) => {
      if (seen.has(key(m))) return;
      seen.set(key(m), m);
      queue.push(m);
    };
    for (const hasReceiver of [true, false]) for (const keepBooked of [true, false]) for (const waitKind of [null, 'swap', 'subsequent', 'circular'] as const) visit(initial({ hasReceiver, keepBooked, waitKind }).state);
    while (queue.length) {
      const m = queue.shift()!;
      for (const w of [null, 'swap', 'subsequent', 'circular'] as const) if (m.waiter !== w) visit({ ...m, waiter: w });
      for (const i of ALL_INPUTS) {
        const r = transition(m, i);
        if (r.ok) visit(r.state);
      }
    }
    return [...seen.values()];
  };

  it('every state is reachable from the first states of new shipments (explored with every input)', () => {
    expect([...new Set(reachable().map((m) => m.state))].sort()).toEqual([...STATES].sort());
  });

  it("every accepted row of the table starts from a state a shipment can really be in", () => {
    const states = reachable();
    const fits = (patch: Partial<MachineState>) => states.some((m) => Object.entries({ ...base, ...patch }).every(([k, v]) => m[k as keyof MachineState] === v));
    const unreachable = table.filter(([, patch, , steps]) => steps !== 'reject' && !fits(patch)).map(([name]) => name);
    expect(unreachable).toEqual([]);
  });

  // AddShipmentObject changeDropOffAccess: a new drop-off code only while one can still be used
  it.each([
    ['ReadyForDropoff', false, true],
    ['LockerAssigned', false, true],
    ['WaitForReceiver', false, false],
    ['ReadyForPickup', false, false],
    ['ReadyForPickup', true, true], // keep-booked collect-only: the same drop-off codes serve the next round (rule 9)
    ['ReadyForDropoff', true, true],
    ['PickedUp', false, false],
    ['Cancelled', true, false],
    ['Expired', false, false],
  ] as const)('drop-off codes still usable: %s keepBooked=%s -> %s', (state, keepBooked, expected) => {
    expect(dropOffAhead({ state, keepBooked })).toBe(expected);
  });

  it('initial state: a booking starts ReadyForDropoff with a deadline, a waiter LockerAssigned without one', () => {
    expect(initial({ hasReceiver: true, keepBooked: false, waitKind: null })).toMatchObject({ state: { state: 'ReadyForDropoff' }, steps: ['ReadyForDropoff'], effects: [{ type: 'StartDropOffDeadline' }] });
    expect(initial({ hasReceiver: true, keepBooked: true, waitKind: null }).effects).toEqual([]);
    expect(initial({ hasReceiver: false, keepBooked: false, waitKind: 'swap' })).toMatchObject({ state: { state: 'LockerAssigned', waitKind: 'swap' }, effects: [] });
  });
});
