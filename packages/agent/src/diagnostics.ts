// The technician's diagnostics page and its HTTP API: a small fastify server on its own port
// (default 127.0.0.1:8090). The page itself is static files in ./page/ (index.html, app.js,
// app.css, ...), served as they are; the API (docs/agent.md, "The diagnostics page and its API"):
//
//   GET  /api/state            everything the page shows, with the locker wall (no auth on loopback)
//   GET  /api/events           Server-Sent Events: `state` (the /api/state JSON) on every change
//   POST /api/login            technician password -> session cookie `locker_tech` + CSRF token
//   POST /api/logout
//   POST /api/actions/{open,door-test,bus-scan,scanner-test,resync}   session + x-csrf-token
//   GET  /api/logs?limit=200   recent log lines (session)
//   POST /api/open             the older one-shot open with the password in the body (kept)
//
// Who may look: on the loopback interface (the terminal itself, or an ssh tunnel) the page is open
// to read. A client from the network must log in with HTTP Basic (any user name, the technician
// password) to GET anything: door and item states tell which lockers hold parcels. So a non-loopback
// host without a technician password is refused at start (DIAGNOSTICS_UNPROTECTED). Actions need a
// technician session (technician/session.ts) and its CSRF token, from any address. Wrong passwords,
// for any login or the open action, are throttled per client address: one client cannot lock out
// another. Nothing served holds a code value or personal data: there are none on the terminal, and
// the scanner test reports a code's type and length only.
import crypto from 'node:crypto';
import fs from 'node:fs';
import type { ServerResponse } from 'node:http';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import { z } from 'zod';
import type { TechnicianHost } from './host';
import { ActionError, TechnicianActions } from './technician/actions';
import { sameSecret, TechnicianSessions, type TechnicianSession } from './technician/session';

export interface DiagnosticsOptions {
  /** the agent; with only state and technicianOpen (tests) the technician actions answer 503 */
  agent: Pick<TechnicianHost, 'state' | 'technicianOpen'> & Partial<TechnicianHost>;
  host: string;
  port: number;
  /** null: logins and the open action are disabled */
  password: string | null;
  log: Logger;
  /** wrong passwords allowed per minute before 429 */
  maxWrongPerMinute?: number;
  /** a technician session lasts this long (diagnostics.sessionMinutes) */
  sessionMinutes?: number;
  /** the pick up point's IANA time zone, for the page (diagnostics.timeZone) */
  timeZone?: string;
}

const Ref = { bus: z.string().min(1), board: z.number().int().min(0).max(255), lock: z.number().int().min(1).max(255) };
const OpenBody = z.object({ ...Ref, password: z.string() });
const LoginBody = z.object({ password: z.string().max(1000) });
const ActionOpenBody = z.object({ ...Ref, confirm: z.boolean().optional() });
const DoorTestBody = z.object({ locks: z.array(z.object(Ref)).min(1).max(200), timeoutMs: z.number().int().min(1000).max(600_000).optional() });
const BusScanBody = z.object({ bus: z.string().min(1) });

/** The page's files (./page/ beside this module, copied into dist/ by the build). */
const PAGE_DIR = new URL('./page/', import.meta.url);
const PAGE_FILE = /^[a-z0-9][a-z0-9._-]*\.(html|js|css|svg|png|ico|json|webmanifest)$/;
const CONTENT_TYPES: Record<string, string> = {
  html: 'text/html; charset=utf-8',
  js: 'text/javascript; charset=utf-8',
  css: 'text/css; charset=utf-8',
  svg: 'image/svg+xml',
  png: 'image/png',
  ico: 'image/x-icon',
  json: 'application/json; charset=utf-8',
  webmanifest: 'application/manifest+json',
};

const SSE_DEBOUNCE_MS = 200;
const SSE_CHECK_MS = 1000;
const SSE_HEARTBEAT_MS = 15_000;

/**
 * The security headers of every answer. The page's scripts and styles are files of this origin
 * ('self'), nothing inline: no inline script or style, no plugins, no framing (clickjacking of the
 * technician's buttons), no form posts elsewhere, fetch and EventSource to this origin only; no
 * MIME sniffing, no referrer.
 */
const SECURITY_HEADERS: Record<string, string> = {
  'content-security-policy': "default-src 'none'; script-src 'self'; script-src-attr 'none'; style-src 'self'; connect-src 'self'; img-src 'self' data:; manifest-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
};

export class DiagnosticsError extends Error {
  constructor(
    readonly code: 'DIAGNOSTICS_UNPROTECTED',
    message: string,
  ) {
    super(message);
    this.name = 'DiagnosticsError';
  }
}

const LOOPBACK_HOSTS = new Set(['127.0.0.1', '::1', 'localhost']);
export const isLoopbackAddress = (a: string | undefined): boolean => !!a && (a === '::1' || a.startsWith('127.') || a.startsWith('::ffff:127.'));

/** The password of an HTTP Basic Authorization header (the user name is not checked). */
function basicPassword(header: string | undefined): string | null {
  const m = /^Basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(header ?? '');
  if (!m) return null;
  const decoded = Buffer.from(m[1]!, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  return colon < 0 ? null : decoded.slice(colon + 1);
}

const digest = (s: string) => crypto.createHash('sha256').update(s, 'utf8').digest();

type ActionHandler = (req: FastifyRequest, reply: FastifyReply, actions: TechnicianActions, session: TechnicianSession) => Promise<unknown>;

export class DiagnosticsServer {
  private app: FastifyInstance | null = null;
  private readonly log: Logger;
  /** wrong-password times per client address (last minute) */
  private wrong = new Map<string, number[]>();
  private readonly sessions: TechnicianSessions;
  /** the technician actions and the wall (null with an agent that only has state and technicianOpen) */
  readonly actions: TechnicianActions | null;
  /** Server-Sent Events clients of GET /api/events */
  private readonly sse = new Set<ServerResponse>();
  private lastSent = '';
  private sseDebounce: NodeJS.Timeout | null = null;
  private sseTimers: NodeJS.Timeout[] = [];
  private readonly onChange = () => this.stateChanged();
  address: string | null = null;

  constructor(private readonly opts: DiagnosticsOptions) {
    this.log = opts.log.child({ ns: 'agent.diagnostics' });
    this.sessions = new TechnicianSessions(opts.sessionMinutes ?? 30);
    const a = opts.agent;
    this.actions = a.buses && a.store && a.technicianAction && a.requestCodeSnapshot ? new TechnicianActions(a as TechnicianHost) : null;
  }

  /** ms until the client may try a password again (0: not throttled). */
  private throttledMs(client: string, nowMs: number): number {
    const recent = (this.wrong.get(client) ?? []).filter((t) => nowMs - t < 60_000);
    if (recent.length) this.wrong.set(client, recent);
    else this.wrong.delete(client);
    const max = this.opts.maxWrongPerMinute ?? 5;
    if (recent.length < max) return 0;
    // the oldest wrong attempt that keeps the count at the limit leaves the window then
    return Math.max(1, recent[recent.length - max]! + 60_000 - nowMs);
  }

  private throttledReply(reply: FastifyReply, ms: number) {
    const retryAfterSeconds = Math.ceil(ms / 1000);
    return reply.code(429).header('retry-after', String(retryAfterSeconds)).send({ ok: false, error: 'THROTTLED', retryAfterSeconds, message: 'too many wrong passwords; wait a minute' });
  }

  private noteWrong(client: string, nowMs: number): void {
    const list = this.wrong.get(client) ?? [];
    list.push(nowMs);
    this.wrong.set(client, list);
    if (this.wrong.size > 10_000) this.wrong.delete(this.wrong.keys().next().value!);
  }

  private passwordMatches(given: string): boolean {
    return this.opts.password !== null && crypto.timingSafeEqual(digest(given), digest(this.opts.password));
  }

  /** GET /api/state: the agent's state, the locker wall, the time zone and the scanner test. */
  stateView(): Record<string, unknown> {
    const state = this.opts.agent.state();
    return {
      ...state,
      wall: this.actions && state.buses ? this.actions.wall(state) : [],
      timeZone: this.opts.timeZone ?? Intl.DateTimeFormat().resolvedOptions().timeZone,
      scannerTest: this.actions?.scannerTestState() ?? { waitingSince: null, last: null },
    };
  }

  private pageFile(name: string): { body: Buffer; type: string } | null {
    if (!PAGE_FILE.test(name)) return null;
    try {
      return { body: fs.readFileSync(new URL(name, PAGE_DIR)), type: CONTENT_TYPES[name.slice(name.lastIndexOf('.') + 1)]! };
    } catch {
      return null;
    }
  }

  async start(): Promise<void> {
    if (this.opts.password === null && !LOOPBACK_HOSTS.has(this.opts.host)) {
      throw new DiagnosticsError(
        'DIAGNOSTICS_UNPROTECTED',
        `diagnostics.host ${this.opts.host} is reachable from the network, but no diagnostics.technicianPassword is set: set one (LOCKER_AGENT_TECHNICIAN_PASSWORD) or listen on 127.0.0.1`,
      );
    }
    const app = Fastify({ logger: false, bodyLimit: 16_384, forceCloseConnections: true });
    // Security headers on every answer (issue 12): see SECURITY_HEADERS above.
    app.addHook('onSend', async (_req, reply) => {
      reply.headers(SECURITY_HEADERS);
    });
    // Reading the page from the network needs the technician password (HTTP Basic).
    app.addHook('onRequest', async (req, reply) => {
      if (req.method !== 'GET' || isLoopbackAddress(req.socket.remoteAddress)) return;
      const client = req.socket.remoteAddress ?? '?';
      const nowMs = Date.now();
      const wait = this.throttledMs(client, nowMs);
      if (wait) return this.throttledReply(reply, wait);
      const given = basicPassword(req.headers.authorization);
      if (given !== null && this.passwordMatches(given)) return;
      if (given !== null) {
        this.noteWrong(client, nowMs);
        this.log.warn({ client }, 'diagnostics login refused: wrong password');
      }
      return reply.code(401).header('www-authenticate', 'Basic realm="locker terminal diagnostics", charset="UTF-8"').send({ ok: false, error: 'LOGIN_REQUIRED', message: 'log in with the technician password' });
    });

    // ---- the page: static files of ./page/
    const servePage = (name: string, reply: FastifyReply) => {
      const f = this.pageFile(name);
      if (!f) return reply.code(404).send({ ok: false, error: 'NOT_FOUND', message: 'no such file' });
      return reply.type(f.type).header('cache-control', 'no-store').send(f.body);
    };
    app.get('/', async (_req, reply) => servePage('index.html', reply));
    app.get<{ Params: { file: string } }>('/:file', async (req, reply) => servePage(req.params.file, reply));

    // ---- reading (no session: loopback, or HTTP Basic from the network)
    app.get('/api/state', async (_req, reply) => reply.header('cache-control', 'no-store').send(this.stateView()));
    app.get('/api/events', async (req, reply) => this.openEvents(req, reply));

    // ---- the technician's session
    app.post('/api/login', async (req, reply) => {
      const parsed = LoginBody.safeParse(req.body);
      if (!parsed.success) return reply.code(400).send({ ok: false, error: 'BAD_REQUEST', message: parsed.error.issues[0]?.message ?? 'bad request' });
      if (this.opts.password === null) return reply.code(403).send({ ok: false, error: 'DISABLED', message: 'no technician password is configured on this terminal' });
      const client = req.socket.remoteAddress ?? '?';
      const nowMs = Date.now();
      const wait = this.throttledMs(client, nowMs);
      if (wait) return this.throttledReply(reply, wait);
      if (!this.passwordMatches(parsed.data.password)) {
        this.noteWrong(client, nowMs);
        this.log.warn({ client }, 'technician login refused: wrong password');
        return reply.code(401).send({ ok: false, error: 'BAD_PASSWORD', message: 'wrong technician password' });
      }
      const s = this.sessions.create();
      this.log.info({ client, expiresAt: new Date(s.expiresAt).toISOString() }, 'technician logged in');
      return reply.header('set-cookie', this.sessions.cookie(s)).header('cache-control', 'no-store').send({ csrfToken: s.csrfToken, expiresAt: new Date(s.expiresAt).toISOString() });
    });
    app.post('/api/logout', async (req, reply) => {
      const s = this.sessions.fromCookie(req.headers.cookie);
      if (s) this.sessions.delete(s.id);
      return reply.code(204).header('set-cookie', this.sessions.clearCookie()).send();
    });
    app.get<{ Querystring: { limit?: string } }>('/api/logs', async (req, reply) => {
      if (!this.sessions.fromCookie(req.headers.cookie)) return reply.code(401).send({ ok: false, error: 'NO_SESSION', message: 'log in first (POST /api/login)' });
      const limit = Math.min(1000, Math.max(1, Number.parseInt(req.query.limit ?? '200', 10) || 200));
      return reply.header('cache-control', 'no-store').send({ lines: this.actions?.logs(limit) ?? [] });
    });

    // ---- actions: a session and its CSRF token
    const action = (path: string, handler: ActionHandler) =>
      app.post(`/api/actions/${path}`, async (req, reply) => {
        const s = this.sessions.fromCookie(req.headers.cookie);
        if (!s) return reply.code(401).send({ ok: false, error: 'NO_SESSION', message: 'log in first (POST /api/login), or again: the session expired' });
        const token = req.headers['x-csrf-token'];
        if (typeof token !== 'string' || !sameSecret(token, s.csrfToken)) return reply.code(403).send({ ok: false, error: 'BAD_CSRF', message: 'the x-csrf-token header does not match the session' });
        if (!this.actions) return reply.code(503).send({ ok: false, error: 'UNAVAILABLE', message: 'technician actions need the running agent' });
        try {
          return await handler(req, reply, this.actions, s);
        } catch (err) {
          if (err instanceof ActionError) return reply.code(err.status).send({ ok: false, error: err.code, ...err.extra, message: err.message });
          this.log.error({ action: path, err: (err as Error).message }, 'technician action failed');
          return reply.code(500).send({ ok: false, error: 'FAILED', message: (err as Error).message });
        }
      });
    const bad = (reply: FastifyReply, e: z.ZodError) => reply.code(400).send({ ok: false, error: 'BAD_REQUEST', message: e.issues[0] ? `${e.issues[0].path.join('.')}: ${e.issues[0].message}` : 'bad request' });
    action('open', async (req, reply, actions) => {
      const p = ActionOpenBody.safeParse(req.body);
      if (!p.success) return bad(reply, p.error);
      const { confirm, ...ref } = p.data;
      const { uncertain } = await actions.open(ref, confirm === true);
      return reply.send(uncertain ? { ok: true, uncertain: true } : { ok: true });
    });
    action('door-test', async (req, reply, actions) => {
      const p = DoorTestBody.safeParse(req.body);
      if (!p.success) return bad(reply, p.error);
      return reply.send({ results: await actions.doorTest(p.data.locks, p.data.timeoutMs ?? 60_000) });
    });
    action('bus-scan', async (req, reply, actions) => {
      const p = BusScanBody.safeParse(req.body);
      if (!p.success) return bad(reply, p.error);
      return reply.send(await actions.busScan(p.data.bus));
    });
    action('scanner-test', async (_req, reply, actions) => reply.send(await actions.scannerTest()));
    action('resync', async (_req, reply, actions) => {
      actions.resync();
      return reply.send({ ok: true });
    });

    // ---- the older open, password in the body (kept for scripts)
    app.post('/api/open', async (req, reply) => {
      const parsed = OpenBody.safeParse(req.body);
      if (!parsed.success) return reply.code(400).send({ ok: false, error: 'BAD_REQUEST', message: parsed.error.issues[0]?.message ?? 'bad request' });
      const { password, ...at } = parsed.data;
      if (this.opts.password === null) return reply.code(403).send({ ok: false, error: 'DISABLED', message: 'no technician password is configured on this terminal' });
      const client = req.socket.remoteAddress ?? '?';
      const nowMs = Date.now();
      const wait = this.throttledMs(client, nowMs);
      if (wait) return this.throttledReply(reply, wait);
      if (!this.passwordMatches(password)) {
        this.noteWrong(client, nowMs);
        this.log.warn({ ...at, client }, 'technician open refused: wrong password');
        return reply.code(401).send({ ok: false, error: 'WRONG_PASSWORD', message: 'wrong technician password' });
      }
      const r = await this.opts.agent.technicianOpen(at);
      this.opts.agent.technicianAction?.({ action: 'open', ...at, via: 'api/open', outcome: r.ok ? (r.uncertain ? 'OUTCOME_UNKNOWN' : 'ok') : r.error });
      if (!r.ok) return reply.code(r.error === 'UNKNOWN_LOCK' ? 404 : 503).send(r);
      return reply.send(r);
    });
    this.actions?.start();
    this.actions?.on('change', this.onChange);
    await app.listen({ host: this.opts.host, port: this.opts.port });
    this.app = app;
    const a = app.server.address();
    this.address = a && typeof a === 'object' ? `http://${a.address.includes(':') ? `[${a.address}]` : a.address}:${a.port}` : null;
    this.log.info({ listen: this.address }, 'diagnostics page listening');
  }

  // ---------------------------------------------------------------- Server-Sent Events

  private openEvents(req: FastifyRequest, reply: FastifyReply): void {
    reply.hijack();
    const res = reply.raw;
    res.writeHead(200, { ...SECURITY_HEADERS, 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-store', connection: 'keep-alive', 'x-accel-buffering': 'no' });
    res.write(`retry: 2000\n\n`);
    this.sse.add(res);
    req.raw.on('close', () => {
      this.sse.delete(res);
      if (!this.sse.size) this.stopSseTimers();
    });
    // the newcomer gets the state now; the others only when it changed
    try {
      const json = JSON.stringify(this.stateView());
      res.write(`event: state\ndata: ${json}\n\n`);
      if (this.sse.size === 1) this.lastSent = json;
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, 'state not readable for the event stream');
    }
    if (!this.sseTimers.length) {
      // changes the agent does not announce (the link, the journal being sent) are found by comparing
      this.sseTimers.push(setInterval(() => this.broadcast(), SSE_CHECK_MS));
      this.sseTimers.push(setInterval(() => this.each(': heartbeat\n\n'), SSE_HEARTBEAT_MS));
      for (const t of this.sseTimers) t.unref();
    }
  }

  private stateChanged(): void {
    if (!this.sse.size || this.sseDebounce) return;
    this.sseDebounce = setTimeout(() => {
      this.sseDebounce = null;
      this.broadcast();
    }, SSE_DEBOUNCE_MS);
    this.sseDebounce.unref();
  }

  private broadcast(): void {
    if (!this.sse.size) return;
    let json: string;
    try {
      json = JSON.stringify(this.stateView());
    } catch {
      return; // the store is closing
    }
    if (json === this.lastSent) return;
    this.lastSent = json;
    this.each(`event: state\ndata: ${json}\n\n`);
  }

  private each(chunk: string): void {
    for (const res of this.sse) {
      try {
        res.write(chunk);
      } catch {
        this.sse.delete(res);
      }
    }
  }

  private stopSseTimers(): void {
    for (const t of this.sseTimers) clearInterval(t);
    this.sseTimers = [];
    if (this.sseDebounce) clearTimeout(this.sseDebounce);
    this.sseDebounce = null;
  }

  /** The fastify instance while started (tests inject requests from other client addresses). */
  get server(): FastifyInstance | null {
    return this.app;
  }

  async stop(): Promise<void> {
    const app = this.app;
    this.app = null;
    this.actions?.off('change', this.onChange);
    this.actions?.stop();
    this.stopSseTimers();
    for (const res of this.sse) res.end();
    this.sse.clear();
    if (app) await app.close();
  }
}
