// The message bus between the central service and terminals: one small interface, two
// implementations — an MQTT broker embedded in the central process (aedes, the embedded default)
// and a client of an external broker (Mosquitto, EMQX, HiveMQ). Contract tests run against both.
/** A subscriber; with `beforeAck` a returned promise is awaited before the publisher's PUBACK. */
export type Handler = (topic: string, payload: Buffer) => unknown;

export interface SubscribeOptions {
  /**
   * Embedded broker: run the handler for messages published by terminals before the broker
   * acknowledges them (PUBACK), awaiting a returned promise, so an acknowledged message is one the
   * handler has dealt with (stored). Such a handler is not also called as an ordinary subscriber.
   * External broker: an ordinary subscription (the broker acknowledges on its own).
   */
  beforeAck?: boolean;
  /**
   * External broker with mqtt.sharedGroup set: subscribe through the MQTT 5 shared subscription
   * `$share/<group>/<filter>`, so the broker gives each message to one instance of the group.
   * Embedded broker (one instance): no effect.
   */
  shared?: boolean;
  /**
   * With `shared` on an external broker: also take the retained messages of the filter once, when
   * subscribing (a shared subscription gets none: MQTT 5 4.8.2), through a plain subscription that
   * is dropped again at once. The embedded broker: no effect.
   */
  retained?: boolean;
}

export interface MessageBus {
  readonly kind: 'embedded' | 'external';
  start(): Promise<void>;
  stop(): Promise<void>;
  publish(topic: string, payload: Buffer | string, opts?: { qos?: 0 | 1; retain?: boolean }): Promise<void>;
  /** subscribes the central service to a topic filter (MQTT wildcards allowed) */
  subscribe(filter: string, handler: Handler, opts?: SubscribeOptions): Promise<void>;
  /** where terminals connect (embedded: the listening address) */
  address(): string | null;
  /** ready for terminals: embedded, the broker listens; external, the client is connected (GET /ready) */
  connected(): boolean;
}

/** MQTT topic filter matching (+ one level, # the rest). */
export function topicMatches(filter: string, topic: string): boolean {
  const f = filter.split('/');
  const t = topic.split('/');
  for (let i = 0; i < f.length; i++) {
    if (f[i] === '#') return true;
    if (i >= t.length) return false;
    if (f[i] !== '+' && f[i] !== t[i]) return false;
  }
  return f.length === t.length;
}
