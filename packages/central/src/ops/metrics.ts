// The operator metrics endpoint: Prometheus text format (0.0.4) on `GET /metrics`, on a listener
// of its own (metrics.host:metrics.port), never on the tenant API's port. Off by default
// (metrics.enabled). Areas register collectors (registerMetricsCollector) that are asked on every
// scrape; each returns whole metric families, so a value is always read fresh from its source and
// nothing is kept in memory between scrapes. Kept small on purpose: a later issue adds the full
// set of metrics (and may swap the renderer for prom-client) behind the same registry.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { AppContext, Worker } from '../context';
import type { Logger } from '../logger';
import { registerWorkerFactory } from '../workers';

export interface MetricSample {
  labels: Record<string, string>;
  value: number;
}

export interface MetricFamily {
  name: string;
  help: string;
  type: 'gauge' | 'counter';
  samples: MetricSample[];
}

export type MetricsCollector = (ctx: AppContext) => Promise<MetricFamily[]>;

const collectors: MetricsCollector[] = [];

export function registerMetricsCollector(c: MetricsCollector): void {
  if (!collectors.includes(c)) collectors.push(c);
}

const escapeLabel = (v: string) => v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
const escapeHelp = (v: string) => v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
const formatValue = (v: number) => (Number.isNaN(v) ? 'NaN' : v === Infinity ? '+Inf' : v === -Infinity ? '-Inf' : String(v));

/** Prometheus text exposition format 0.0.4. */
export function renderMetrics(families: readonly MetricFamily[]): string {
  const out: string[] = [];
  for (const f of families) {
    out.push(`# HELP ${f.name} ${escapeHelp(f.help)}`, `# TYPE ${f.name} ${f.type}`);
    for (const s of f.samples) {
      const labels = Object.entries(s.labels);
      const l = labels.length ? `{${labels.map(([k, v]) => `${k}="${escapeLabel(v)}"`).join(',')}}` : '';
      out.push(`${f.name}${l} ${formatValue(s.value)}`);
    }
  }
  return out.length ? `${out.join('\n')}\n` : '';
}

/** Every registered collector's families, rendered. */
export async function collectMetrics(ctx: AppContext): Promise<string> {
  const families: MetricFamily[] = [];
  for (const c of collectors) families.push(...(await c(ctx)));
  return renderMetrics(families);
}

export class MetricsServer implements Worker {
  readonly name = 'metrics';
  private server: http.Server | null = null;
  private readonly log: Logger;

  constructor(private readonly ctx: AppContext) {
    this.log = ctx.log.child({ ns: 'central.metrics' });
  }

  async start(): Promise<void> {
    if (this.server) return;
    const { host, port } = this.ctx.config.metrics;
    if (port !== 0 && port === this.ctx.config.http.port) throw new Error(`metrics.port ${port} is the tenant API's port (http.port): the metrics endpoint needs a listener of its own`);
    const server = http.createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    this.server = server;
    this.log.info({ listen: this.address() }, 'metrics endpoint listening');
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const url = (req.url ?? '/').split('?')[0];
    if (url !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end('not found; the metrics are at /metrics\n');
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain; charset=utf-8' }).end('method not allowed\n');
      return;
    }
    try {
      const body = await collectMetrics(this.ctx);
      res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' }).end(req.method === 'HEAD' ? undefined : body);
    } catch (err) {
      this.log.error({ err: (err as Error).message }, 'collecting metrics failed');
      res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' }).end('collecting metrics failed\n');
    }
  }

  /** http://host:port of the listener (the real port when metrics.port is 0), or null before start. */
  address(): string | null {
    const a = this.server?.address() as AddressInfo | null | undefined;
    if (!a) return null;
    const host = a.family === 'IPv6' ? `[${a.address}]` : a.address;
    return `http://${host}:${a.port}`;
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

registerWorkerFactory((ctx) => (ctx.config.metrics.enabled ? new MetricsServer(ctx) : null));
