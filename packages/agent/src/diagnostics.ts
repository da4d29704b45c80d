// The technician's diagnostics page: a small fastify server on its own port (default
// 127.0.0.1:8090). GET / is a self-contained page that polls GET /api/state (buses, boards,
// locks, doors, items, MQTT link, code cache, journal backlog, recent events); POST /api/open
// pulses one lock after the technician password from the config.
//
// Who may look: on the loopback interface (the terminal itself, or an ssh tunnel) the page is open
// to read. A client from the network must log in with HTTP Basic (any user name, the technician
// password): door and item states tell which lockers hold parcels. So a non-loopback host without a
// technician password is refused at start (DIAGNOSTICS_UNPROTECTED). Wrong passwords, for the
// login or the open action, are throttled per client address: one client cannot lock out another.
// The page shows no code values and no personal data: there are none on the terminal.
import crypto from 'node:crypto';
import Fastify, { type FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { z } from 'zod';
import type { Agent } from './agent';

export interface DiagnosticsOptions {
  agent: Pick<Agent, 'state' | 'technicianOpen'>;
  host: string;
  port: number;
  /** null: the open action is disabled */
  password: string | null;
  log: Logger;
  /** wrong passwords allowed per minute before 429 */
  maxWrongPerMinute?: number;
}

const OpenBody = z.object({
  bus: z.string().min(1),
  board: z.number().int().min(0),
  lock: z.number().int().min(1),
  password: z.string(),
});

const digest = (s: string) => crypto.createHash('sha256').update(s, 'utf8').digest();

/**
 * The page's security headers. Its one inline script and one inline style are allowed by their
 * SHA-256 hashes (computed from PAGE, so an edit of the page keeps them right), nothing else: no
 * other script or style, no plugins, no framing (clickjacking of the technician's Open button), no
 * form posts elsewhere, fetch to this origin only; no MIME sniffing, no referrer.
 */
function securityHeaders(): Record<string, string> {
  if (!cachedHeaders) {
    const hash = (tag: 'script' | 'style') => {
      const m = new RegExp(`<${tag}>([\\s\\S]*?)</${tag}>`).exec(PAGE);
      return m ? `'sha256-${crypto.createHash('sha256').update(m[1]!, 'utf8').digest('base64')}'` : "'none'";
    };
    cachedHeaders = {
      'content-security-policy': `default-src 'none'; script-src ${hash('script')}; script-src-attr 'none'; style-src ${hash('style')}; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`,
      'x-content-type-options': 'nosniff',
      'x-frame-options': 'DENY',
      'referrer-policy': 'no-referrer',
      'cross-origin-opener-policy': 'same-origin',
      'cross-origin-resource-policy': 'same-origin',
    };
  }
  return cachedHeaders;
}
let cachedHeaders: Record<string, string> | undefined;

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

export class DiagnosticsServer {
  private app: FastifyInstance | null = null;
  private readonly log: Logger;
  /** wrong-password times per client address (last minute) */
  private wrong = new Map<string, number[]>();
  address: string | null = null;

  constructor(private readonly opts: DiagnosticsOptions) {
    this.log = opts.log.child({ ns: 'agent.diagnostics' });
  }

  private throttled(client: string, nowMs: number): boolean {
    const recent = (this.wrong.get(client) ?? []).filter((t) => nowMs - t < 60_000);
    if (recent.length) this.wrong.set(client, recent);
    else this.wrong.delete(client);
    return recent.length >= (this.opts.maxWrongPerMinute ?? 5);
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

  async start(): Promise<void> {
    if (this.opts.password === null && !LOOPBACK_HOSTS.has(this.opts.host)) {
      throw new DiagnosticsError(
        'DIAGNOSTICS_UNPROTECTED',
        `diagnostics.host ${this.opts.host} is reachable from the network, but no diagnostics.technicianPassword is set: set one (LOCKER_AGENT_TECHNICIAN_PASSWORD) or listen on 127.0.0.1`,
      );
    }
    const app = Fastify({ logger: false, bodyLimit: 4096 });
    // Security headers on every answer (issue 12): see SECURITY_HEADERS below.
    app.addHook('onSend', async (_req, reply) => {
      reply.headers(securityHeaders());
    });
    // Reading the page from the network needs the technician password (HTTP Basic).
    app.addHook('onRequest', async (req, reply) => {
      if (req.method !== 'GET' || isLoopbackAddress(req.socket.remoteAddress)) return;
      const client = req.socket.remoteAddress ?? '?';
      const nowMs = Date.now();
      if (this.throttled(client, nowMs)) return reply.code(429).header('retry-after', '60').send({ ok: false, error: 'THROTTLED', message: 'too many wrong passwords; wait a minute' });
      const given = basicPassword(req.headers.authorization);
      if (given !== null && this.passwordMatches(given)) return;
      if (given !== null) {
        this.noteWrong(client, nowMs);
        this.log.warn({ client }, 'diagnostics login refused: wrong password');
      }
      return reply.code(401).header('www-authenticate', 'Basic realm="locker terminal diagnostics", charset="UTF-8"').send({ ok: false, error: 'LOGIN_REQUIRED', message: 'log in with the technician password' });
    });
    app.get('/', async (_req, reply) => reply.type('text/html; charset=utf-8').header('cache-control', 'no-store').send(PAGE));
    app.get('/api/state', async (_req, reply) => reply.header('cache-control', 'no-store').send(this.opts.agent.state()));
    app.post('/api/open', async (req, reply) => {
      const parsed = OpenBody.safeParse(req.body);
      if (!parsed.success) return reply.code(400).send({ ok: false, error: 'BAD_REQUEST', message: parsed.error.issues[0]?.message ?? 'bad request' });
      const { password, ...at } = parsed.data;
      if (this.opts.password === null) return reply.code(403).send({ ok: false, error: 'DISABLED', message: 'no technician password is configured on this terminal' });
      const client = req.socket.remoteAddress ?? '?';
      const nowMs = Date.now();
      if (this.throttled(client, nowMs)) return reply.code(429).header('retry-after', '60').send({ ok: false, error: 'THROTTLED', message: 'too many wrong passwords; wait a minute' });
      if (!this.passwordMatches(password)) {
        this.noteWrong(client, nowMs);
        this.log.warn({ ...at, client }, 'technician open refused: wrong password');
        return reply.code(401).send({ ok: false, error: 'WRONG_PASSWORD', message: 'wrong technician password' });
      }
      const r = await this.opts.agent.technicianOpen(at);
      if (!r.ok) return reply.code(r.error === 'UNKNOWN_LOCK' ? 404 : 503).send(r);
      return reply.send(r);
    });
    await app.listen({ host: this.opts.host, port: this.opts.port });
    this.app = app;
    const a = app.server.address();
    this.address = a && typeof a === 'object' ? `http://${a.address.includes(':') ? `[${a.address}]` : a.address}:${a.port}` : null;
    this.log.info({ listen: this.address }, 'diagnostics page listening');
  }

  /** The fastify instance while started (tests inject requests from other client addresses). */
  get server(): FastifyInstance | null {
    return this.app;
  }

  async stop(): Promise<void> {
    const app = this.app;
    this.app = null;
    if (app) await app.close();
  }
}

const PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Locker terminal diagnostics</title>
<style>
 body{font-family:system-ui,sans-serif;margin:1rem;background:#f6f7f9;color:#1b1f24}
 h1{font-size:1.3rem;margin:0 0 .5rem} h2{font-size:1.05rem;margin:1.2rem 0 .4rem}
 .cards{display:flex;gap:.8rem;flex-wrap:wrap}
 .card{background:#fff;border:1px solid #d8dde3;border-radius:6px;padding:.6rem .8rem;min-width:12rem}
 .k{color:#59636e;font-size:.8rem} .v{font-size:1.05rem;font-weight:600}
 table{border-collapse:collapse;background:#fff;margin-bottom:.6rem} td,th{border:1px solid #d8dde3;padding:.25rem .5rem;font-size:.9rem;text-align:left}
 .ok{color:#1a7f37} .bad{color:#cf222e} .warn{color:#9a6700}
 .door-open{background:#fff1e5} .door-unknown{background:#eee}
 button{cursor:pointer} #msg{margin:.5rem 0;font-weight:600}
</style></head>
<body>
<h1>Locker terminal <span id="terminal">…</span></h1>
<div class="cards">
 <div class="card"><div class="k">MQTT</div><div class="v" id="mqtt">…</div><div class="k" id="mqttlink"></div><div class="k" id="mqtturl"></div></div>
 <div class="card"><div class="k">Access codes held</div><div class="v" id="codes">…</div><div class="k" id="codesver"></div></div>
 <div class="card"><div class="k">Unsent events</div><div class="v" id="unsent">…</div><div class="k" id="lastseq"></div></div>
 <div class="card"><div class="k">Agent</div><div class="v" id="version">…</div><div class="k" id="started"></div></div>
</div>
<h2>Technician</h2>
<label>Technician password <input type="password" id="password" autocomplete="off"></label>
<div id="msg" role="status"></div>
<h2>Buses</h2>
<div id="buses"></div>
<h2>Recent events</h2>
<table id="events"><thead><tr><th>seq</th><th>time</th><th>type</th><th>details</th><th>sent</th></tr></thead><tbody></tbody></table>
<script>
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;',"'":'&#39;'}[c]));
async function openLock(bus, board, lock) {
  const password = $('password').value;
  $('msg').textContent = 'Opening ' + bus + '/' + board + '/' + lock + '…';
  try {
    const r = await fetch('/api/open', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ bus, board, lock, password }) });
    const j = await r.json();
    $('msg').textContent = j.ok ? 'Opened ' + bus + '/' + board + '/' + lock : 'Not opened: ' + (j.error || r.status) + (j.message ? ' (' + j.message + ')' : '');
    $('msg').className = j.ok ? 'ok' : 'bad';
  } catch (e) { $('msg').textContent = 'Not opened: ' + e.message; $('msg').className = 'bad'; }
  refresh();
}
function ago(iso) {
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  return s < 120 ? s + ' s' : s < 7200 ? Math.round(s / 60) + ' min' : Math.round(s / 3600) + ' h';
}
function linkText(m) {
  if (m.connected) return 'up since ' + esc(m.lastConnectedAt || '?');
  const parts = [];
  if (m.downSince) parts.push('down since ' + esc(m.downSince) + ' (' + ago(m.downSince) + ')');
  if (m.refusals) parts.push(m.refusals + ' failed attempt' + (m.refusals === 1 ? '' : 's') + (m.lastRefusal ? ', last: <b>' + esc(m.lastRefusal.reason) + '</b>' : ''));
  if (m.nextRetryAt) parts.push('next try in ' + Math.max(0, Math.round((Date.parse(m.nextRetryAt) - Date.now()) / 1000)) + ' s');
  else parts.push('connecting…');
  let html = parts.join(' — ');
  if (m.downTooLong) html += '<div class="bad" id="mqttunhealthy">down for longer than ' + m.unhealthyAfterMinutes + ' min: unhealthy, the watchdog restarts the agent</div>';
  return html;
}
function render(s) {
  $('terminal').textContent = s.terminalId;
  $('mqtt').innerHTML = s.mqtt.connected ? '<span class="ok">connected</span>' : '<span class="bad">disconnected</span>';
  $('mqttlink').innerHTML = linkText(s.mqtt);
  $('mqtturl').textContent = s.mqtt.url + (s.mqtt.lastError ? ' — ' + s.mqtt.lastError : '') + ' — ' + s.mqtt.eventsSent + ' events sent';
  $('codes').textContent = s.codes.count;
  $('codesver').textContent = 'version ' + s.codes.version + (s.codes.epoch ? ' (epoch ' + s.codes.epoch.slice(0, 8) + ')' : ' (never synced)');
  $('unsent').innerHTML = s.journal.unsent ? '<span class="warn">' + s.journal.unsent + '</span>' : '<span class="ok">0</span>';
  $('lastseq').textContent = 'last seq ' + s.journal.lastSeq;
  $('version').textContent = s.agentVersion;
  $('started').textContent = 'started ' + s.startedAt + (s.throttled.length ? ' — locked out: ' + s.throttled.map((t) => t.reader).join(', ') : '');
  let html = '';
  for (const b of s.buses) {
    html += '<h3>' + esc(b.name) + ' <small>' + esc(b.port) + ' · ' + esc(b.dialect) + ' · port ' + (b.portOpen ? '<span class="ok">open</span>' : '<span class="bad">closed</span>') + '</small></h3>';
    for (const bd of b.boards) {
      html += '<table data-bus="' + esc(b.name) + '" data-board="' + bd.address + '"><caption>board ' + bd.address + ' — ' + (bd.online === true ? '<span class="ok">online</span>' : bd.online === false ? '<span class="bad">offline</span>' : 'not polled yet') + '</caption>';
      html += '<thead><tr><th>lock</th><th>door</th><th>latch</th><th>item</th><th>locker</th><th></th></tr></thead><tbody>';
      for (const l of bd.locks) {
        html += '<tr class="door-' + l.door + '" data-lock="' + l.lock + '"><td>' + l.lock + '</td><td class="door">' + l.door + '</td><td>' + l.latch + '</td><td class="item">' + (l.item === null ? '?' : l.item ? 'item' : 'empty') + '</td><td>' + (l.lockerUid ? esc(l.lockerUid.slice(0, 8)) + '…' : '') + '</td>'
          + '<td><button data-open="' + esc(b.name) + '|' + bd.address + '|' + l.lock + '">Open</button></td></tr>';
      }
      html += '</tbody></table>';
    }
  }
  $('buses').innerHTML = html;
  for (const btn of document.querySelectorAll('button[data-open]')) {
    const [bus, board, lock] = btn.dataset.open.split('|');
    btn.onclick = () => openLock(bus, Number(board), Number(lock));
  }
  $('events').tBodies[0].innerHTML = s.recentEvents.map((e) => '<tr><td>' + e.seq + '</td><td>' + esc(e.at) + '</td><td>' + esc(e.type) + '</td><td>' + esc(e.summary) + '</td><td>' + (e.sent ? 'yes' : '<span class="warn">no</span>') + '</td></tr>').join('');
}
async function refresh() {
  try { render(await (await fetch('/api/state')).json()); } catch (e) { $('mqtt').textContent = 'agent not answering'; }
}
refresh();
setInterval(refresh, 1000);
</script>
</body></html>`;
