// Pseudo-terminal pairs made by socat. Each pair has an agent end (the path handed to the edge
// agent or the wiring-check CLI, standing in for /dev/ttyUSB0) and a simulator end that the
// simulator opens itself with the `serialport` package. Killing socat makes both links vanish,
// which is how unplug() is simulated; starting it again with the same link paths is replug().
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import type { Logger } from 'pino';
import { SimError } from './errors';

export const SOCAT_BIN = process.env.LOCKER_SIM_SOCAT ?? 'socat';

// Every socat this process started, so that they die with it even on an abrupt exit.
const live = new Set<ChildProcess>();

const GUARD = [
  'exec 3<&0',
  '"$@" &',
  'p=$!',
  "trap 'kill -TERM $p 2>/dev/null' TERM INT HUP",
  '( read _ <&3; kill -TERM $p 2>/dev/null ) &',
  'w=$!',
  's=0',
  'while kill -0 $p 2>/dev/null; do wait $p; s=$?; done',
  'kill $w 2>/dev/null',
  'exit $s',
].join('\n');

let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.once('exit', () => {
    for (const child of live) {
      try {
        child.kill('SIGTERM');
      } catch {
        // already gone
      }
    }
  });
}

/** Number of socat processes this process currently owns (for tests and diagnostics). */
export function liveSocatCount(): number {
  return live.size;
}

function removeStaleLink(p: string): void {
  try {
    const st = fs.lstatSync(p);
    // Only ever remove a dangling symlink left by a socat that died; never a real file or device,
    // and never the live link of another running simulator.
    if (!st.isSymbolicLink()) throw new SimError('SIM_PATH_IN_USE', `${p} exists and is not a symlink`);
    if (fs.existsSync(p)) {
      throw new SimError('SIM_PATH_IN_USE', `${p} is the live device of another simulator (remove the link if it is stale)`);
    }
    fs.unlinkSync(p);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
}

export class PtyPair {
  private child: ChildProcess | null = null;
  private exited: Promise<void> | null = null;
  private exitCode: number | null = null;

  constructor(
    readonly agentPath: string,
    readonly simPath: string,
    private readonly log: Logger,
  ) {}

  get running(): boolean {
    return this.child !== null;
  }

  /** Starts socat and resolves once both links exist. */
  async start(): Promise<void> {
    if (this.child) return;
    removeStaleLink(this.agentPath);
    removeStaleLink(this.simPath);
    installExitHook();
    const args = [
      '-d',
      '-d',
      `pty,raw,echo=0,link=${this.agentPath}`,
      `pty,raw,echo=0,link=${this.simPath}`,
    ];
    // socat runs under a small sh guard that holds a pipe from this process on fd 3: if this
    // process dies without cleaning up (even SIGKILL), the pipe closes and the guard stops socat.
    // SIGTERM to the guard stops socat and waits for it, so its links are gone when it exits.
    const child = spawn('/bin/sh', ['-c', GUARD, 'locker-sim-pty', SOCAT_BIN, ...args], { stdio: ['pipe', 'ignore', 'pipe'] });
    this.child = child;
    live.add(child);
    child.stdin?.on('error', () => undefined);
    let stderr = '';
    child.stderr?.setEncoding('utf8');
    child.stderr?.on('data', (d: string) => {
      stderr += d;
      if (stderr.length > 4096) stderr = stderr.slice(-4096);
    });
    this.exited = new Promise<void>((resolve) => {
      child.once('exit', (code, signal) => {
        live.delete(child);
        child.stdin?.destroy();
        this.exitCode = code;
        if (this.child === child) this.child = null;
        this.log.debug({ exitCode: code, signal }, 'socat exited');
        resolve();
      });
    });
    const spawnError = new Promise<never>((_, reject) => {
      child.once('error', (err) => {
        live.delete(child);
        if (this.child === child) this.child = null;
        const code = (err as NodeJS.ErrnoException).code === 'ENOENT' ? 'SIM_SOCAT_MISSING' : 'SIM_SOCAT_FAILED';
        reject(new SimError(code, `cannot run ${SOCAT_BIN}: ${err.message} (apt-get install socat)`));
      });
    });
    spawnError.catch(() => undefined);
    const ready = (async () => {
      const deadline = Date.now() + 5000;
      for (;;) {
        if (fs.existsSync(this.agentPath) && fs.existsSync(this.simPath)) return;
        if (!this.child) {
          const missing = this.exitCode === 127 || /not found/.test(stderr);
          throw new SimError(missing ? 'SIM_SOCAT_MISSING' : 'SIM_SOCAT_FAILED', `socat exited early: ${stderr.trim()}${missing ? ' (apt-get install socat)' : ''}`);
        }
        if (Date.now() > deadline) throw new SimError('SIM_SOCAT_FAILED', `socat did not create ${this.agentPath}`);
        await new Promise((r) => setTimeout(r, 10));
      }
    })();
    try {
      await Promise.race([ready, spawnError]);
    } catch (err) {
      await this.stop();
      throw err;
    }
    this.log.debug({ agentPath: this.agentPath, pid: child.pid }, 'pty pair up');
  }

  /** Kills socat and waits until it has exited (its links are then gone). */
  async stop(): Promise<void> {
    const child = this.child;
    const exited = this.exited;
    if (!child) return;
    child.kill('SIGTERM');
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      child.stdin?.destroy(); // the orphaned guard's reader sees EOF and stops socat
    }, 2000);
    await exited;
    clearTimeout(timer);
    // socat removes its links on a clean exit; make sure they are gone after a SIGKILL too.
    for (const p of [this.agentPath, this.simPath]) {
      try {
        if (fs.lstatSync(p).isSymbolicLink()) fs.unlinkSync(p);
      } catch {
        // gone already
      }
    }
  }
}
