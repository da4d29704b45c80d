// Door model of one locker compartment, as a pure state machine:
//   doorStep(state, input, ctx) -> { state, effects }
//
// - An unlock pulse releases the latch; the door springs open at once (a spring pushes it).
// - A stuck latch ignores the pulse: latch stays engaged, the door stays shut.
// - A jammed door does not move: the latch releases for the pulse time, and because the door
//   never left the frame the latch drops back onto it when the pulse ends ("a released latch is
//   not an open door"). A jammed open door cannot be closed either.
// - Closing the door re-engages the latch. With autoCloseMs the door closes by itself.
// - Opening a latched door by hand is a forced opening (the latch is broken open).
// - Item sensors follow put/take, whatever the door does (a sensor can change with no command).

export interface DoorState {
  latched: boolean;
  doorOpen: boolean;
  item: boolean;
}

export type DoorInput =
  | { kind: 'pulse'; pulseMs: number }
  | { kind: 'pulseEnd' }
  | { kind: 'open' } // a person pulls the door
  | { kind: 'close' } // a person pushes the door shut
  | { kind: 'autoClose' }
  | { kind: 'put' }
  | { kind: 'take' };

export interface DoorContext {
  stuckLatch: boolean;
  jammed: boolean;
  autoCloseMs: number | null;
}

export type DoorEvent =
  | 'released'
  | 'opened'
  | 'closed'
  | 'forced'
  | 'pulse-ignored-stuck'
  | 'jammed'
  | 'relatched'
  | 'item-in'
  | 'item-out';

export type DoorEffect =
  | { kind: 'schedule'; timer: 'pulseEnd' | 'autoClose'; ms: number }
  | { kind: 'cancel'; timer: 'pulseEnd' | 'autoClose' }
  | { kind: 'event'; event: DoorEvent };

export interface DoorStep {
  state: DoorState;
  effects: DoorEffect[];
}

export const initialDoor: DoorState = { latched: true, doorOpen: false, item: false };

function ev(event: DoorEvent): DoorEffect {
  return { kind: 'event', event };
}

function closeDoor(s: DoorState, ctx: DoorContext): DoorStep {
  if (!s.doorOpen) return { state: s, effects: [] };
  if (ctx.jammed) return { state: s, effects: [ev('jammed')] };
  return {
    state: { ...s, doorOpen: false, latched: true },
    effects: [{ kind: 'cancel', timer: 'autoClose' }, ev('closed')],
  };
}

export function doorStep(s: DoorState, input: DoorInput, ctx: DoorContext): DoorStep {
  switch (input.kind) {
    case 'pulse': {
      if (ctx.stuckLatch) return { state: s, effects: [ev('pulse-ignored-stuck')] };
      if (s.doorOpen) return { state: { ...s, latched: false }, effects: [] };
      if (ctx.jammed) {
        return {
          state: { ...s, latched: false },
          effects: [ev('released'), ev('jammed'), { kind: 'schedule', timer: 'pulseEnd', ms: input.pulseMs }],
        };
      }
      const effects: DoorEffect[] = [ev('released'), ev('opened')];
      if (ctx.autoCloseMs !== null) effects.push({ kind: 'schedule', timer: 'autoClose', ms: ctx.autoCloseMs });
      return { state: { ...s, latched: false, doorOpen: true }, effects };
    }
    case 'pulseEnd':
      if (!s.doorOpen && !s.latched) return { state: { ...s, latched: true }, effects: [ev('relatched')] };
      return { state: s, effects: [] };
    case 'open': {
      if (s.doorOpen) return { state: s, effects: [] };
      if (ctx.jammed) return { state: s, effects: [ev('jammed')] };
      const effects: DoorEffect[] = [ev(s.latched ? 'forced' : 'opened'), { kind: 'cancel', timer: 'pulseEnd' }];
      if (ctx.autoCloseMs !== null) effects.push({ kind: 'schedule', timer: 'autoClose', ms: ctx.autoCloseMs });
      return { state: { ...s, latched: false, doorOpen: true }, effects };
    }
    case 'close':
    case 'autoClose':
      return closeDoor(s, ctx);
    case 'put':
      return s.item ? { state: s, effects: [] } : { state: { ...s, item: true }, effects: [ev('item-in')] };
    case 'take':
      return s.item ? { state: { ...s, item: false }, effects: [ev('item-out')] } : { state: s, effects: [] };
  }
}
