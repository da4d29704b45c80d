// The simulator: buses of lock boards and serial scanners, each reachable over a real
// pseudo-terminal (socat) or, for buses, a TCP port. Constructor only assigns; start() builds.
import { EventEmitter } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { dialects, isDialectName } from '@locker/lockbus';
import pino, { type Logger } from 'pino';
import { SimBus } from './bus';
import { SimError } from './errors';
import { PtyLink, TcpLink, type Link } from './link';
import { SimScanner } from './scanner';
import type { DoorChangeEvent, FrameEvent, SimulatorOptions } from './types';

const NAME_RE = /^[A-Za-z0-9_.-]{1,40}$/;

/** Checks options; throws SimError('SIM_CONFIG_INVALID') with a message naming the problem. */
export function validateOptions(o: SimulatorOptions): void {
  const bad = (msg: string): never => {
    throw new SimError('SIM_CONFIG_INVALID', msg);
  };
  if (!o || !Array.isArray(o.buses)) bad('buses must be a list');
  const names = new Set<string>();
  for (const b of o.buses) {
    if (typeof b.name !== 'string' || !NAME_RE.test(b.name)) bad(`bus name ${JSON.stringify(b.name)} must match ${NAME_RE}`);
    if (names.has(b.name)) bad(`duplicate name ${b.name}`);
    names.add(b.name);
    if (!isDialectName(b.dialect)) bad(`bus ${b.name}: unknown dialect ${JSON.stringify(b.dialect)} (${Object.keys(dialects).join(', ')})`);
    const d = dialects[b.dialect];
    if (!b.link || (b.link.kind !== 'pty' && b.link.kind !== 'tcp')) bad(`bus ${b.name}: link.kind must be pty or tcp`);
    if (b.link.kind === 'tcp' && b.link.port !== undefined && !(Number.isInteger(b.link.port) && b.link.port >= 0 && b.link.port < 65536)) {
      bad(`bus ${b.name}: bad TCP port ${b.link.port}`);
    }
    if (b.baudRate !== undefined && !(Number.isFinite(b.baudRate) && b.baudRate > 0)) bad(`bus ${b.name}: bad baudRate`);
    if (b.polarity !== undefined && b.polarity !== 'closed-high' && b.polarity !== 'closed-low') bad(`bus ${b.name}: polarity must be closed-high or closed-low`);
    if (b.autoCloseMs !== undefined && b.autoCloseMs !== null && !(b.autoCloseMs >= 0)) bad(`bus ${b.name}: bad autoCloseMs`);
    if (!Array.isArray(b.boards) || b.boards.length === 0) bad(`bus ${b.name}: needs at least one board`);
    const seen = new Set<number>();
    for (const board of b.boards) {
      const [lo, hi] = d.boardRange;
      if (!Number.isInteger(board.address) || board.address < lo || board.address > hi) bad(`bus ${b.name}: board address ${board.address} not in ${lo}..${hi} for ${d.name}`);
      if (seen.has(board.address)) bad(`bus ${b.name}: duplicate board address ${board.address}`);
      seen.add(board.address);
      if (board.locks !== undefined && !(Number.isInteger(board.locks) && board.locks >= 1 && board.locks <= d.maxLocks)) {
        bad(`bus ${b.name}: board ${board.address} lock count ${board.locks} not in 1..${d.maxLocks}`);
      }
    }
  }
  for (const s of o.scanners ?? []) {
    if (typeof s.name !== 'string' || !NAME_RE.test(s.name)) bad(`scanner name ${JSON.stringify(s.name)} must match ${NAME_RE}`);
    if (names.has(s.name)) bad(`duplicate name ${s.name}`);
    names.add(s.name);
    if (s.suffix !== undefined && !['\r', '\n', '\r\n', ''].includes(s.suffix)) bad(`scanner ${s.name}: suffix must be CR, LF, CRLF or empty`);
  }
}

export class Simulator extends EventEmitter {
  private readonly buses = new Map<string, SimBus>();
  private readonly scanners = new Map<string, SimScanner>();
  private tmpDir: string | null = null;
  private started = false;
  private log: Logger | null = null;

  constructor(private readonly opts: SimulatorOptions) {
    super();
  }

  override on(event: 'frame', fn: (e: FrameEvent) => void): this;
  override on(event: 'door', fn: (e: DoorChangeEvent) => void): this;
  override on(event: string | symbol, fn: (...args: any[]) => void): this;
  override on(event: string | symbol, fn: (...args: any[]) => void): this {
    return super.on(event, fn);
  }

  async start(): Promise<void> {
    if (this.started) throw new SimError('SIM_ALREADY_STARTED', 'simulator already started');
    validateOptions(this.opts);
    this.started = true;
    const root = this.opts.logger ?? pino({ level: 'silent' });
    this.log = root.child({ ns: 'sim' });
    const realTiming = this.opts.realTiming ?? true;
    const needsDir =
      this.opts.buses.some((b) => b.link.kind === 'pty') || (this.opts.scanners ?? []).length > 0;
    if (needsDir) this.tmpDir = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-sim-'));
    const agentDir = this.opts.dir ?? this.tmpDir!;
    if (this.opts.dir) fs.mkdirSync(this.opts.dir, { recursive: true });
    try {
      for (const b of this.opts.buses) {
        const dialect = dialects[b.dialect];
        const log = root.child({ ns: `sim.bus.${b.name}` });
        const baud = b.baudRate ?? dialect.defaultBaudRate;
        const link: Link =
          b.link.kind === 'pty'
            ? new PtyLink(b.link.path ?? path.join(agentDir, b.name), path.join(this.tmpDir!, `${b.name}.sim`), baud, log)
            : new TcpLink(b.link.port ?? 0, b.link.host ?? '127.0.0.1', log);
        const bus = new SimBus(b, {
          dialect,
          link,
          log,
          realTiming,
          onFrame: (e) => this.emit('frame', e),
          onDoor: (e) => this.emit('door', e),
        });
        this.buses.set(b.name, bus);
        await bus.start();
        log.info({ path: bus.path, tcpPort: bus.tcpPort, dialect: dialect.name, baud, boards: bus.boardAddresses }, 'bus up');
      }
      for (const s of this.opts.scanners ?? []) {
        const log = root.child({ ns: `sim.scanner.${s.name}` });
        const link = new PtyLink(s.link.path ?? path.join(agentDir, s.name), path.join(this.tmpDir!, `${s.name}.sim`), 9600, log);
        const scanner = new SimScanner(s, link, log);
        this.scanners.set(s.name, scanner);
        await scanner.start();
        log.info({ path: scanner.path }, 'scanner up');
      }
    } catch (err) {
      await this.stop();
      throw err;
    }
  }

  async stop(): Promise<void> {
    const all: Promise<void>[] = [];
    for (const b of this.buses.values()) all.push(b.stop());
    for (const s of this.scanners.values()) all.push(s.stop());
    await Promise.allSettled(all);
    this.buses.clear();
    this.scanners.clear();
    if (this.tmpDir) fs.rmSync(this.tmpDir, { recursive: true, force: true });
    this.tmpDir = null;
    this.started = false;
  }

  bus(name: string): SimBus {
    const b = this.buses.get(name);
    if (!b) throw new SimError(this.started ? 'SIM_UNKNOWN_BUS' : 'SIM_NOT_STARTED', `no bus ${name}`);
    return b;
  }

  scanner(name: string): SimScanner {
    const s = this.scanners.get(name);
    if (!s) throw new SimError(this.started ? 'SIM_UNKNOWN_SCANNER' : 'SIM_NOT_STARTED', `no scanner ${name}`);
    return s;
  }

  busNames(): string[] {
    return [...this.buses.keys()];
  }

  scannerNames(): string[] {
    return [...this.scanners.keys()];
  }
}
