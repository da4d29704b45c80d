// Pure parts: the door state machine, flag/config parsing, option validation.
import { describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  doorStep,
  initialDoor,
  loadConfigFile,
  parseArgs,
  parseBusSpec,
  Simulator,
  validateOptions,
  type DoorState,
} from '@locker/firmware-sim';

const ctx = { stuckLatch: false, jammed: false, autoCloseMs: null };
const events = (effects: { kind: string; event?: string }[]) => effects.filter((e) => e.kind === 'event').map((e) => e.event);

describe('door model', () => {
  it('an unlock pulse releases the latch and the door springs open; closing relatches', () => {
    const a = doorStep(initialDoor, { kind: 'pulse', pulseMs: 500 }, ctx);
    expect(a.state).toEqual({ latched: false, doorOpen: true, item: false });
    expect(events(a.effects)).toEqual(['released', 'opened']);
    const b = doorStep(a.state, { kind: 'close' }, ctx);
    expect(b.state).toEqual({ latched: true, doorOpen: false, item: false });
    expect(events(b.effects)).toEqual(['closed']);
  });

  it('a stuck latch ignores the pulse', () => {
    const r = doorStep(initialDoor, { kind: 'pulse', pulseMs: 500 }, { ...ctx, stuckLatch: true });
    expect(r.state).toEqual(initialDoor);
    expect(events(r.effects)).toEqual(['pulse-ignored-stuck']);
  });

  it('a jammed door: latch released for the pulse, door shut, relatched at pulse end', () => {
    const jam = { ...ctx, jammed: true };
    const a = doorStep(initialDoor, { kind: 'pulse', pulseMs: 300 }, jam);
    expect(a.state).toEqual({ latched: false, doorOpen: false, item: false });
    expect(a.effects).toContainEqual({ kind: 'schedule', timer: 'pulseEnd', ms: 300 });
    expect(doorStep(a.state, { kind: 'open' }, jam).state.doorOpen).toBe(false);
    expect(doorStep(a.state, { kind: 'pulseEnd' }, jam).state).toEqual(initialDoor);
  });

  it('a jammed open door cannot be closed', () => {
    const open: DoorState = { latched: false, doorOpen: true, item: false };
    expect(doorStep(open, { kind: 'close' }, { ...ctx, jammed: true }).state).toEqual(open);
  });

  it('opening a latched door by hand is a forced opening', () => {
    const r = doorStep(initialDoor, { kind: 'open' }, ctx);
    expect(r.state.doorOpen).toBe(true);
    expect(events(r.effects)).toEqual(['forced']);
  });

  it('auto-close is scheduled on opening and cancelled on closing', () => {
    const auto = { ...ctx, autoCloseMs: 2000 };
    const a = doorStep(initialDoor, { kind: 'pulse', pulseMs: 500 }, auto);
    expect(a.effects).toContainEqual({ kind: 'schedule', timer: 'autoClose', ms: 2000 });
    expect(doorStep(a.state, { kind: 'autoClose' }, auto).state.latched).toBe(true);
    expect(doorStep(a.state, { kind: 'close' }, auto).effects).toContainEqual({ kind: 'cancel', timer: 'autoClose' });
  });

  it('item sensors follow put and take whatever the door does', () => {
    const a = doorStep(initialDoor, { kind: 'put' }, ctx);
    expect(a.state.item).toBe(true);
    expect(doorStep(a.state, { kind: 'take' }, ctx).state.item).toBe(false);
  });
});

describe('CLI flags and config files', () => {
  it('defaults to one CU16 bus with boards 0 and 1 and one scanner', () => {
    const { options } = parseArgs([]);
    expect(options.buses).toEqual([{ name: 'bus0', dialect: 'kerong-cu16', link: { kind: 'pty' }, boards: [{ address: 0 }, { address: 1 }] }]);
    expect(options.scanners).toHaveLength(1);
    expect(options.scanners![0]).toMatchObject({ name: 'scanner0' });
  });

  it('parses --bus specs with ranges and keys', () => {
    expect(parseBusSpec('generic-8a80:1-3,7:tcp=7000:name=gw:baud=19200:polarity=closed-low:locks=12:autoclose=5000', 0)).toEqual({
      name: 'gw',
      dialect: 'generic-8a80',
      link: { kind: 'tcp', port: 7000 },
      baudRate: 19200,
      polarity: 'closed-low',
      autoCloseMs: 5000,
      boards: [1, 2, 3, 7].map((address) => ({ address, locks: 12 })),
    });
    expect(parseBusSpec('kerong-cu16:0:path=/tmp/x', 3)).toMatchObject({ name: 'bus3', link: { kind: 'pty', path: '/tmp/x' } });
  });

  it('with --bus, a scanner only when asked; --scanner takes name and suffix', () => {
    expect(parseArgs(['--bus', 'kerong-cu16:0,1']).options.scanners).toEqual([]);
    const { options } = parseArgs(['--bus', 'kerong-cu16:0,1', '--scanner', 'front:suffix=crlf', '--no-timing', '--auto-close', '3000']);
    expect(options.scanners).toEqual([{ name: 'front', link: { kind: 'pty' }, suffix: '\r\n' }]);
    expect(options.realTiming).toBe(false);
    expect(options.buses[0]!.autoCloseMs).toBe(3000);
  });

  it('reads a YAML config file with suffix names', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sim-cfg-'));
    const file = path.join(dir, 'sim.yaml');
    fs.writeFileSync(
      file,
      ['realTiming: false', 'buses:', '  - name: left', '    dialect: kerong-cu16', '    boards: [0, {address: 1, locks: 12}]', 'scanners:', '  - name: s', '    suffix: none'].join('\n'),
    );
    const cfg = loadConfigFile(file);
    expect(cfg.buses![0]).toMatchObject({ name: 'left', link: { kind: 'pty' }, boards: [{ address: 0 }, { address: 1, locks: 12 }] });
    expect(cfg.scanners![0]!.suffix).toBe('');
    expect(parseArgs(['--config', file]).options.realTiming).toBe(false);
  });

  it('rejects bad input with SIM_CONFIG_INVALID', () => {
    for (const argv of [['--bus', 'nope:0'], ['--bus', 'kerong-cu16'], ['--bus', 'kerong-cu16:x'], ['--bus', 'kerong-cu16:0:color=red'], ['--frobnicate']]) {
      expect(() => parseArgs(argv), argv.join(' ')).toThrow(expect.objectContaining({ code: 'SIM_CONFIG_INVALID' }));
    }
  });

  it('validates addresses, lock counts and names against the dialect', () => {
    const bus = (over: object) => ({ buses: [{ name: 'b', dialect: 'kerong-cu16' as const, link: { kind: 'pty' as const }, boards: [{ address: 0 }], ...over }] });
    expect(() => validateOptions(bus({ boards: [{ address: 16 }] }))).toThrow(/not in 0..14/);
    expect(() => validateOptions(bus({ boards: [{ address: 15 }] }))).toThrow(/not in 0..14/); // F0 is the whole-bus address
    expect(() => validateOptions(bus({ boards: [{ address: 0, locks: 17 }] }))).toThrow(/not in 1..16/);
    expect(() => validateOptions(bus({ boards: [{ address: 1 }, { address: 1 }] }))).toThrow(/duplicate board address/);
    expect(() => validateOptions(bus({ name: 'a b' }))).toThrow(/bus name/);
    expect(() => validateOptions(bus({}))).not.toThrow();
  });

  it('start() refuses invalid options before touching anything; lookups name the problem', async () => {
    const sim = new Simulator({ buses: [{ name: 'b', dialect: 'generic-8a80', link: { kind: 'pty' }, boards: [{ address: 0 }] }] });
    await expect(sim.start()).rejects.toMatchObject({ code: 'SIM_CONFIG_INVALID' });
    expect(() => sim.bus('b')).toThrow(expect.objectContaining({ code: 'SIM_NOT_STARTED' }));
  });
});
