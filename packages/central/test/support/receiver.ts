// A real HTTP callback receiver for tests: a node http server on a free port that records every
// request (headers and the raw body) and answers as the test says: a status, or hold the request
// until released. It can be closed (connection refused) and opened again on the same port.
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Received {
  headers: http.IncomingHttpHeaders;
  raw: string;
  json: any;
  /** the status answered, or null while held / when the client gave up first */
  answered: number | null;
  /** the client closed the connection before an answer */
  aborted: boolean;
}

export type Behaviour = (r: Received) => number | 'hold';

export class CallbackReceiver {
  readonly requests: Received[] = [];
  behaviour: Behaviour = () => 200;
  private server: http.Server | null = null;
  private held: { r: Received; res: http.ServerResponse }[] = [];
  port = 0;

  get url(): string {
    return `http://127.0.0.1:${this.port}/hooks/locker?tenant=a`;
  }

  async start(): Promise<void> {
    const server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const raw = Buffer.concat(chunks).toString('utf8');
        let json: any = null;
        try {
          json = JSON.parse(raw);
        } catch {
          /* recorded raw */
        }
        const r: Received = { headers: req.headers, raw, json, answered: null, aborted: false };
        this.requests.push(r);
        res.on('close', () => {
          if (!res.writableFinished) r.aborted = true;
        });
        const b = this.behaviour(r);
        if (b === 'hold') this.held.push({ r, res });
        else this.answer(r, res, b);
      });
    });
    server.keepAliveTimeout = 1000;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => resolve());
    });
    this.port = (server.address() as AddressInfo).port;
    this.server = server;
  }

  private answer(r: Received, res: http.ServerResponse, status: number) {
    r.answered = status;
    res.writeHead(status, { 'content-type': 'text/plain' }).end(status < 300 ? 'ok' : 'no');
  }

  /** answers every held request with the status */
  release(status = 200): void {
    for (const h of this.held.splice(0)) if (!h.res.destroyed) this.answer(h.r, h.res, status);
  }

  get heldCount(): number {
    return this.held.filter((h) => !h.res.destroyed).length;
  }

  /** stops accepting connections (clients get ECONNREFUSED) and drops open ones */
  async close(): Promise<void> {
    const s = this.server;
    this.server = null;
    if (!s) return;
    for (const h of this.held.splice(0)) h.res.destroy();
    s.closeAllConnections();
    await new Promise<void>((r) => s.close(() => r()));
  }

  /** the bodies that got a 2xx, in arrival order */
  get delivered(): any[] {
    return this.requests.filter((r) => r.answered != null && r.answered >= 200 && r.answered < 300).map((r) => r.json);
  }
}

/** Polls until cond() is true (real time); throws with the description after timeoutMs. */
export async function waitFor(cond: () => boolean | Promise<boolean>, what: string, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}
