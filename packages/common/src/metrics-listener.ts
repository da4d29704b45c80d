// The Prometheus scrape endpoint of the central service and of the agent: GET/HEAD /metrics on a
// listener of its own (never the tenant API's port, never the diagnostics page's), 404 elsewhere,
// 405 for other methods, 500 with a log line when collecting fails. What is collected is the
// caller's (a prom-client registry); this is only the HTTP around it.
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface MetricsListenerOptions {
  host: string;
  port: number;
  /** the exposition text and its content type (prom-client: registry.metrics(), registry.contentType) */
  collect: () => Promise<{ body: string; contentType: string }>;
  log: { info(o: object, msg: string): void; error(o: object, msg: string): void };
}

export class MetricsListener {
  private server: http.Server | null = null;

  constructor(private readonly opts: MetricsListenerOptions) {}

  async start(): Promise<void> {
    if (this.server) return;
    const server = http.createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.opts.port, this.opts.host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    this.server = server;
    this.opts.log.info({ listen: this.address() }, 'metrics endpoint listening');
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    if ((req.url ?? '/').split('?')[0] !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end('not found; the metrics are at /metrics\n');
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain; charset=utf-8' }).end('method not allowed\n');
      return;
    }
    try {
      const { body, contentType } = await this.opts.collect();
      res.writeHead(200, { 'content-type': contentType }).end(req.method === 'HEAD' ? undefined : body);
    } catch (err) {
      this.opts.log.error({ err: (err as Error).message }, 'collecting metrics failed');
      res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' }).end('collecting metrics failed\n');
    }
  }

  /** http://host:port of the listener (the real port when port is 0), or null before start. */
  address(): string | null {
    const a = this.server?.address() as AddressInfo | null | undefined;
    if (!a) return null;
    return `http://${a.family === 'IPv6' ? `[${a.address}]` : a.address}:${a.port}`;
  }

  async stop(): Promise<void> {
    const s = this.server;
    if (!s) return;
    this.server = null;
    await new Promise<void>((resolve) => {
      s.close(() => resolve());
      s.closeAllConnections();
    });
  }
}
