// Nagle's algorithm off on MQTT connections (TCP_NODELAY).
//
// With Nagle on, a small write waits in the kernel while an earlier write on the same socket is not
// yet acknowledged by the peer's TCP. A peer that has just answered something delays its TCP
// acknowledgements (Linux: at least 40 ms) unless it has data of its own to send. MQTT writes
// many small packets that get no answer (a PUBACK, a QoS 0 publish), and what follows one of them
// within 40 ms waited for the delayed acknowledgement: with Mosquitto and two central instances,
// 17 % of the code pushes after a booking (34 of 200) reached their terminal 39-55 ms after the
// answer instead of 1-16 ms, held behind the PUBACK the instance had sent just before
// (docs/benchmarks.md, the twenty-fifth session). mqtt.js and aedes leave the option at the
// kernel's default; every MQTT socket of ours sets it: the central's client of an external broker,
// the embedded broker's accepted sockets, the terminal agent's client and the fleet simulator's.
// (Mosquitto's own sockets: `set_tcp_nodelay true` in deploy/mosquitto.conf.)

interface NoDelaySocket {
  setNoDelay(noDelay?: boolean): unknown;
}

/** the part of an mqtt.js client this needs: its current stream, replaced at every reconnect */
export interface MqttClientLike {
  stream?: unknown;
  on(event: 'connect', listener: () => void): unknown;
}

function setNoDelay(stream: unknown): void {
  const s = stream as Partial<NoDelaySocket> | undefined;
  // TCP and TLS sockets; a WebSocket stream has no such option and is left as it is
  if (s && typeof s.setNoDelay === 'function') s.setNoDelay(true);
}

/**
 * TCP_NODELAY on the client's socket now (the option is kept until the socket connects) and on
 * every later one: mqtt.js builds a new stream at each reconnect, and before its CONNACK nothing
 * but the CONNECT is written on it.
 */
export function mqttNoDelay<C extends MqttClientLike>(client: C): C {
  setNoDelay(client.stream);
  client.on('connect', () => setNoDelay(client.stream));
  return client;
}

/** TCP_NODELAY on a socket a broker accepted (the embedded broker's `net.Server`s). */
export function socketNoDelay(socket: NoDelaySocket): void {
  socket.setNoDelay(true);
}
