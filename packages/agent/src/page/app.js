// The technician's page (served by the agent, no framework, no CDN). It follows the agent's local
// HTTP API: GET /api/state once, then the `state` events of GET /api/events (Server-Sent Events,
// no polling); POST /api/login once for a session (cookie + CSRF token, kept in sessionStorage
// for reloads); actions POST /api/actions/* with the x-csrf-token header. Every value the agent
// sends is put into the page as text (textContent or esc()), never as markup. No inline script or
// style anywhere: the Content-Security-Policy allows this file and app.css only.
'use strict';

(() => {
  const $ = (id) => document.getElementById(id);
  const esc = (s) => String(s ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
  const SESSION_KEY = 'locker.technician.session';

  /** @type {{csrfToken: string, expiresAt: string} | null} */
  let session = null;
  let state = null;
  let timeZone;
  let selecting = false;
  const selected = new Set();
  const scanResults = new Map(); // bus -> result | {error} | {running: true}
  let sheetKey = null;
  let pendingConfirm = null;
  let expiryTimer = null;
  let lastWallHtml = '';

  // ---- time: the PUP's time zone, UTC in the title ----
  function fmt(iso, withSeconds) {
    if (!iso) return '';
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return String(iso);
    const opts = { hour: '2-digit', minute: '2-digit', hourCycle: 'h23' };
    if (withSeconds) opts.second = '2-digit';
    const sameDay = (a, b) => a.toLocaleDateString('en-GB', { timeZone }) === b.toLocaleDateString('en-GB', { timeZone });
    if (!sameDay(d, new Date())) Object.assign(opts, { day: 'numeric', month: 'short' });
    try {
      return d.toLocaleString('en-GB', { ...opts, timeZone });
    } catch {
      return d.toLocaleString('en-GB', opts);
    }
  }
  /** A <time> element: local time of the PUP, UTC on hover. */
  const timeHtml = (iso, withSeconds = false) =>
    iso ? `<time datetime="${esc(iso)}" title="${esc(new Date(iso).toISOString?.() ?? iso)} UTC">${esc(fmt(iso, withSeconds))}</time>` : '';
  function safeIso(v) {
    const d = new Date(v);
    return Number.isNaN(d.getTime()) ? null : d.toISOString();
  }

  // ---- messages ----
  function say(el, text, kind) {
    el.textContent = text;
    el.className = `msg${kind ? ` ${kind}` : ''}`;
  }

  // ---- session ----
  function loadSession() {
    try {
      const s = JSON.parse(sessionStorage.getItem(SESSION_KEY) || 'null');
      if (s && s.csrfToken && Date.parse(s.expiresAt) > Date.now()) return s;
    } catch {
      /* none */
    }
    return null;
  }
  function setSession(s) {
    session = s;
    if (s) sessionStorage.setItem(SESSION_KEY, JSON.stringify(s));
    else sessionStorage.removeItem(SESSION_KEY);
    clearTimeout(expiryTimer);
    if (s) {
      const left = Date.parse(s.expiresAt) - Date.now();
      expiryTimer = setTimeout(() => {
        setSession(null);
        say($('login-msg'), 'Your session expired: log in again.', 'bad');
      }, Math.max(0, Math.min(left, 2 ** 31 - 1)));
    }
    renderSession();
  }
  function renderSession() {
    const on = !!session;
    $('login-panel').hidden = on;
    $('session').hidden = !on;
    $('tools').hidden = !on;
    if (on) $('session-expiry').innerHTML = `logged in until ${timeHtml(session.expiresAt)}`;
    if (!on) stopSelecting();
    document.body.classList.toggle('logged-in', on);
    lastWallHtml = '';
    if (state) renderWall();
    if (sheetKey) renderSheet();
  }

  /** POST (or GET) to the API with the session's CSRF token; a lost session shows the login again. */
  async function api(path, body, method = 'POST') {
    const headers = { accept: 'application/json' };
    if (body !== undefined) headers['content-type'] = 'application/json';
    if (session) headers['x-csrf-token'] = session.csrfToken;
    let res;
    try {
      res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: 'same-origin', cache: 'no-store' });
    } catch (e) {
      return { status: 0, body: { error: 'NETWORK', message: `the terminal did not answer (${e.message})` } };
    }
    let json = null;
    try {
      json = await res.json();
    } catch {
      json = {};
    }
    if (res.status === 401 && path !== '/api/login') {
      setSession(null);
      say($('login-msg'), 'Your session ended: log in again.', 'bad');
    }
    return { status: res.status, body: json || {} };
  }
  const errText = (r) => `${r.body.error || `HTTP ${r.status}`}${r.body.message ? `: ${r.body.message}` : ''}`;

  async function login(ev) {
    ev.preventDefault();
    const pw = $('password').value;
    $('login').disabled = true;
    say($('login-msg'), 'Logging in…');
    const r = await api('/api/login', { password: pw });
    $('login').disabled = false;
    if (r.status === 200 && r.body.csrfToken) {
      $('password').value = '';
      say($('login-msg'), '');
      setSession({ csrfToken: r.body.csrfToken, expiresAt: r.body.expiresAt });
      connect(); // the event stream may need the session
    } else if (r.status === 401) say($('login-msg'), 'Wrong password.', 'bad');
    else if (r.status === 429) say($('login-msg'), `Too many wrong passwords: try again in ${r.body.retryAfterSeconds ?? 60} s.`, 'bad');
    else say($('login-msg'), `Not logged in: ${errText(r)}`, 'bad');
  }
  async function logout() {
    await api('/api/logout', {});
    setSession(null);
    say($('login-msg'), 'Logged out.', 'ok');
  }

  // ---- state ----
  const FAULTS = { jam: 'jammed', 'forced-open': 'forced open', 'left-open': 'left open', 'board-offline': 'board offline', unobserved: 'not observed (board unreadable)' };
  const faultText = (f) => (f ? FAULTS[f] || String(f).replace(/-/g, ' ') : '');
  const STATUS = { free: 'free', booked: 'booked', occupied: 'occupied', open: 'door open', fault: 'fault' };
  const keyOf = (l) => `${l.bus}|${l.board}|${l.lock}`;
  const labelOf = (l) => l.name || `${l.board}/${l.lock}`;
  const inService = (s) => s == null || /^(in.?service|active|enabled|ok|available)$/i.test(String(s));
  /** ReadyForPickup -> ready for pickup */
  const words = (s) => String(s).replace(/([a-z])([A-Z])/g, '$1 $2').toLowerCase();
  const serviceText = (s) => (s == null ? '—' : String(s).replace(/([a-z])([A-Z])/g, '$1 $2').toLowerCase());
  /** A size code (S, M, ...) or {code, width, height, length} (cm). */
  function sizeText(z, long = false) {
    if (z == null) return '';
    if (typeof z !== 'object') return String(z);
    const dims = [z.width, z.height, z.length].every((n) => typeof n === 'number' && n > 0) ? `${z.width}×${z.height}×${z.length} cm` : '';
    if (long) return [z.code, dims].filter(Boolean).join(' · ');
    return z.code || dims;
  }

  /** The wall from state.wall, or (an older agent) derived from the buses. */
  function wallOf(s) {
    if (Array.isArray(s.wall)) return s.wall;
    const out = [];
    for (const b of s.buses || []) {
      for (const bd of b.boards) {
        for (const l of bd.locks) {
          const fault = bd.online === false ? 'board-offline' : null;
          const status = fault ? 'fault' : l.door === 'open' ? 'open' : l.item ? 'occupied' : 'free';
          out.push({ bus: b.name, board: bd.address, lock: l.lock, lockerUid: l.lockerUid, name: null, size: null, serviceState: null, status, fault, item: l.item, door: l.door, shipmentState: null });
        }
      }
    }
    return out;
  }
  const findLocker = (key) => (state ? wallOf(state).find((l) => keyOf(l) === key) : undefined);

  function render(s) {
    state = s;
    timeZone = s.timeZone || undefined;
    $('terminal').textContent = s.terminalId || '?';
    document.title = `Locker terminal ${s.terminalId || ''}`;
    renderHeader(s);
    renderWall();
    renderEvents(s);
    if (sheetKey) renderSheet();
  }

  function renderHeader(s) {
    const m = s.mqtt || {};
    const linkInfo = `${m.url ? `<br>${esc(m.url)}` : ''}${m.lastError ? ` · ${esc(m.lastError)}` : ''}${typeof m.eventsSent === 'number' ? ` · ${esc(m.eventsSent)} events sent` : ''}`;
    if (m.connected) {
      $('mqtt').innerHTML = '<span class="ok">connected</span>';
      $('mqtt-detail').innerHTML = (m.lastConnectedAt ? `since ${timeHtml(m.lastConnectedAt)}` : '') + linkInfo;
    } else {
      $('mqtt').innerHTML = '<span class="bad">down</span>';
      const parts = [];
      if (m.downSince) parts.push(`since ${timeHtml(m.downSince)}`);
      if (m.refusals) parts.push(`${m.refusals} refusal${m.refusals === 1 ? '' : 's'}${m.lastRefusal ? ` (last: ${esc(m.lastRefusal.reason)})` : ''}`);
      if (m.nextRetryAt) parts.push(`retry ${timeHtml(m.nextRetryAt, true)}`);
      if (m.downTooLong) parts.push('<span class="bad">down too long: the watchdog restarts the agent</span>');
      $('mqtt-detail').innerHTML = parts.join(' · ') + linkInfo;
    }
    const c = s.codes || {};
    $('codes').textContent = `${c.count ?? '?'} held`;
    $('codes-detail').textContent = c.epoch ? `version ${c.version} (epoch ${String(c.epoch).slice(0, 8)})` : `version ${c.version ?? 0} (never synced)`;
    const j = s.journal || {};
    $('backlog').innerHTML = j.unsent ? `<span class="warn">${esc(j.unsent)} unsent</span>` : '<span class="ok">0 unsent</span>';
    $('backlog-detail').textContent = `last seq ${j.lastSeq ?? '?'}`;
    const sc = s.scanners || [];
    const throttled = new Map((s.throttled || []).map((t) => [t.reader, t.untilMs]));
    const down = sc.filter((x) => x.connected === false || x.open === false || x.portOpen === false);
    $('scanners').innerHTML = !sc.length ? 'none' : down.length ? `<span class="bad">${down.length} of ${sc.length} down</span>` : throttled.size ? `<span class="warn">${sc.length}, ${throttled.size} locked out</span>` : `<span class="ok">${sc.length} ready</span>`;
    $('scanners-detail').innerHTML = sc
      .map((x) => {
        const bad = x.connected === false || x.open === false || x.portOpen === false;
        const until = throttled.get(x.name);
        return `${esc(x.name)} ${esc(x.port || '')}${bad ? ' <span class="bad">(down)</span>' : ''}${until ? ` <span class="warn">(locked out until ${timeHtml(new Date(until).toISOString(), true)})</span>` : ''}`;
      })
      .join('<br>');
  }

  function lockerTile(l) {
    const status = l.status || 'free';
    const st = status === 'fault' ? `fault: ${faultText(l.fault) || '?'}` : STATUS[status] || status;
    const key = keyOf(l);
    const cls = ['locker', `s-${STATUS[status] ? status : 'fault'}`];
    if (selected.has(key)) cls.push('selected');
    if (!inService(l.serviceState)) cls.push('out-of-service');
    const title = `${l.bus}/${l.board}/${l.lock}${l.lockerUid ? ` · ${l.lockerUid}` : ''}`;
    return (
      `<button type="button" class="${cls.join(' ')}" data-key="${esc(key)}" data-bus="${esc(l.bus)}" data-board="${esc(l.board)}" data-lock="${esc(l.lock)}" data-status="${esc(status)}" title="${esc(title)}" aria-pressed="${selected.has(key)}">` +
      `<span><span class="name">${esc(labelOf(l))}</span>${sizeText(l.size) ? `<span class="size">${esc(sizeText(l.size))}</span>` : ''}</span>` +
      `<span class="st">${esc(st)}</span>` +
      (!inService(l.serviceState) ? `<span class="svc">${esc(serviceText(l.serviceState))}</span>` : '') +
      (l.shipmentState ? `<span class="ship">${esc(words(l.shipmentState))}</span>` : '') +
      '</button>'
    );
  }

  function scanResultHtml(bus) {
    const r = scanResults.get(bus);
    if (!r) return '';
    if (r.running) return `<div class="scan-box muted" data-scan-result="${esc(bus)}">Scanning ${esc(bus)}: polling paused, asking every address…</div>`;
    if (r.error) return `<div class="scan-box msg bad" data-scan-result="${esc(bus)}">Bus scan failed: ${esc(r.error)}</div>`;
    const list = (a) => (a && a.length ? a.map(esc).join(', ') : 'none');
    const row = (cls, label, a, hint) => `<li class="${cls}"><span class="lbl">${label}</span> ${list(a)}${a && a.length && hint ? ` <span class="muted">${hint}</span>` : ''}</li>`;
    return (
      `<div class="scan-box" data-scan-result="${esc(bus)}"><div class="muted">Bus scan of ${esc(bus)} at ${timeHtml(r.at, true)}</div><ul class="scan-result">` +
      row('found ok', 'found', r.found) +
      row('missing bad', 'missing', r.missing, '(expected by the provisioning, no answer: power, wiring, address switches)') +
      row('unexpected warn', 'unexpected', r.unexpected, '(answers but is not configured)') +
      row('garbled bad', 'garbled', r.garbled, '(unreadable answers: two boards on one address, or line noise)') +
      '</ul></div>'
    );
  }

  function renderWall() {
    if (!state) return;
    const wall = wallOf(state);
    const buses = new Map();
    for (const b of state.buses || []) buses.set(b.name, { info: b, boards: new Map((b.boards || []).map((bd) => [bd.address, { info: bd, locks: [] }])) });
    for (const l of wall) {
      if (!buses.has(l.bus)) buses.set(l.bus, { info: { name: l.bus }, boards: new Map() });
      const bus = buses.get(l.bus);
      if (!bus.boards.has(l.board)) bus.boards.set(l.board, { info: { address: l.board, online: null }, locks: [] });
      bus.boards.get(l.board).locks.push(l);
    }
    let html = '';
    for (const [name, bus] of buses) {
      const b = bus.info;
      html += `<div class="bus" data-bus="${esc(name)}"><div class="bus-head"><h3>${esc(name)} <span class="muted">${esc(b.port || '')}${b.dialect ? ` · ${esc(b.dialect)}` : ''}${b.portOpen === false ? ' · <span class="bad">port closed</span>' : ''}</span></h3>`;
      if (session) html += `<button type="button" class="bus-scan" data-scan="${esc(name)}"${scanResults.get(name)?.running ? ' disabled' : ''}>Scan ${esc(name)}</button>`;
      html += `</div>${scanResultHtml(name)}`;
      for (const [addr, bd] of [...bus.boards].sort((x, y) => x[0] - y[0])) {
        const on = bd.info.online;
        html += `<div class="board" data-board="${esc(addr)}"><div class="board-head">board ${esc(addr)} · ${on === true ? '<span class="ok">online</span>' : on === false ? '<span class="bad">offline</span>' : '<span class="muted">not polled yet</span>'}</div><div class="locks">`;
        html += bd.locks.sort((x, y) => x.lock - y.lock).map(lockerTile).join('');
        html += '</div></div>';
      }
      html += '</div>';
    }
    if (html !== lastWallHtml) {
      $('wall').innerHTML = html || '<p class="muted">No buses configured.</p>';
      lastWallHtml = html;
    }
  }

  function renderEvents(s) {
    $('events').innerHTML = (s.recentEvents || [])
      .slice(0, 50)
      .map((e) => `<li>${timeHtml(e.at, true)} <b>${esc(e.type)}</b> ${esc(e.summary)}${e.sent ? '' : ' <span class="unsent">unsent</span>'}</li>`)
      .join('');
  }

  // ---- the locker sheet ----
  function openSheet(key) {
    sheetKey = key;
    say($('sheet-msg'), '');
    renderSheet();
    if (!$('sheet').open) $('sheet').showModal();
  }
  function renderSheet() {
    const l = findLocker(sheetKey);
    if (!l) return;
    $('sheet-title').textContent = `Locker ${labelOf(l)}`;
    const item = l.item === true ? 'parcel seen' : l.item === false ? 'empty' : 'unknown';
    const facts = [
      ['position', `${l.bus} / board ${l.board} / lock ${l.lock}`],
      ['size', sizeText(l.size, true) || '—'],
      ['status', l.status === 'fault' ? `fault: ${faultText(l.fault)}` : STATUS[l.status] || l.status],
      ['door', l.door ?? '—'],
      ['item sensor', item],
      ['service', serviceText(l.serviceState)],
      ['shipment', l.shipmentState ?? '—'],
      ['locker uid', l.lockerUid ?? 'not provisioned'],
    ];
    $('sheet-facts').innerHTML = facts.map(([k, v]) => `<dt>${esc(k)}</dt><dd>${esc(v)}</dd>`).join('');
    $('sheet-open').disabled = !session;
    if (!session && !$('sheet-msg').textContent) say($('sheet-msg'), 'Log in to open doors.');
  }
  async function openLocker(l, confirm) {
    say($('sheet-msg'), `Opening ${labelOf(l)}…`);
    const r = await api('/api/actions/open', { bus: l.bus, board: l.board, lock: l.lock, ...(confirm ? { confirm: true } : {}) });
    if (r.status === 200 && r.body.uncertain) {
      // the write to the board broke off: the lock may or may not have pulsed
      say($('sheet-msg'), `Not sure ${labelOf(l)} opened: the connection to its board broke off. Check the door before trying again.`, 'warn');
      say($('msg'), `Not sure ${labelOf(l)} (${l.bus}/${l.board}/${l.lock}) opened: check the door.`, 'warn');
    } else if (r.status === 200 && r.body.ok !== false) {
      say($('sheet-msg'), `Opened ${labelOf(l)}.`, 'ok');
      say($('msg'), `Opened ${labelOf(l)} (${l.bus}/${l.board}/${l.lock}).`, 'ok');
    } else if (r.status === 409 && r.body.error === 'CONFIRM') {
      pendingConfirm = l;
      $('confirm-text').textContent =
        r.body.reason === 'item'
          ? `There is a parcel inside locker ${labelOf(l)} (the item sensor sees one). Open it anyway?`
          : r.body.reason === 'booked'
            ? `This locker (${labelOf(l)}) is booked for a shipment. Open it anyway?`
            : `Locker ${labelOf(l)} needs a confirmation (${r.body.reason || 'unknown reason'}). Open it anyway?`;
      $('confirm').dataset.reason = r.body.reason || '';
      say($('sheet-msg'), '');
      $('confirm').showModal();
    } else say($('sheet-msg'), `Not opened: ${errText(r)}`, 'bad');
  }

  // ---- selection for the door test ----
  function startSelecting() {
    selecting = true;
    selected.clear();
    $('select-bar').hidden = false;
    updateSelectBar();
    say($('msg'), 'Door test: tap the lockers to test, then "Run door test".');
    lastWallHtml = '';
    renderWall();
  }
  function stopSelecting() {
    selecting = false;
    selected.clear();
    $('select-bar').hidden = true;
    lastWallHtml = '';
    renderWall();
  }
  function updateSelectBar() {
    $('select-count').textContent = `${selected.size} locker${selected.size === 1 ? '' : 's'} selected`;
    $('doortest-run').disabled = selected.size === 0;
  }
  const yesNo = (v) => (v === true ? 'yes' : v === false ? 'no' : '?');
  async function runDoorTest() {
    const locks = [...selected].map((k) => {
      const [bus, board, lock] = k.split('|');
      return { bus, board: Number(board), lock: Number(lock) };
    });
    stopSelecting();
    say($('msg'), '');
    $('tool-result').innerHTML = `<p class="muted" id="doortest-running">Door test of ${locks.length} locker${locks.length === 1 ? '' : 's'}: each door opens in turn; close it again after it opened…</p>`;
    $('tool-result').scrollIntoView({ block: 'nearest' });
    const r = await api('/api/actions/door-test', { locks });
    if (r.status !== 200 || !Array.isArray(r.body.results)) {
      $('tool-result').innerHTML = `<p class="msg bad">Door test failed: ${esc(errText(r))}</p>`;
      return;
    }
    const rows = r.body.results
      .map((x) => {
        const l = findLocker(keyOf(x)) || x;
        const ms = typeof x.ms === 'number' ? `${(x.ms / 1000).toFixed(1)} s` : '—';
        return `<tr class="${x.fault ? 'fault' : 'pass'}" data-key="${esc(keyOf(x))}"><td>${esc(labelOf(l))}</td><td>${yesNo(x.opened)}</td><td>${yesNo(x.closed)}</td><td>${yesNo(x.itemSeen)}</td><td>${esc(ms)}</td><td class="fault-cell">${x.fault ? `<b>${esc(faultText(x.fault))}</b>` : 'ok'}</td></tr>`;
      })
      .join('');
    const bad = r.body.results.filter((x) => x.fault).length;
    $('tool-result').innerHTML =
      `<h3 id="doortest-title">Door test: ${r.body.results.length - bad} passed, ${bad} with a fault <span class="muted">(${timeHtml(new Date().toISOString(), true)})</span></h3>` +
      '<table class="result-table" id="doortest-result"><colgroup><col class="c-locker"><col class="c-yn"><col class="c-yn"><col class="c-item"><col class="c-ms"><col class="c-fault"></colgroup>' +
      `<thead><tr><th>Locker</th><th>Opened</th><th>Closed</th><th>Item</th><th>Time</th><th>Fault</th></tr></thead><tbody>${rows}</tbody></table>`;
  }

  // ---- tools ----
  async function busScan(bus) {
    scanResults.set(bus, { running: true });
    lastWallHtml = '';
    renderWall();
    const r = await api('/api/actions/bus-scan', { bus });
    scanResults.set(bus, r.status === 200 ? { ...r.body, at: new Date().toISOString() } : { error: errText(r) });
    lastWallHtml = '';
    renderWall();
  }
  async function scannerTest() {
    $('scanner-test').disabled = true;
    $('tool-result').innerHTML = '<p id="scanner-waiting" class="msg">Scanner test: present any code to the scanner now… (it is not used as a code)</p>';
    const r = await api('/api/actions/scanner-test', {});
    $('scanner-test').disabled = false;
    if (r.status === 200)
      $('tool-result').innerHTML = `<p id="scanner-result" class="msg ok">Scanner test: <span class="reader">${esc(r.body.reader)}</span> read: type <span class="type">${esc(r.body.type)}</span>${r.body.type === 'qr' ? ' (QR code)' : r.body.type === 'keypad' ? ' (keypad entry)' : ''}, length <span class="length">${esc(r.body.length)}</span> characters. Not used as a code: nothing opened.</p>`;
    else if (r.status === 408) $('tool-result').innerHTML = '<p id="scanner-result" class="msg bad">Scanner test: no scan arrived in time. Check the scanner\'s cable and its serial mode, then try again.</p>';
    else $('tool-result').innerHTML = `<p id="scanner-result" class="msg bad">Scanner test failed: ${esc(errText(r))}</p>`;
  }
  async function resync() {
    $('resync').disabled = true;
    const r = await api('/api/actions/resync', {});
    $('resync').disabled = false;
    $('tool-result').innerHTML =
      r.status === 200
        ? `<p id="resync-result" class="msg ok">Resync requested: the central service sends a fresh code snapshot (held now: version ${esc(state?.codes?.version ?? '?')}).</p>`
        : `<p id="resync-result" class="msg bad">Resync failed: ${esc(errText(r))}</p>`;
  }

  function logLine(raw) {
    let o = raw;
    if (typeof raw === 'string') {
      try {
        o = JSON.parse(raw);
      } catch {
        return `<div>${esc(raw)}</div>`;
      }
    }
    if (!o || typeof o !== 'object') return `<div>${esc(String(raw))}</div>`;
    const { time, level, msg, ns, pid: _pid, hostname: _h, ...rest } = o;
    const lv = typeof level === 'number' ? ({ 10: 'trace', 20: 'debug', 30: 'info', 40: 'warn', 50: 'error', 60: 'fatal' })[level] || level : level || '';
    const iso = time !== undefined ? safeIso(time) : null;
    const extra = Object.keys(rest).length ? ` ${JSON.stringify(rest)}` : '';
    return `<div class="lv-${esc(lv)}">${iso ? timeHtml(iso, true) : ''} ${esc(String(lv).toUpperCase())} ${ns ? `[${esc(ns)}] ` : ''}${esc(msg ?? '')}${esc(extra)}</div>`;
  }
  async function loadLogs() {
    $('logs-lines').innerHTML = '<div>loading…</div>';
    const r = await api('/api/logs?limit=200', undefined, 'GET');
    if (r.status !== 200 || !Array.isArray(r.body.lines)) {
      $('logs-lines').innerHTML = `<div class="lv-error">${esc(errText(r))}</div>`;
      return;
    }
    $('logs-lines').innerHTML = r.body.lines.length ? r.body.lines.map(logLine).join('') : '<div>no log lines yet</div>';
    $('logs-lines').scrollTop = $('logs-lines').scrollHeight;
  }

  // ---- live updates: Server-Sent Events, no polling ----
  let es = null;
  function connect() {
    if (es) es.close();
    es = new EventSource('/api/events');
    es.addEventListener('state', (e) => {
      try {
        render(JSON.parse(e.data));
        $('live').innerHTML = `live · times in ${esc(timeZone || 'local time')}${state.agentVersion ? ` · agent ${esc(state.agentVersion)}` : ''}${state.startedAt ? `, started ${timeHtml(state.startedAt)}` : ''}`;
        $('live').className = 'live muted';
      } catch {
        /* a broken event: the next one repairs the page */
      }
    });
    es.onerror = () => {
      $('live').textContent = es.readyState === EventSource.CLOSED ? 'not connected to the terminal: reload the page' : 'connection lost: reconnecting…';
      $('live').className = 'live bad';
    };
  }
  async function loadOnce() {
    try {
      const res = await fetch('/api/state', { cache: 'no-store', credentials: 'same-origin' });
      if (res.ok) render(await res.json());
    } catch {
      /* the event stream tells */
    }
  }

  // ---- wiring ----
  function init() {
    $('login-form').addEventListener('submit', login);
    $('logout').addEventListener('click', logout);
    $('wall').addEventListener('click', (ev) => {
      const scan = ev.target.closest('button[data-scan]');
      if (scan) return void busScan(scan.dataset.scan);
      const tile = ev.target.closest('button.locker');
      if (!tile) return;
      const key = tile.dataset.key;
      if (selecting) {
        if (selected.has(key)) selected.delete(key);
        else selected.add(key);
        tile.classList.toggle('selected', selected.has(key));
        tile.setAttribute('aria-pressed', String(selected.has(key)));
        lastWallHtml = '';
        updateSelectBar();
        return;
      }
      openSheet(key);
    });
    $('sheet-open').addEventListener('click', () => {
      const l = findLocker(sheetKey);
      if (l) void openLocker(l, false);
    });
    $('sheet-close').addEventListener('click', () => $('sheet').close());
    $('sheet').addEventListener('close', () => {
      sheetKey = null;
    });
    $('confirm-yes').addEventListener('click', () => {
      $('confirm').close();
      if (pendingConfirm) void openLocker(pendingConfirm, true);
      pendingConfirm = null;
    });
    $('confirm-no').addEventListener('click', () => {
      $('confirm').close();
      pendingConfirm = null;
      say($('sheet-msg'), 'Not opened.');
    });
    $('doortest-start').addEventListener('click', startSelecting);
    $('doortest-cancel').addEventListener('click', () => {
      stopSelecting();
      say($('msg'), '');
    });
    $('doortest-run').addEventListener('click', () => void runDoorTest());
    $('scanner-test').addEventListener('click', () => void scannerTest());
    $('resync').addEventListener('click', () => void resync());
    $('logs-open').addEventListener('click', () => {
      $('logs').showModal();
      void loadLogs();
    });
    $('logs-refresh').addEventListener('click', () => void loadLogs());
    $('logs-close').addEventListener('click', () => $('logs').close());
    setSession(loadSession());
    void loadOnce();
    connect();
  }
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();
