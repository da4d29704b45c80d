// Which lock-bus ports the running terminal agent holds (docs/lockbus.md, "Which to use when").
// The agent writes a claim file per bus port while it runs, in `<its state directory>/ports/`
// (the directory of its store: /var/lib/locker under systemd, ./data in the demo); the wiring-check
// CLI reads them and refuses a port the agent holds: its polling and the CLI's scan would
// interleave on the wire, and the garbled answers look like boards that are not there.
//
// A serial port is also locked by the OS (serialport's `lock: true`: flock on the tty, on Linux
// and macOS), so a second opener fails whatever the claim files say; an RS485-over-TCP gateway has
// no such lock (it accepts several connections and mixes them on the bus): there the claim file is
// the only guard.
//
// A claim counts only while its process is alive: the pid answers signal 0 and, where /proc
// exists, the boot and the process's start time are those recorded (a pid reused after a reboot or
// a crash is not the agent). Stale claims are ignored and overwritten.
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { parsePortUrl } from './transport/factory';

export interface PortClaim {
  /** the port as configured (e.g. tcp://10.0.0.7:4196, /dev/ttyUSB0?baud=19200) */
  port: string;
  /** what identifies the port whatever its spelling (portKey) */
  key: string;
  bus: string;
  pid: number;
  startedAt: string;
  /** Linux: /proc/sys/kernel/random/boot_id and the process's start time in clock ticks (field 22 of /proc/<pid>/stat) */
  bootId?: string;
  startTicks?: string;
  /** the agent's diagnostics page, when it serves one (where the technician runs the bus scan) */
  diagnosticsUrl?: string;
}

export const CLAIMS_SUBDIR = 'ports';
/** Where the CLI looks when no --agent-state is given: the systemd unit's StateDirectory and the demo's data directory. */
export const DEFAULT_AGENT_STATE_DIRS = ['/var/lib/locker', './data'];

/**
 * The identity of a port: a serial device by its real path (a /dev/serial/by-id/ link and the
 * tty it points to are one port; the baud rate does not matter), a TCP gateway by host and port.
 */
export function portKey(port: string): string {
  const p = parsePortUrl(port);
  if (p.kind === 'tcp') return `tcp://${p.host.toLowerCase()}:${p.port}`;
  let real = p.path;
  try {
    real = fs.realpathSync(p.path);
  } catch {
    /* not there (now): its spelling */
  }
  return `serial:${real}`;
}

function claimFile(dir: string, key: string): string {
  return path.join(dir, CLAIMS_SUBDIR, `${crypto.createHash('sha256').update(key).digest('hex').slice(0, 16)}.json`);
}

function readOr(file: string): string | undefined {
  try {
    return fs.readFileSync(file, 'utf8').trim();
  } catch {
    return undefined;
  }
}

/** The start time of a process in clock ticks since boot (Linux), undefined elsewhere. */
function startTicks(pid: number): string | undefined {
  const stat = readOr(`/proc/${pid}/stat`);
  if (!stat) return undefined;
  // the command name (field 2) is in parentheses and may contain spaces: count after its ")"
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return fields[19]; // field 22 overall
}

function bootId(): string | undefined {
  return readOr('/proc/sys/kernel/random/boot_id');
}

/** Is the process that wrote this claim still running? */
export function claimAlive(c: PortClaim): boolean {
  if (!Number.isInteger(c.pid) || c.pid <= 0) return false;
  try {
    process.kill(c.pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false; // ESRCH: gone (EPERM: alive, another user's)
  }
  if (c.bootId && bootId() && c.bootId !== bootId()) return false;
  if (c.startTicks) {
    const now = startTicks(c.pid);
    if (now !== undefined && now !== c.startTicks) return false;
  }
  return true;
}

/**
 * Writes this process's claims on the given ports (the agent, at start); returns the function that
 * removes them (at stop). A claim is replaced atomically (written aside, then renamed).
 */
export function claimPorts(stateDir: string, ports: { bus: string; port: string }[], extra: { diagnosticsUrl?: string } = {}): () => void {
  const dir = path.join(stateDir, CLAIMS_SUBDIR);
  fs.mkdirSync(dir, { recursive: true });
  const boot = bootId();
  const ticks = startTicks(process.pid);
  const files: string[] = [];
  for (const { bus, port } of ports) {
    const key = portKey(port);
    const claim: PortClaim = { port, key, bus, pid: process.pid, startedAt: new Date().toISOString(), ...(boot ? { bootId: boot } : {}), ...(ticks ? { startTicks: ticks } : {}), ...extra };
    const file = claimFile(stateDir, key);
    const tmp = `${file}.${process.pid}.tmp`;
    fs.writeFileSync(tmp, `${JSON.stringify(claim)}\n`, { mode: 0o644 });
    fs.renameSync(tmp, file);
    files.push(file);
  }
  return () => {
    for (const f of files) {
      // only our own: another agent may have claimed it since (ours was stale to it)
      try {
        const c = JSON.parse(fs.readFileSync(f, 'utf8')) as PortClaim;
        if (c.pid === process.pid) fs.rmSync(f, { force: true });
      } catch {
        /* gone already */
      }
    }
  };
}

/** The live claim on this port in any of these state directories, or null. */
export function findPortHolder(stateDirs: string[], port: string): PortClaim | null {
  const key = portKey(port);
  for (const dir of stateDirs) {
    const raw = readOr(claimFile(dir, key));
    if (!raw) continue;
    let c: PortClaim;
    try {
      c = JSON.parse(raw) as PortClaim;
    } catch {
      continue;
    }
    if (c.key === key && claimAlive(c)) return c;
  }
  return null;
}
