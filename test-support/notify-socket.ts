// A stand-in for systemd's notify socket in tests: an AF_UNIX datagram socket (node cannot bind
// one) served by a small python3 helper (socat does not keep datagram boundaries). Each datagram
// (READY=1, WATCHDOG=1, STOPPING=1, ...) is collected; pass `path` as NOTIFY_SOCKET.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const PY = `
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
print(json.dumps("#bound"), flush=True)
while True:
    print(json.dumps(s.recv(65536).decode("utf-8", "replace")), flush=True)
`;

function has(cmd: string, args: string[]): boolean {
  try {
    return spawnSync(cmd, args, { stdio: 'ignore' }).status === 0;
  } catch {
    return false;
  }
}

/** Whether a notify socket can be served here (python3, and systemd-notify, which the services send with). */
export function notifySocketAvailable(): boolean {
  return has('systemd-notify', ['--version']) && has('python3', ['--version']);
}

export class NotifySocket {
  readonly path: string;
  /** every datagram received, in order */
  readonly messages: string[] = [];
  private child: ChildProcess | null = null;
  private readonly dir: string;

  constructor() {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'notify-'));
    this.path = path.join(this.dir, 'notify.sock');
  }

  async start(): Promise<void> {
    const child = spawn('python3', ['-c', PY, this.path], { stdio: ['ignore', 'pipe', 'inherit'] });
    this.child = child;
    let buf = '';
    child.stdout!.on('data', (d) => {
      buf += String(d);
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        const m = JSON.parse(line) as string;
        if (m !== '#bound') this.messages.push(m);
      }
    });
    const deadline = Date.now() + 5000;
    while (!fs.existsSync(this.path)) {
      if (Date.now() > deadline || child.exitCode !== null) throw new Error('notify socket helper did not start');
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  /** datagrams that carry `field` (e.g. 'READY=1'), one per line of a datagram */
  count(field: string): number {
    return this.messages.filter((m) => m.split('\n').includes(field)).length;
  }

  async stop(): Promise<void> {
    const c = this.child;
    this.child = null;
    if (c && c.exitCode === null) {
      const gone = new Promise((r) => c.once('exit', r));
      c.kill('SIGTERM');
      await gone;
    }
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}
