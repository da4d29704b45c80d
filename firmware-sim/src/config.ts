// Command-line flags and config files (JSON or YAML) for the simulator CLI.
//
//   --bus <dialect>:<addresses>[:key=value...]   repeatable, e.g. kerong-cu16:0,1  generic-8a80:1-3:tcp=0
//        keys: name, path, tcp (port, 0 = free), host, baud, polarity, locks, autoclose
//   --scanner [name][:suffix=cr|lf|crlf|none][:path=...]   repeatable
//   --no-scanner --no-timing --auto-close <ms> --dir <dir> --config <file> --frames
//   --log-level <level> -v --no-repl --control <[host:]port> --help
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { dialects, isDialectName } from '@locker/lockbus';
import YAML from 'yaml';
import { parseControlSpec } from './control';
import { SimError } from './errors';
import { SUFFIXES } from './scanner';
import type { BusOptions, Polarity, ScannerOptions, SimulatorOptions } from './types';

export interface CliConfig {
  options: SimulatorOptions;
  logLevel: string;
  frames: boolean;
  repl: boolean;
  /** `--control [host:]port`: the control port's spec (see control.ts), or null */
  control: string | null;
  help: boolean;
}

export const DEFAULT_DIR = path.join(os.tmpdir(), 'locker-sim');

export const USAGE = `Usage: locker-sim [options]
       locker-sim fleet generate|run [options]   (simulated terminals over MQTT; locker-sim fleet --help)

Simulates RS485 lock-board buses and serial scanners on pseudo-terminals (socat) or TCP.
Default: one kerong-cu16 bus "bus0" with boards 0 and 1 (16 locks each) and one scanner
"scanner0", with links in ${DEFAULT_DIR}/.

Options:
  --bus <dialect>:<addresses>[:key=value...]
        Add a bus (repeatable). dialect: ${Object.keys(dialects).join(', ')}.
        addresses: comma list and ranges, e.g. 0,1 or 0-3.
        keys: name=<bus name>, path=<agent tty path>, tcp=<port> (0 = any free port),
              host=<listen address>, baud=<rate>, polarity=closed-high|closed-low,
              locks=<locks per board>, autoclose=<ms>
        e.g. --bus kerong-cu16:0,1   --bus generic-8a80:1-2:tcp=7000:name=gw
  --scanner [name][:suffix=cr|lf|crlf|none][:path=<agent tty path>]
        Add a scanner on its own pty (repeatable).
  --no-scanner          No scanner (only meaningful without --bus / --config).
  --config <file>       JSON or YAML file with { buses, scanners, realTiming, dir }.
  --dir <dir>           Where pty links without an explicit path go (default ${DEFAULT_DIR}).
  --auto-close <ms>     Doors close by themselves after this long (every bus).
  --no-timing           Deliver bytes instantly instead of at the wire speed of the baud rate.
  --frames              Print every frame (hex and meaning) on stdout from the start.
  --log-level <level>   pino level on stderr (default warn); -v = debug (frames, door events).
  --no-repl             Do not read commands from stdin.
  --control <[host:]port>
                        Also take commands on a TCP control port (line in, one JSON line out;
                        0 = any free port, printed as "control tcp://HOST:PORT"; host default
                        127.0.0.1). For programs that drive the simulator from another process.
  -h, --help            This text.
`;

function fail(msg: string): never {
  throw new SimError('SIM_CONFIG_INVALID', msg);
}

export function parseAddresses(s: string): number[] {
  const out: number[] = [];
  for (const part of s.split(',')) {
    const m = /^(\d+)(?:-(\d+))?$/.exec(part.trim());
    if (!m) fail(`bad board address list "${s}"`);
    const a = Number(m[1]);
    const b = m[2] !== undefined ? Number(m[2]) : a;
    if (b < a || b - a > 255) fail(`bad board address range "${part}"`);
    for (let i = a; i <= b; i++) out.push(i);
  }
  return out;
}

function num(key: string, v: string): number {
  const n = Number(v);
  if (v === '' || !Number.isFinite(n)) fail(`${key} must be a number, got "${v}"`);
  return n;
}

export function parseBusSpec(spec: string, index: number): BusOptions {
  const [dialect, addrs, ...rest] = spec.split(':');
  if (!dialect || !isDialectName(dialect)) fail(`--bus ${spec}: unknown dialect "${dialect}" (${Object.keys(dialects).join(', ')})`);
  if (!addrs) fail(`--bus ${spec}: missing board addresses, e.g. ${dialect}:0,1`);
  const bus: BusOptions = { name: `bus${index}`, dialect, link: { kind: 'pty' }, boards: [] };
  let locks: number | undefined;
  let tcpPort: number | null = null;
  let tcpHost: string | null = null;
  let ptyPath: string | undefined;
  for (const kv of rest) {
    const eq = kv.indexOf('=');
    if (eq < 0) fail(`--bus ${spec}: expected key=value, got "${kv}"`);
    const key = kv.slice(0, eq);
    const value = kv.slice(eq + 1);
    switch (key) {
      case 'name':
        bus.name = value;
        break;
      case 'path':
        ptyPath = value;
        break;
      case 'tcp':
        tcpPort = num(key, value);
        break;
      case 'host':
        tcpHost = value;
        break;
      case 'baud':
        bus.baudRate = num(key, value);
        break;
      case 'polarity':
        if (value !== 'closed-high' && value !== 'closed-low') fail(`--bus ${spec}: polarity must be closed-high or closed-low`);
        bus.polarity = value as Polarity;
        break;
      case 'locks':
        locks = num(key, value);
        break;
      case 'autoclose':
        bus.autoCloseMs = num(key, value);
        break;
      default:
        fail(`--bus ${spec}: unknown key "${key}"`);
    }
  }
  const tcp = tcpPort !== null || tcpHost !== null;
  if (tcp && ptyPath) fail(`--bus ${spec}: path and tcp are exclusive`);
  bus.link = tcp
    ? { kind: 'tcp', port: tcpPort ?? 0, ...(tcpHost ? { host: tcpHost } : {}) }
    : { kind: 'pty', ...(ptyPath ? { path: ptyPath } : {}) };
  bus.boards = parseAddresses(addrs).map((address) => (locks !== undefined ? { address, locks } : { address }));
  return bus;
}

export function parseScannerSpec(spec: string, index: number): ScannerOptions {
  const parts = spec ? spec.split(':') : [];
  const s: ScannerOptions = { name: `scanner${index}`, link: { kind: 'pty' } };
  for (const p of parts) {
    const eq = p.indexOf('=');
    if (eq < 0) {
      if (p) s.name = p;
      continue;
    }
    const key = p.slice(0, eq);
    const value = p.slice(eq + 1);
    if (key === 'suffix') {
      const suffix = SUFFIXES[value.toLowerCase()];
      if (suffix === undefined) fail(`--scanner ${spec}: suffix must be cr, lf, crlf or none`);
      s.suffix = suffix;
    } else if (key === 'path') s.link = { kind: 'pty', path: value };
    else if (key === 'name') s.name = value;
    else fail(`--scanner ${spec}: unknown key "${key}"`);
  }
  return s;
}

/** Reads a JSON or YAML config file. Scanner suffixes may be given as cr/lf/crlf/none. */
export function loadConfigFile(file: string): Partial<SimulatorOptions> {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    fail(`cannot read config ${file}: ${(err as Error).message}`);
  }
  let raw: unknown;
  try {
    raw = YAML.parse(text); // YAML is a superset of JSON
  } catch (err) {
    fail(`config ${file} is not valid JSON/YAML: ${(err as Error).message}`);
  }
  if (!raw || typeof raw !== 'object') fail(`config ${file} must be an object`);
  const cfg = raw as Record<string, unknown>;
  const out: Partial<SimulatorOptions> = {};
  if (cfg.buses !== undefined) {
    if (!Array.isArray(cfg.buses)) fail('config: buses must be a list');
    out.buses = (cfg.buses as BusOptions[]).map((b, i) => ({
      ...b,
      name: b.name ?? `bus${i}`,
      link: b.link ?? { kind: 'pty' },
      boards: (b.boards ?? []).map((x) => (typeof x === 'number' ? { address: x } : x)),
    }));
  }
  if (cfg.scanners !== undefined) {
    if (!Array.isArray(cfg.scanners)) fail('config: scanners must be a list');
    out.scanners = (cfg.scanners as (ScannerOptions & { suffix?: string })[]).map((s, i) => {
      let suffix = s.suffix;
      if (suffix !== undefined && SUFFIXES[suffix.toLowerCase()] !== undefined) suffix = SUFFIXES[suffix.toLowerCase()];
      return { ...s, name: s.name ?? `scanner${i}`, link: s.link ?? { kind: 'pty' }, ...(suffix !== undefined ? { suffix: suffix as ScannerOptions['suffix'] } : {}) };
    });
  }
  if (cfg.realTiming !== undefined) out.realTiming = Boolean(cfg.realTiming);
  if (typeof cfg.dir === 'string') out.dir = cfg.dir;
  return out;
}

export function defaultOptions(): SimulatorOptions {
  return {
    buses: [{ name: 'bus0', dialect: 'kerong-cu16', link: { kind: 'pty' }, boards: [{ address: 0 }, { address: 1 }] }],
    scanners: [{ name: 'scanner0', link: { kind: 'pty' } }],
  };
}

export function parseArgs(argv: string[]): CliConfig {
  const buses: BusOptions[] = [];
  const scanners: ScannerOptions[] = [];
  let file: Partial<SimulatorOptions> = {};
  let noScanner = false;
  let realTiming: boolean | undefined;
  let autoClose: number | undefined;
  let dir: string | undefined;
  let logLevel = 'warn';
  let frames = false;
  let repl = true;
  let control: string | null = null;
  let help = false;
  const next = (i: number, flag: string): string => {
    const v = argv[i + 1];
    if (v === undefined) fail(`${flag} needs a value`);
    return v;
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const [flag, inline] = a.startsWith('--') && a.includes('=') ? [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)] : [a, undefined];
    const value = (): string => {
      if (inline !== undefined) return inline;
      const v = next(i, flag);
      i++;
      return v;
    };
    switch (flag) {
      case '--bus':
        buses.push(parseBusSpec(value(), buses.length));
        break;
      case '--scanner': {
        let spec = inline ?? '';
        if (inline === undefined && argv[i + 1] !== undefined && !argv[i + 1]!.startsWith('-')) spec = argv[++i]!;
        scanners.push(parseScannerSpec(spec, scanners.length));
        break;
      }
      case '--no-scanner':
        noScanner = true;
        break;
      case '--config':
        file = loadConfigFile(value());
        break;
      case '--dir':
        dir = value();
        break;
      case '--auto-close':
        autoClose = num('--auto-close', value());
        break;
      case '--no-timing':
        realTiming = false;
        break;
      case '--frames':
        frames = true;
        break;
      case '--log-level':
        logLevel = value();
        break;
      case '-v':
      case '--verbose':
        logLevel = 'debug';
        break;
      case '--no-repl':
        repl = false;
        break;
      case '--control':
        control = value();
        parseControlSpec(control); // validates
        break;
      case '-h':
      case '--help':
        help = true;
        break;
      default:
        fail(`unknown option ${a} (see --help)`);
    }
  }
  const explicit = buses.length > 0 || file.buses !== undefined;
  const defaults = defaultOptions();
  const options: SimulatorOptions = {
    buses: explicit ? [...(file.buses ?? []), ...buses] : defaults.buses,
    scanners: [...(file.scanners ?? []), ...scanners],
    dir: dir ?? file.dir ?? DEFAULT_DIR,
  };
  if (!explicit && scanners.length === 0 && file.scanners === undefined && !noScanner) options.scanners = defaults.scanners;
  if (noScanner) options.scanners = [];
  const rt = realTiming ?? file.realTiming;
  if (rt !== undefined) options.realTiming = rt;
  if (autoClose !== undefined) for (const b of options.buses) b.autoCloseMs = autoClose;
  return { options, logLevel, frames, repl, control, help };
}
