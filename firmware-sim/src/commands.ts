// Commands a person types at the running simulator (the CLI's REPL). Each command returns the text
// to print; errors come back as SimError('SIM_BAD_COMMAND', ...). Tests can call runCommand()
// directly, or use the library API it is built on.
import type { SimBus } from './bus';
import { SimError } from './errors';
import { describeFaults, type Faults } from './faults';
import { SUFFIXES, suffixName } from './scanner';
import type { Simulator } from './simulator';

export interface CommandContext {
  sim: Simulator;
  /** Bus the lock commands act on (changed with `use`). */
  bus: string;
  /** Print every frame on stdout. */
  frames: boolean;
  quit: boolean;
}

export const HELP = `Commands (board and lock numbers as on the bus: lock 1 is the first lock):
  status [bus]            doors, latches, items and faults of a bus (default: current bus)
  use <bus>               make <bus> the current bus
  open <board> <lock>     a person opens the door (forced open if it is still latched)
  close <board> <lock>    a person shuts the door (the latch engages)
  put <board> <lock>      an item is placed in the compartment (item sensor on)
  take <board> <lock>     the item is taken out (item sensor off)
  pulse <board> <lock>    the board fires the unlock pulse, as if the host had asked
  autoclose <ms>|off      doors close by themselves this long after opening
  scan [-c <chunks>] [-s cr|lf|crlf|none] [--scanner <name>] <code>
                          present a code to the scanner (default suffix: the scanner's own)
  pin <digits> [--scanner <name>]
                          keypad entry: one write per digit, then "#" and the suffix
  fault noreply [on|off]  boards act but their replies are lost
  fault late <ms>         every reply comes <ms> late (0 = off)
  fault garbage [on|off]  noise bytes before every reply
  fault badsum [on|off]   every reply has a wrong checksum
  fault stuck <board> <lock> [off]   the latch ignores unlock pulses
  fault jam <board> <lock> [off]     the door does not move
  fault offline <board> [off]        the board drops off the bus
  fault echo [on|off]     the adapter echoes what the host sends
  faults                  list active faults
  clear                   clear every fault on the current bus
  unplug [bus|scanner]    the device vanishes (default: current bus)
  replug [bus|scanner]    the device comes back at the same path
  frames on|off           print every frame (hex and meaning)
  help                    this text
  quit                    stop the simulator and exit`;

function bad(msg: string): never {
  throw new SimError('SIM_BAD_COMMAND', msg);
}

function int(s: string | undefined, what: string): number {
  if (s === undefined || !/^\d+$/.test(s)) bad(`${what} must be a whole number`);
  return Number(s);
}

function onOff(s: string | undefined): boolean {
  if (s === undefined || s === 'on') return true;
  if (s === 'off') return false;
  return bad(`expected on or off, got "${s}"`);
}

export function busStatus(bus: SimBus): string {
  const lines: string[] = [];
  const link = bus.path ? `pty ${bus.path}` : `tcp 127.0.0.1:${bus.tcpPort}`;
  lines.push(
    `bus ${bus.name}: ${bus.dialect.name}, ${bus.baudRate} baud, ${bus.polarity}, ${link}${bus.plugged ? '' : ' (UNPLUGGED)'}; faults: ${describeFaults(bus.faults.get())}`,
  );
  for (const addr of bus.boardAddresses) {
    const b = bus.board(addr);
    const open: number[] = [];
    const released: number[] = [];
    const items: number[] = [];
    for (const l of b.locks) {
      const s = l.state;
      if (s.doorOpen) open.push(l.lock);
      else if (!s.latched) released.push(l.lock);
      if (s.item) items.push(l.lock);
    }
    const offline = bus.faults.get().offlineBoards.includes(addr) ? ' OFFLINE' : '';
    lines.push(
      `  board ${addr}${offline}: ${b.locks.length} locks, pulse ${b.pulseMs} ms; open: ${open.join(',') || '-'}; ` +
        `released but shut: ${released.join(',') || '-'}; items: ${items.join(',') || '-'}`,
    );
  }
  return lines.join('\n');
}

function toggleLock(list: Faults['stuckLatch'], board: number, lock: number, on: boolean): Faults['stuckLatch'] {
  const rest = list.filter((r) => !(r.board === board && r.lock === lock));
  return on ? [...rest, { board, lock }] : rest;
}

function pickScanner(ctx: CommandContext, name: string | undefined) {
  const names = ctx.sim.scannerNames();
  if (name) return ctx.sim.scanner(name);
  if (names.length === 0) bad('no scanner configured (start with --scanner)');
  return ctx.sim.scanner(names[0]!);
}

/** Runs one command line; returns what to print (may be empty). */
export async function runCommand(ctx: CommandContext, line: string): Promise<string> {
  const words = line.trim().split(/\s+/).filter(Boolean);
  if (words.length === 0) return '';
  const [cmd, ...args] = words;
  const sim = ctx.sim;
  const bus = () => sim.bus(ctx.bus);
  const lockArgs = () => bus().lock(int(args[0], 'board'), int(args[1], 'lock'));
  switch (cmd!.toLowerCase()) {
    case 'help':
    case '?':
      return HELP;
    case 'status':
      return busStatus(args[0] ? sim.bus(args[0]) : bus());
    case 'use':
      sim.bus(args[0] ?? bad('use <bus>'));
      ctx.bus = args[0]!;
      return `current bus: ${ctx.bus}`;
    case 'open': {
      const l = lockArgs();
      const was = l.state;
      l.openDoor();
      if (!l.state.doorOpen) return `board ${l.board} lock ${l.lock}: door did not move (jammed)`;
      return `board ${l.board} lock ${l.lock}: door open${was.latched ? ' (FORCED: latch was engaged)' : ''}`;
    }
    case 'close': {
      const l = lockArgs();
      l.closeDoor();
      return l.state.doorOpen ? `board ${l.board} lock ${l.lock}: door did not move (jammed)` : `board ${l.board} lock ${l.lock}: door closed, latched`;
    }
    case 'put': {
      const l = lockArgs();
      l.putItem();
      return `board ${l.board} lock ${l.lock}: item present`;
    }
    case 'take': {
      const l = lockArgs();
      l.takeItem();
      return `board ${l.board} lock ${l.lock}: empty`;
    }
    case 'pulse': {
      const b = bus().board(int(args[0], 'board'));
      const l = b.lock(int(args[1], 'lock'));
      l.pulse(b.pulseMs);
      const s = l.state;
      return `board ${l.board} lock ${l.lock}: ${s.doorOpen ? 'door open' : s.latched ? 'latch did not release (stuck)' : 'latch released, door shut (jammed)'}`;
    }
    case 'autoclose': {
      const v = args[0] ?? bad('autoclose <ms>|off');
      bus().setAutoClose(v === 'off' ? null : int(v, 'ms'));
      return v === 'off' ? 'doors close only when told' : `doors close by themselves ${v} ms after opening`;
    }
    case 'scan': {
      let chunks = 1;
      let suffix: string | undefined;
      let scannerName: string | undefined;
      const rest: string[] = [];
      for (let i = 0; i < args.length; i++) {
        const a = args[i]!;
        if (a === '-c' || a === '--chunks') chunks = int(args[++i], 'chunks');
        else if (a === '-s' || a === '--suffix') suffix = args[++i];
        else if (a === '--scanner') scannerName = args[++i];
        else rest.push(a);
      }
      if (rest.length === 0) bad('scan <code>');
      const code = rest.join(' ');
      const sc = pickScanner(ctx, scannerName);
      let sfx = sc.suffix;
      if (suffix !== undefined) {
        const s = SUFFIXES[suffix.toLowerCase()];
        if (s === undefined) bad('suffix must be cr, lf, crlf or none');
        sfx = s;
      }
      await sc.scan(code, { chunks, suffix: sfx });
      return `scanner ${sc.name}: sent ${code.length} characters + ${suffixName(sfx)}${chunks > 1 ? ` in ${chunks} chunks` : ''}`;
    }
    case 'pin': {
      const digits = args[0] ?? bad('pin <digits>');
      const sc = pickScanner(ctx, args[1] === '--scanner' ? args[2] : undefined);
      await sc.typePin(digits);
      return `scanner ${sc.name}: keypad sent ${digits.length} digits + # + ${suffixName(sc.suffix)}`;
    }
    case 'fault': {
      const [name, ...fa] = args;
      const b = bus();
      const f = b.faults.get();
      switch (name) {
        case 'noreply':
          b.faults.set({ noReply: onOff(fa[0]) });
          break;
        case 'late':
          b.faults.set({ lateReplyMs: int(fa[0], 'ms') });
          break;
        case 'garbage':
          b.faults.set({ garbageBeforeReply: onOff(fa[0]) });
          break;
        case 'badsum':
        case 'checksum':
          b.faults.set({ badChecksum: onOff(fa[0]) });
          break;
        case 'echo':
          b.faults.set({ echo: onOff(fa[0]) });
          break;
        case 'stuck':
        case 'jam': {
          const board = int(fa[0], 'board');
          const lock = int(fa[1], 'lock');
          b.lock(board, lock); // validates
          const key = name === 'stuck' ? 'stuckLatch' : 'jammedDoor';
          b.faults.set({ [key]: toggleLock(f[key], board, lock, onOff(fa[2])) });
          break;
        }
        case 'offline': {
          const board = int(fa[0], 'board');
          b.board(board); // validates
          const on = onOff(fa[1]);
          const rest = f.offlineBoards.filter((x) => x !== board);
          b.faults.set({ offlineBoards: on ? [...rest, board] : rest });
          break;
        }
        default:
          bad(`unknown fault "${name ?? ''}" (noreply, late, garbage, badsum, stuck, jam, offline, echo)`);
      }
      return `bus ${b.name} faults: ${describeFaults(b.faults.get())}`;
    }
    case 'faults':
      return `bus ${bus().name} faults: ${describeFaults(bus().faults.get())}`;
    case 'clear':
      bus().faults.clear();
      return `bus ${bus().name} faults: none`;
    case 'unplug':
    case 'replug': {
      const target = args[0] ?? ctx.bus;
      const dev = sim.busNames().includes(target) ? sim.bus(target) : sim.scannerNames().includes(target) ? sim.scanner(target) : bad(`no bus or scanner "${target}"`);
      if (cmd === 'unplug') {
        await dev.unplug();
        return `${target} unplugged`;
      }
      await dev.replug();
      return `${target} back at ${'tcpPort' in dev && dev.tcpPort !== null ? `tcp port ${dev.tcpPort}` : dev.path}`;
    }
    case 'frames':
      ctx.frames = onOff(args[0]);
      return `frames ${ctx.frames ? 'on' : 'off'}`;
    case 'quit':
    case 'exit':
      ctx.quit = true;
      return 'bye';
    default:
      return bad(`unknown command "${cmd}" (type help)`);
  }
}
