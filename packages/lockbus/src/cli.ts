// Wiring check for a lock bus (commissioning): which boards answer, their locks and items, and
// signs of two boards set to the same address (garbled answers). Also a one-off unlock.
//
//   locker-lockbus scan   --port /dev/ttyUSB0 --dialect kerong-cu16 [--baud 19200] [--boards 0-14] [--polarity closed-high] [--json]
//   locker-lockbus unlock --port /dev/ttyUSB0 --dialect kerong-cu16 --board 0 --lock 3 [--watch 5000]
//
// A port the running terminal agent holds is refused (its claim file in <state>/ports/, see
// port-claim.ts; a serial port's OS lock too): the agent's polling and this scan would interleave on
// the wire and show boards that are not there. The technician uses the page's bus scan then.
//
// Exit codes (EXIT): 0 ok, 1 port or bus error, 2 usage (an unknown flag, a bad or missing value:
// one line on stderr) or the port is held by the running agent (one line on stderr), 3 scan found
// no board / unlock not confirmed. --help: usage, exit 0.
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import pino from 'pino';
import { parseCliArgs } from '@locker/common';
import { dialects, isDialectName, type Dialect } from './codec/index';
import { LockBus, type Polarity } from './driver/lock-bus';
import { LockBusError } from './errors';
import { createTransport, resolveBaudRate } from './transport/factory';
import type { Transport } from './transport/types';
import { DEFAULT_AGENT_STATE_DIRS, findPortHolder, type PortClaim } from './port-claim';

export const EXIT = { ok: 0, error: 1, usage: 2, inUse: 2, noAnswer: 3 } as const;

export interface BoardScan {
  address: number;
  result: 'answers' | 'no-answer' | 'garbled';
  /** Attempts made and how each ended (ok / NO_REPLY / GARBLED_REPLY / BAD_CHECKSUM). */
  attempts: string[];
  openLocks?: number[];
  items?: number[] | null;
  locks?: number;
  note?: string;
}

export interface ScanReport {
  port: string;
  dialect: string;
  baudRate: number;
  polarity: Polarity;
  boards: BoardScan[];
}

export const USAGE = `locker-lockbus: wiring check of a lock bus (which boards answer), and a one-off unlock

Usage:
  locker-lockbus scan   --port <tty|tcp://host:port> --dialect <${Object.keys(dialects).join('|')}> [--baud N] [--boards 0-14|1,2,5] [--polarity closed-high|closed-low] [--locks N] [--timeout ms] [--json] [--verbose]
  locker-lockbus unlock --port <...> --dialect <...> --board N --lock N [--baud N] [--polarity ...] [--locks N] [--watch ms] [--verbose]
  locker-lockbus --help

  --agent-state <dir>  the terminal agent's state directory (where its store is), to see whether it
                       holds the port (default: the directory of $LOCKER_AGENT_STORE_PATH,
                       ${DEFAULT_AGENT_STATE_DIRS.join(', ')}). A port the running agent holds is refused:
                       use the bus scan on the agent's diagnostics page instead (or stop the agent).

Exit codes: 0 ok; 1 port or bus error; 2 usage (unknown flag, bad or missing value), or the port
is held by the running terminal agent; 3 scan found no board, or unlock not confirmed (board
silent, door did not open).`;

/** Thrown when the running agent holds the port: one line on stderr, exit 2. */
class InUseError extends Error {}

/** The one line that refuses a port the agent holds. */
export function inUseMessage(port: string, holder: PortClaim | null): string {
  const who = holder ? `the terminal agent (pid ${holder.pid}, bus ${holder.bus})` : 'another process (the terminal agent?)';
  const page = holder?.diagnosticsUrl ? ` (${holder.diagnosticsUrl})` : '';
  return `${port} is held by ${who}: scanning beside its polling would report boards that are not there; use the bus scan on the agent's diagnostics page${page}, which pauses the agent's polling, or stop the agent first`;
}

/** The state directories to look in for the agent's claims. */
function agentStateDirs(flag: string | undefined): string[] {
  if (flag) return [flag];
  const env = process.env.LOCKER_AGENT_STORE_PATH;
  return [...(env ? [path.dirname(path.resolve(env))] : []), ...DEFAULT_AGENT_STATE_DIRS];
}

class UsageError extends Error {}

const usageError = (msg: string): never => {
  throw new UsageError(msg);
};

/** An integer flag within [min, max], or the fallback when absent; anything else is a usage error. */
function intFlag(values: Record<string, string | boolean | undefined>, name: string, fallback: number | undefined, min: number, max?: number): number {
  const raw = values[name];
  if (raw === undefined) return fallback ?? usageError(`--${name} is required (see --help)`);
  const n = Number(raw);
  if (typeof raw !== 'string' || !/^\d+$/.test(raw) || n < min || (max !== undefined && n > max)) {
    usageError(`--${name} must be an integer ${max === undefined ? `>= ${min}` : `${min}..${max}`}, got ${JSON.stringify(raw)} (see --help)`);
  }
  return n;
}

export function parseBoards(spec: string, d: Dialect): number[] {
  const out = new Set<number>();
  for (const part of spec.split(',').map((s) => s.trim()).filter(Boolean)) {
    const m = /^(\d+)(?:-(\d+))?$/.exec(part);
    if (!m) throw new LockBusError('BAD_CONFIG', `bad board list: ${spec}`);
    const a = Number(m[1]);
    const b = m[2] !== undefined ? Number(m[2]) : a;
    for (let x = Math.min(a, b); x <= Math.max(a, b); x++) {
      if (x < d.boardRange[0] || x > d.boardRange[1]) throw new LockBusError('BAD_CONFIG', `board ${x} outside ${d.boardRange[0]}..${d.boardRange[1]} for ${d.name}`);
      out.add(x);
    }
  }
  return [...out].sort((x, y) => x - y);
}

const list = (bits: boolean[], want: boolean) => bits.map((b, i) => (b === want ? i + 1 : 0)).filter((n) => n > 0);

/** Reads every address once (absent boards cost one timeout); answering or garbled ones twice more. */
export async function scanBus(bus: LockBus, addresses: number[]): Promise<BoardScan[]> {
  const out: BoardScan[] = [];
  for (const address of addresses) {
    const attempts: string[] = [];
    let last: Awaited<ReturnType<LockBus['readStatus']>> | null = null;
    const snapshots = new Set<string>();
    for (let i = 0; i < 3; i++) {
      try {
        const r = await bus.readStatus(address);
        last = r;
        snapshots.add(JSON.stringify(r.closed));
        attempts.push('ok');
      } catch (err) {
        const code = err instanceof LockBusError ? err.code : 'ERROR';
        attempts.push(code);
        if (code === 'PORT_LOST' || code === 'NOT_SENT') throw err;
      }
      if (i === 0 && attempts[0] === 'NO_REPLY') break;
    }
    const ok = attempts.filter((a) => a === 'ok').length;
    const bad = attempts.filter((a) => a === 'GARBLED_REPLY' || a === 'BAD_CHECKSUM').length;
    if (ok === 0 && bad === 0) {
      out.push({ address, result: 'no-answer', attempts });
      continue;
    }
    const entry: BoardScan = { address, result: bad > 0 ? 'garbled' : 'answers', attempts };
    if (last) {
      entry.locks = last.closed.length;
      entry.openLocks = list(last.closed, false);
      entry.items = last.items ? list(last.items, true) : null;
    }
    if (bad > 0) entry.note = 'garbled or bad-checksum answers: two boards on the same address (check the DIP switches), or a wiring / termination fault';
    else if (snapshots.size > 1) entry.note = 'answers differ between reads: a door moved, or two boards share this address';
    out.push(entry);
  }
  return out;
}

export function formatReport(r: ScanReport): string {
  const lines = [`bus ${r.port}: ${r.dialect}, ${r.baudRate} baud, ${r.polarity}`];
  for (const b of r.boards) {
    if (b.result === 'no-answer') {
      lines.push(`  board ${String(b.address).padStart(2)}: no answer`);
      continue;
    }
    const open = b.openLocks?.length ? b.openLocks.join(',') : 'none';
    const items = b.items === null || b.items === undefined ? 'no item sensors' : b.items.length ? b.items.join(',') : 'none';
    lines.push(`  board ${String(b.address).padStart(2)}: ${b.result === 'answers' ? 'answers' : 'GARBLED'} (${b.attempts.join(' ')}); ${b.locks ?? '?'} locks; open: ${open}; items: ${items}`);
    if (b.note) lines.push(`            ! ${b.note}`);
  }
  const found = r.boards.filter((b) => b.result !== 'no-answer').map((b) => b.address);
  lines.push(found.length ? `${found.length} board(s) answer: ${found.join(', ')}` : 'no board answers: check port, baud rate, dialect, A/B wiring and power');
  return lines.join('\n');
}

/** What the CLI opens its port with (the bin: createTransport; a test wraps it to inject a fault into the real link). */
export interface CliDeps {
  createTransport: (port: string, opts: { baudRate: number }) => Transport;
}

export async function main(
  argv: string[],
  out: (s: string) => void = (s) => console.log(s),
  err: (s: string) => void = (s) => console.error(s),
  deps: CliDeps = { createTransport },
): Promise<number> {
  try {
    return await run(argv, out, deps);
  } catch (e) {
    if (e instanceof InUseError) {
      err(`locker-lockbus: ${e.message}`);
      return EXIT.inUse;
    }
    if (!(e instanceof UsageError)) throw e;
    err(`locker-lockbus: ${e.message}`);
    return EXIT.usage;
  }
}

async function run(argv: string[], out: (s: string) => void, deps: CliDeps): Promise<number> {
  const [cmd, ...rest] = argv;
  if (cmd === '--help' || cmd === '-h' || cmd === 'help') {
    out(USAGE);
    return EXIT.ok;
  }
  if (cmd === undefined) usageError('a command is required: scan or unlock (see --help)');
  if (cmd !== 'scan' && cmd !== 'unlock') usageError(cmd!.startsWith('-') ? `unknown option ${cmd} (see --help)` : `unknown command ${cmd}: scan or unlock (see --help)`);
  const { values } = parseCliArgs(
    {
      args: rest,
      options: {
        port: { type: 'string' },
        dialect: { type: 'string' },
        baud: { type: 'string' },
        boards: { type: 'string' },
        polarity: { type: 'string' },
        timeout: { type: 'string' },
        board: { type: 'string' },
        lock: { type: 'string' },
        locks: { type: 'string' },
        watch: { type: 'string' },
        json: { type: 'boolean' },
        verbose: { type: 'boolean' },
        'agent-state': { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    },
    usageError,
  );
  if (values.help) {
    out(USAGE);
    return EXIT.ok;
  }
  const port = values.port;
  if (!port) usageError('--port is required (see --help)');
  const dialectName = values.dialect;
  if (!dialectName) usageError('--dialect is required (see --help)');
  if (!isDialectName(dialectName!)) usageError(`unknown dialect ${dialectName}: one of ${Object.keys(dialects).join(', ')} (see --help)`);
  const d = dialects[dialectName as keyof typeof dialects];
  const polarity = (values.polarity ?? 'closed-high') as Polarity;
  if (polarity !== 'closed-high' && polarity !== 'closed-low') usageError(`--polarity must be closed-high or closed-low, got ${JSON.stringify(polarity)} (see --help)`);
  // --baud, else ?baud= in --port, else the dialect default: resolved once, by the driver's rule
  const baud = values.baud === undefined ? undefined : intFlag(values, 'baud', undefined, 1);
  let baudRate: number;
  try {
    baudRate = resolveBaudRate(port!, baud, d.defaultBaudRate);
  } catch (e) {
    return usageError(`${(e as Error).message} (see --help)`);
  }
  // locks fitted per board (the wire carries more bits than a small board has: 8A/80 sends 24+)
  const locks = intFlag(values, 'locks', d.locksPerBoard, 1, d.maxLocks);
  const replyTimeoutMs = intFlag(values, 'timeout', 150, 1, 60_000);
  let addresses: number[] = [];
  if (cmd === 'scan') {
    try {
      addresses = parseBoards(values.boards ?? `${d.boardRange[0]}-${Math.min(d.boardRange[1], d.boardRange[0] + 15)}`, d);
    } catch (e) {
      return usageError(`${(e as Error).message} (see --help)`);
    }
  }
  const board = cmd === 'unlock' ? intFlag(values, 'board', undefined, d.boardRange[0], d.boardRange[1]) : 0;
  const lock = cmd === 'unlock' ? intFlag(values, 'lock', undefined, 1, d.maxLocks) : 0;
  const watchMs = intFlag(values, 'watch', 5000, 1);
  const logger = pino({ level: values.verbose ? 'debug' : 'silent' });
  // the running agent's port: refused before anything is sent on it
  const holder = findPortHolder(agentStateDirs(values['agent-state'] as string | undefined), port!);
  if (holder) throw new InUseError(inUseMessage(port!, holder));
  try {
    if (cmd === 'scan') {
      const bus = new LockBus({
        name: 'scan',
        transport: deps.createTransport(port!, { baudRate }),
        dialect: d,
        baudRate,
        polarity,
        boards: addresses.map((address) => ({ address, locks })),
        polling: false,
        failIfPortMissing: true,
        replyTimeoutMs,
        logger,
      });
      await bus.start();
      try {
        const report: ScanReport = { port: port!, dialect: d.name, baudRate, polarity, boards: await scanBus(bus, addresses) };
        out(values.json ? JSON.stringify(report, null, 2) : formatReport(report));
        return report.boards.some((b) => b.result !== 'no-answer') ? EXIT.ok : EXIT.noAnswer;
      } finally {
        await bus.stop();
      }
    }
    // unlock
    const bus = new LockBus({ name: 'cli', transport: deps.createTransport(port!, { baudRate }), dialect: d, baudRate, polarity, boards: [{ address: board, locks: Math.max(locks, lock) }], failIfPortMissing: true, jamWindowMs: watchMs, logger });
    await bus.start();
    try {
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, 2000);
        bus.once('boardOnline', () => {
          clearTimeout(t);
          resolve();
        });
      });
      if (bus.boardOnline(board) !== true) {
        out(`board ${board} does not answer`);
        return EXIT.noAnswer;
      }
      let timer: NodeJS.Timeout | undefined;
      try {
        const outcome = new Promise<string>((resolve) => {
          bus.on('doorOpened', (e) => e.lock === lock && resolve(`door ${board}/${lock} opened`));
          bus.on('jam', (e) => e.lock === lock && resolve(`no opening of ${board}/${lock} within ${watchMs} ms (jam: ${e.cause})`));
          // no jam is concluded for an unlock that was not watched (a failed poll) or may not have
          // reached the board (its write broke off): the door is found shut
          bus.on('unlockUnobserved', (e) => e.lock === lock && resolve(`door ${board}/${lock} found shut: the unlock was not seen to open it`));
          timer = setTimeout(() => resolve(`no outcome of ${board}/${lock} seen within ${watchMs + 2000} ms`), watchMs + 2000);
        });
        const before = bus.locks(board)[lock - 1];
        const r = await bus.unlock(board, lock);
        if (r.replyError === 'WRITE_FAILED') out(`unlock to board ${board} lock ${lock}: the write broke off; the lock may or may not have pulsed (not sent again)`);
        else out(`unlock sent to board ${board} lock ${lock}${before?.door === 'open' ? ' (door was already open)' : ''}${r.reply ? `; board answered ${JSON.stringify(r.reply)}` : ''}`);
        if (before?.door === 'open') return EXIT.ok;
        const msg = await outcome;
        out(msg);
        return msg.includes('opened') ? EXIT.ok : EXIT.noAnswer;
      } finally {
        clearTimeout(timer);
      }
    } finally {
      await bus.stop();
    }
  } catch (e) {
    const code = e instanceof LockBusError ? e.code : 'ERROR';
    // a serial port another process holds (serialport's flock): most likely the agent, with its
    // claims in a state directory not looked in
    if (code === 'PORT_OPEN_FAILED' && /cannot lock port|resource temporarily unavailable|EAGAIN|EWOULDBLOCK/i.test((e as Error).message)) throw new InUseError(inUseMessage(port!, null));
    out(`error ${code}: ${(e as Error).message}`);
    return EXIT.error;
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href || process.argv[1]?.endsWith('locker-lockbus.js')) {
  main(process.argv.slice(2)).then((code) => process.exit(code));
}
