// A control port: the REPL's commands over a line-based TCP connection, so that another process (a
// test that runs the simulator as a child process, a script) can act at the locker and read the
// locks' state without a terminal. Started by the CLI with `--control <[host:]port>`.
//
// Protocol: one command per line (the REPL's commands, see HELP), one JSON answer per line, in the
// order the commands came:
//   {"ok":true,"out":"board 0 lock 1: door open"}
//   {"ok":false,"code":"SIM_BAD_COMMAND","error":"unknown command \"x\" (type help)"}
// Two commands exist only here, for programs that need the state rather than a text:
//   lock <board> <lock> [bus]   -> "out" is the JSON of { bus, board, lock, latched, doorOpen, item }
//   locks [bus]                 -> "out" is the JSON array of every lock of the bus
// Each connection has its own current bus (`use`); `quit` stops the simulator as at the REPL (the
// CLI passes onQuit). Commands of one connection run one after another; connections do not wait
// for each other. The port listens on 127.0.0.1 unless a host is given: it has no authentication.
import net from 'node:net';
import { runCommand, type CommandContext } from './commands';
import { SimError } from './errors';
import type { Simulator } from './simulator';

export interface ControlServerOptions {
  sim: Simulator;
  /** 0 = any free port */
  port: number;
  host?: string;
  /** the bus a new connection acts on (default: the simulator's first) */
  bus?: string;
  /** called after a `quit` command was answered */
  onQuit?: () => void;
}

export interface ControlReply {
  ok: boolean;
  out?: string;
  code?: string;
  error?: string;
}

/** Parses a `--control` value: `7100`, `0`, `127.0.0.1:7100`, `[::1]:7100`. */
export function parseControlSpec(spec: string): { host: string; port: number } {
  const m = /^(?:\[?([^\]]*?)\]?:)?(\d+)$/.exec(spec.trim());
  const port = m ? Number(m[2]) : NaN;
  if (!m || !Number.isInteger(port) || port < 0 || port > 65535) throw new SimError('SIM_CONFIG_INVALID', `--control ${spec}: expected [host:]port`);
  return { host: m[1] || '127.0.0.1', port };
}

export class ControlServer {
  private server: net.Server | null = null;
  private readonly sockets = new Set<net.Socket>();
  private boundPort: number | null = null;

  constructor(private readonly opts: ControlServerOptions) {}

  /** The port it listens on (null before start()). */
  get port(): number | null {
    return this.boundPort;
  }

  get host(): string {
    return this.opts.host ?? '127.0.0.1';
  }

  async start(): Promise<number> {
    const server = net.createServer((sock) => this.serve(sock));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.opts.port, this.host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    this.server = server;
    this.boundPort = (server.address() as net.AddressInfo).port;
    return this.boundPort;
  }

  async stop(): Promise<void> {
    const s = this.server;
    this.server = null;
    for (const sock of this.sockets) sock.destroy();
    this.sockets.clear();
    if (s) await new Promise<void>((r) => s.close(() => r()));
  }

  /** Runs one control line (the REPL's commands plus `lock` / `locks`); exported for tests. */
  async run(ctx: CommandContext, line: string): Promise<ControlReply> {
    try {
      const words = line.trim().split(/\s+/).filter(Boolean);
      const cmd = words[0]?.toLowerCase();
      if (cmd === 'lock' || cmd === 'locks') {
        const int = (s: string | undefined, what: string) => {
          if (s === undefined || !/^\d+$/.test(s)) throw new SimError('SIM_BAD_COMMAND', `${what} must be a whole number`);
          return Number(s);
        };
        const busName = (cmd === 'lock' ? words[3] : words[1]) ?? ctx.bus;
        const bus = ctx.sim.bus(busName);
        const view = (board: number, lock: number) => ({ bus: bus.name, board, lock, ...bus.lock(board, lock).state });
        if (cmd === 'lock') return { ok: true, out: JSON.stringify(view(int(words[1], 'board'), int(words[2], 'lock'))) };
        const all = bus.boardAddresses.flatMap((a) => bus.board(a).locks.map((l) => view(a, l.lock)));
        return { ok: true, out: JSON.stringify(all) };
      }
      return { ok: true, out: await runCommand(ctx, line) };
    } catch (err) {
      return { ok: false, code: err instanceof SimError ? err.code : 'ERROR', error: (err as Error).message };
    }
  }

  private serve(sock: net.Socket): void {
    this.sockets.add(sock);
    sock.setEncoding('utf8');
    sock.setNoDelay(true);
    const ctx: CommandContext = { sim: this.opts.sim, bus: this.opts.bus ?? this.opts.sim.busNames()[0] ?? '', frames: false, quit: false };
    let buf = '';
    let queue = Promise.resolve();
    sock.on('data', (chunk: string) => {
      buf += chunk;
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl).replace(/\r$/, '');
        buf = buf.slice(nl + 1);
        if (line.trim() === '') continue;
        queue = queue.then(async () => {
          const reply = await this.run(ctx, line);
          if (!sock.destroyed) sock.write(`${JSON.stringify(reply)}\n`);
          if (ctx.quit) {
            ctx.quit = false;
            this.opts.onQuit?.();
          }
        });
      }
    });
    sock.on('error', () => undefined);
    sock.on('close', () => this.sockets.delete(sock));
  }
}
