// Load generator of bench/mqtt-storm.ts: N mqtt.js clients that log in like terminals (client id =
// username = terminal id, password = the secret), all at once, and behave like the agent on
// connect: subscribe to their down/ topics, publish a retained online status (codes epoch null,
// so the central service answers with a code snapshot). A refused or timed-out attempt is retried
// after a random delay of 1-3 s (the agent's jittered back-off, roughly). Prints one JSON line per
// second ({ t, connected, withCodes, attempts, refused: {code: n}, timeouts, closes }) and a last
// line with done: true. argv: url count secret idPrefix durationMs connectTimeoutMs
import mqtt from 'mqtt';

const [url, countS, secret, prefix, durationS, timeoutS] = process.argv.slice(2);
const N = Number(countS);
const t0 = Date.now();
const stats = { connected: 0, withCodes: 0, attempts: 0, refused: {}, timeouts: 0, closes: 0, allConnectedMs: null, allCodesMs: null };
const state = [];
for (let i = 0; i < N; i++) {
  const id = `${prefix}${i}`;
  const s = { id, connected: false, codes: false };
  state.push(s);
  const c = mqtt.connect(url, {
    clientId: id,
    username: id,
    password: secret,
    clean: true,
    keepalive: 30,
    connectTimeout: Number(timeoutS),
    reconnectPeriod: 0,
    will: { topic: `locker/v1/t/${id}/up/status`, payload: JSON.stringify({ v: 1, state: 'offline', terminalId: id, reason: 'connection-lost' }), qos: 1, retain: true },
  });
  stats.attempts++;
  const retry = () => setTimeout(() => { stats.attempts++; c.reconnect(); }, 1000 + Math.random() * 2000);
  c.on('connect', () => {
    s.connected = true;
    stats.connected++;
    if (stats.connected === N && stats.allConnectedMs === null) stats.allConnectedMs = Date.now() - t0;
    c.subscribe(`locker/v1/t/${id}/down/#`, { qos: 1 });
    const now = new Date().toISOString();
    c.publish(`locker/v1/t/${id}/up/status`, JSON.stringify({ v: 1, state: 'online', terminalId: id, agentVersion: 'storm', startedAt: now, at: now, codes: { epoch: null, version: 0, count: 0 }, journal: { unsent: 0, lastSeq: 0 }, buses: [] }), { qos: 1, retain: true });
  });
  c.on('message', (topic) => {
    if (!s.codes && topic.endsWith('/down/codes')) {
      s.codes = true;
      stats.withCodes++;
      if (stats.withCodes === N && stats.allCodesMs === null) stats.allCodesMs = Date.now() - t0;
    }
  });
  c.on('error', (e) => {
    const code = typeof e.code === 'number' ? e.code : String(e.message).includes('connack timeout') ? 'timeout' : e.code ?? 'other';
    if (code === 'timeout') stats.timeouts++;
    else stats.refused[code] = (stats.refused[code] ?? 0) + 1;
  });
  c.on('close', () => {
    stats.closes++;
    if (s.connected) {
      s.connected = false;
      stats.connected--;
    }
    retry();
  });
}
const tick = setInterval(() => {
  console.log(JSON.stringify({ t: Date.now() - t0, ...stats }));
  if ((stats.allConnectedMs !== null && stats.allCodesMs !== null) || Date.now() - t0 > Number(durationS)) {
    clearInterval(tick);
    console.log(JSON.stringify({ t: Date.now() - t0, done: true, ...stats }));
    process.exit(0);
  }
}, 1000);
