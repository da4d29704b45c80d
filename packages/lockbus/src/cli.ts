// Wiring check for a lock bus (commissioning): which boards answer, their locks and items, and
// signs of two boards set to the same address (garbled answers). Also a one-off unlock.
//
//   npx tsx packages/lockbus/src/cli.ts scan   --port /dev/ttyUSB0 --dialect kerong-cu16 [--baud 19200] [--boards 0-14] [--polarity closed-high] [--json]
//   npx tsx packages/lockbus/src/cli.ts unlock --port /dev/ttyUSB0 --dialect kerong-cu16 --board 0 --lock 3 [--watch 5000]
//
// Exit codes: 0 ok, 1 usage or port error, 2 scan found no board / unlock not confirmed.
import { parseArgs } from 'node:util';
import { pathToFileURL } from 'node:url';
import pino from 'pino';
import { dialects, isDialectName, type Dialect } from './codec/index';
import { LockBus, type Polarity } from './driver/lock-bus';
import { LockBusError } from './errors';
import { resolveBaudRate } from './transport/factory';

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

const USAGE = `usage:
  locker-lockbus scan   --port <tty|tcp://host:port> --dialect <${Object.keys(dialects).join('|')}> [--baud N] [--boards 0-14|1,2,5] [--polarity closed-high|closed-low] [--locks N] [--timeout ms] [--json]
  locker-lockbus unlock --port <...> --dialect <...> --board N --lock N [--baud N] [--polarity ...] [--watch ms]`;

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

export async function main(argv: string[], out: (s: string) => void = (s) => console.log(s)): Promise<number> {
  const [cmd, ...rest] = argv;
  if (cmd !== 'scan' && cmd !== 'unlock') {
    out(USAGE);
    return 1;
  }
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
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
      },
    }));
  } catch (err) {
    out(`${(err as Error).message}\n${USAGE}`);
    return 1;
  }
  const port = values.port as string | undefined;
  const dialectName = (values.dialect as string | undefined) ?? '';
  if (!port || !isDialectName(dialectName)) {
    out(`--port and --dialect are required\n${USAGE}`);
    return 1;
  }
  const d = dialects[dialectName];
  const polarity = ((values.polarity as string | undefined) ?? 'closed-high') as Polarity;
  if (polarity !== 'closed-high' && polarity !== 'closed-low') {
    out('--polarity must be closed-high or closed-low');
    return 1;
  }
  // --baud, else ?baud= in --port, else the dialect default: resolved once, by the driver's rule
  let baudRate: number;
  try {
    baudRate = resolveBaudRate(port, values.baud ? Number(values.baud) : undefined, d.defaultBaudRate);
  } catch (err) {
    out((err as Error).message);
    return 1;
  }
  // locks fitted per board (the wire carries more bits than a small board has: 8A/80 sends 24+)
  const locks = values.locks ? Number(values.locks) : d.locksPerBoard;
  if (!Number.isInteger(locks) || locks < 1 || locks > d.maxLocks) {
    out(`--locks must be 1..${d.maxLocks}`);
    return 1;
  }
  const logger = pino({ level: values.verbose ? 'debug' : 'silent' });
  try {
    if (cmd === 'scan') {
      const addresses = parseBoards((values.boards as string | undefined) ?? `${d.boardRange[0]}-${Math.min(d.boardRange[1], d.boardRange[0] + 15)}`, d);
      const bus = new LockBus({
        name: 'scan',
        port,
        dialect: d,
        baudRate,
        polarity,
        boards: addresses.map((address) => ({ address, locks })),
        polling: false,
        failIfPortMissing: true,
        replyTimeoutMs: values.timeout ? Number(values.timeout) : 150,
        logger,
      });
      await bus.start();
      try {
        const report: ScanReport = { port, dialect: d.name, baudRate, polarity, boards: await scanBus(bus, addresses) };
        out(values.json ? JSON.stringify(report, null, 2) : formatReport(report));
        return report.boards.some((b) => b.result !== 'no-answer') ? 0 : 2;
      } finally {
        await bus.stop();
      }
    }
    // unlock
    const board = Number(values.board);
    const lock = Number(values.lock);
    if (!Number.isInteger(board) || !Number.isInteger(lock)) {
      out(`--board and --lock are required\n${USAGE}`);
      return 1;
    }
    const watchMs = values.watch ? Number(values.watch) : 5000;
    const bus = new LockBus({ name: 'cli', port, dialect: d, baudRate, polarity, boards: [{ address: board, locks: Math.max(locks, lock) }], failIfPortMissing: true, jamWindowMs: watchMs, logger });
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
        return 2;
      }
      const outcome = new Promise<string>((resolve) => {
        bus.on('doorOpened', (e) => e.lock === lock && resolve(`door ${board}/${lock} opened`));
        bus.on('jam', (e) => e.lock === lock && resolve(`no opening of ${board}/${lock} within ${watchMs} ms (jam: ${e.cause})`));
      });
      const before = bus.locks(board)[lock - 1];
      const r = await bus.unlock(board, lock);
      out(`unlock sent to board ${board} lock ${lock}${before?.door === 'open' ? ' (door was already open)' : ''}${r.reply ? `; board answered ${JSON.stringify(r.reply)}` : ''}`);
      if (before?.door === 'open') return 0;
      const msg = await outcome;
      out(msg);
      return msg.includes('opened') ? 0 : 2;
    } finally {
      await bus.stop();
    }
  } catch (err) {
    const code = err instanceof LockBusError ? err.code : 'ERROR';
    out(`error ${code}: ${(err as Error).message}`);
    return 1;
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href || process.argv[1]?.endsWith('locker-lockbus.js')) {
  main(process.argv.slice(2)).then((code) => process.exit(code));
}
