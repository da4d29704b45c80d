// Nagle's algorithm off on MQTT connections (TCP_NODELAY). The one place this is explained; the
// docs and the tests (test-support/nagle.ts) point here.
//
// With Nagle on, a small write waits in the kernel while an earlier write on the same socket is not
// yet acknowledged by the peer's TCP. A peer that answers what it receives (an MQTT client or
// broker sending PUBACKs) is taken by Linux for an interactive one, and its TCP then delays an
// acknowledgement it has no data to carry on, until its delayed-ACK timer fires: up to about 40 ms
// (Linux's minimum). MQTT writes many small packets that get no answer (a PUBACK, a QoS 0 publish),
// and a packet that followed one of them within that time waited for the timer. With Mosquitto and
// two central instances, 34 of 200 code pushes after a booking reached their terminal 39-55 ms
// after the answer instead of 0-16 ms, held behind the PUBACK the instance had sent just before
// (docs/benchmarks.md, "The twenty-fifth session's runs").
//
// mqtt.js and aedes leave TCP sockets at the kernel's default, so every MQTT socket of ours sets it:
// the central's client of an external broker, the embedded broker's accepted sockets, the terminal
// agent's client and the fleet simulator's; Mosquitto's own sockets by `set_tcp_nodelay true` in
// deploy/mosquitto.conf. Over WebSockets the ws library already sets it on its socket. Through a
// SOCKS proxy (mqtt.js's socksProxy option or MQTTJS_SOCKS_PROXY) the stream is not the socket and
// the option cannot be set from here.

interface NoDelaySocket {
  setNoDelay(noDelay?: boolean): unknown;
}

/** the part of an mqtt.js client this needs: its current stream, replaced at every reconnect */
export interface MqttClientLike {
  stream?: unknown;
  on(event: 'packetsend', listener: (packet: { cmd: string }) => void): unknown;
}

function setNoDelay(stream: unknown): void {
  const s = stream as Partial<NoDelaySocket> | undefined;
  // TCP and TLS sockets; a WebSocket or SOCKS stream has no such method (see above)
  if (s && typeof s.setNoDelay === 'function') s.setNoDelay(true);
}

/**
 * TCP_NODELAY on the client's socket now (mqtt.connect() has built it; the option is kept until it
 * connects) and on every later one: mqtt.js builds a new stream at each reconnect and writes its
 * CONNECT first, so the option is set before anything else goes out on it (the outgoing store's
 * replay, the PUBACKs of a resumed session's backlog, which come before mqtt.js's 'connect' event).
 */
export function mqttNoDelay<C extends MqttClientLike>(client: C): C {
  setNoDelay(client.stream);
  client.on('packetsend', (packet) => {
    if (packet.cmd === 'connect') setNoDelay(client.stream);
  });
  return client;
}
