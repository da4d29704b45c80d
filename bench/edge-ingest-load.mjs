// Load generator of bench/edge-ingest.ts: one mqtt.js client per terminal, in a process of its own.
// Each terminal replays its journal (a drop-off and a pick-up session per shipment of its plan, as
// the agent journals them) with a journal id and seq, QoS 1, at most `window` events beyond the
// last down/eventAcks, sending again from `resendFrom` when the central asks and from the last
// acknowledgement when none came for 15 s (the agent's publishTimeoutMs). Prints one JSON line
// when all are connected ({phase: 'connected'}), one per second ({t, acked, rate, sent,
// resendAsked}) and a last one with done: 1, the time of the last acknowledgement and the acked
// count per terminal. argv: plan file (written by edge-ingest.ts).
import crypto from 'node:crypto';
import fs from 'node:fs';
import mqtt from 'mqtt';

const plan = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const ids = Object.keys(plan.terminals);
const stats = { acked: 0, sent: 0, resendAsked: 0, timeouts: 0 };
let t0 = 0;
let lastAckMs = 0;

function journal(id, shipments) {
  const events = [];
  const at = () => new Date().toISOString();
  for (const s of shipments) {
    const lock = { lockerUid: s.locker, bus: s.bus, board: s.board, lock: s.lock };
    for (const usage of ['DropOff', 'PickUp']) {
      const sessionId = crypto.randomUUID();
      const codeId = usage === 'DropOff' ? s.dropOff : s.pickUp;
      const item = usage === 'DropOff';
      events.push({ type: 'credentialAccepted', sessionId, source: 'qr', reader: 'scanner0', codeIds: [codeId], usages: [usage], shipmentUids: [s.shipment], codes: [{ id: codeId, usage, shipmentUid: s.shipment }], itemAtStart: !item, doorOpen: false, startedAt: at(), ...lock });
      events.push({ type: 'unlockSent', ...lock, cause: 'code', sessionId, alreadyOpen: false });
      events.push({ type: 'doorOpened', ...lock, commanded: true, item: !item, sessionId });
      events.push({ type: item ? 'itemPlaced' : 'itemRemoved', ...lock, sessionId });
      events.push({ type: 'doorClosed', ...lock, item, sessionId });
      events.push({ type: item ? 'dropOff' : 'pickUp', sessionId, shipmentUid: s.shipment, codeId, ...lock, item });
    }
  }
  return events;
}

const terms = ids.map((id) => ({ id, journalId: crypto.randomUUID(), events: journal(id, plan.terminals[id]), acked: 0, next: 1, lastProgress: 0, client: null }));
let connected = 0;

function pump(t) {
  while (t.next <= t.events.length && t.next - 1 - t.acked < plan.window) {
    const seq = t.next++;
    const e = t.events[seq - 1];
    const msg = { v: 1, eventId: e.eventId ??= crypto.randomUUID(), seq, terminalId: t.id, journalId: t.journalId, at: new Date().toISOString(), ...e };
    t.client.publish(`locker/v1/t/${t.id}/up/events`, JSON.stringify(msg), { qos: 1 });
    stats.sent++;
  }
}

for (const t of terms) {
  const c = mqtt.connect(plan.url, { clientId: t.id, username: t.id, password: plan.secret, clean: true, keepalive: 60, reconnectPeriod: 1000, connectTimeout: 60_000 });
  t.client = c;
  c.on('connect', () => {
    c.subscribe(`locker/v1/t/${t.id}/down/eventAcks`, { qos: 1 }, () => {
      if (!t.ready) {
        t.ready = true;
        if (++connected === terms.length) start();
      } else {
        t.next = t.acked + 1; // a reconnect: everything unacknowledged again
        pump(t);
      }
    });
  });
  c.on('message', (_topic, payload) => {
    const a = JSON.parse(payload.toString());
    if (a.journalId !== t.journalId) return;
    if (a.upTo > t.acked) {
      stats.acked += a.upTo - t.acked;
      t.acked = a.upTo;
      t.lastProgress = Date.now();
      lastAckMs = Date.now() - t0;
    }
    if (a.resendFrom !== undefined) {
      stats.resendAsked++;
      t.next = Math.min(t.next, a.resendFrom);
    }
    if (t.next <= t.acked) t.next = t.acked + 1;
    pump(t);
  });
  c.on('error', () => undefined);
}

function start() {
  t0 = Date.now();
  for (const t of terms) t.lastProgress = t0;
  console.log(JSON.stringify({ phase: 'connected' }));
  for (const t of terms) pump(t);
  let prev = 0;
  const total = terms.reduce((n, t) => n + t.events.length, 0);
  const tick = setInterval(() => {
    const now = Date.now();
    for (const t of terms) {
      if (t.acked < t.next - 1 && now - t.lastProgress > 15_000) {
        stats.timeouts++;
        t.lastProgress = now;
        t.next = t.acked + 1;
        pump(t);
      }
    }
    console.log(JSON.stringify({ t: now - t0, ...stats, rate: stats.acked - prev }));
    prev = stats.acked;
    if (stats.acked >= total || now - t0 > plan.seconds * 1000) {
      clearInterval(tick);
      console.log(JSON.stringify({ t: now - t0, done: 1, ...stats, lastAckMs, ackedBy: Object.fromEntries(terms.map((x) => [x.id, x.acked])) }));
      for (const x of terms) x.client.end(true);
      setTimeout(() => process.exit(0), 200);
    }
  }, 1000);
}
