// The central service as a client of an external MQTT broker (Mosquitto here; EMQX or HiveMQ
// clusters in the field). The session is persistent (clean: false, a stable client id), so the
// broker keeps QoS 1 messages for a central instance that is down and hands them over when it is
// back; a message is acknowledged (PUBACK) only after its handlers have finished with it, so a
// crash in between makes the broker deliver it again. Several instances each get every terminal
// message; the handlers deduplicate (terminal events by event id).
import os from 'node:os';
import mqtt, { type MqttClient } from 'mqtt';
import type { Logger } from '../logger';
import { topicMatches, type Handler, type MessageBus, type SubscribeOptions } from './bus';

export interface ExternalBrokerOptions {
  url: string;
  username?: string;
  password?: string;
  clientId?: string;
  /** MQTT 5 shared subscription group for subscriptions made with `shared` (mqtt.sharedGroup) */
  sharedGroup?: string;
  log: Logger;
}

const MAX_PENDING = 10_000;

/**
 * The central instance's MQTT client id: the configured one, else its user name, else
 * locker-central-<hostname>. Brokers set to use the user name as client id (Mosquitto's
 * use_username_as_clientid, deploy/mosquitto.conf) keep the session under the user name whatever
 * the client sends; using the same id here keeps it the same session with that setting on or off.
 */
export function centralClientId(opts: { clientId?: string; username?: string }, hostname: string = os.hostname()): string {
  return opts.clientId || opts.username || `locker-central-${hostname}`;
}

/** The broker URL for logs and display: a password in it is masked, a user name kept. */
export function maskUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(invalid url)';
  }
}

export class ExternalBroker implements MessageBus {
  readonly kind = 'external' as const;
  private client: MqttClient | null = null;
  private readonly handlers: { filter: string; handler: Handler }[] = [];
  private pending: { topic: string; payload: Buffer; done: (err?: Error) => void }[] = [];
  private readonly log: Logger;

  constructor(private readonly opts: ExternalBrokerOptions) {
    this.log = opts.log.child({ ns: 'central.mqtt.client' });
  }

  async start(): Promise<void> {
    const client = mqtt.connect(this.opts.url, {
      // stable across restarts, so the broker can keep this instance's session
      clientId: centralClientId(this.opts),
      username: this.opts.username,
      password: this.opts.password,
      reconnectPeriod: 1000,
      connectTimeout: 10_000,
      clean: false,
    });
    // Handlers run before the PUBACK: mqtt.js acknowledges a QoS 1 message when `done` runs. A
    // persistent session delivers queued messages right after CONNECT, before the service has
    // subscribed its handlers again: those wait (unacknowledged) until a matching handler exists.
    client.handleMessage = (packet, done) => {
      const payload = Buffer.isBuffer(packet.payload) ? packet.payload : Buffer.from(packet.payload);
      if (!this.handlers.some((h) => topicMatches(h.filter, packet.topic))) {
        if (this.pending.length < MAX_PENDING) this.pending.push({ topic: packet.topic, payload, done });
        else this.log.error({ topic: packet.topic }, 'too many messages without a handler; dropping the connection');
        return;
      }
      this.dispatch(packet.topic, payload, done);
    };
    client.on('error', (err) => this.log.warn({ err: err.message }, 'broker connection error'));
    client.on('reconnect', () => this.log.info('reconnecting to broker'));
    this.client = client;
    await new Promise<void>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`cannot connect to MQTT broker ${maskUrl(this.opts.url)}`)), 10_000);
      client.once('connect', () => {
        clearTimeout(t);
        resolve();
      });
    });
    this.log.info({ url: maskUrl(this.opts.url) }, 'connected to external MQTT broker');
  }

  /** the broker URL, its password masked (shown on the console; terminals use their own credentials) */
  address(): string | null {
    return maskUrl(this.opts.url);
  }

  connected(): boolean {
    return this.client?.connected ?? false;
  }

  async publish(topic: string, payload: Buffer | string, opts: { qos?: 0 | 1; retain?: boolean } = {}): Promise<void> {
    if (!this.client) throw new Error('bus not started');
    await this.client.publishAsync(topic, payload, { qos: opts.qos ?? 1, retain: opts.retain ?? false });
  }

  private dispatch(topic: string, payload: Buffer, done: (err?: Error) => void): void {
    const hs = this.handlers.filter((h) => topicMatches(h.filter, topic));
    void Promise.allSettled(hs.map((h) => Promise.resolve().then(() => h.handler(topic, payload)))).then((results) => {
      const failed = results.filter((r) => r.status === 'rejected') as PromiseRejectedResult[];
      for (const r of failed) this.log.error({ err: r.reason, topic }, 'message handler failed');
      if (!failed.length) return done();
      // not acknowledged: drop the connection so the broker delivers the message again
      done(new Error('message not handled'));
      this.client?.stream?.destroy();
    });
  }

  async subscribe(filter: string, handler: Handler, opts: SubscribeOptions = {}): Promise<void> {
    if (!this.client) throw new Error('bus not started');
    this.handlers.push({ filter, handler });
    const waiting = this.pending.filter((m) => topicMatches(filter, m.topic));
    this.pending = this.pending.filter((m) => !topicMatches(filter, m.topic));
    for (const m of waiting) this.dispatch(m.topic, m.payload, m.done);
    // a shared subscription delivers with the plain topic: the handler's filter stays the plain one
    const wire = opts.shared && this.opts.sharedGroup ? `$share/${this.opts.sharedGroup}/${filter}` : filter;
    await this.client.subscribeAsync(wire, { qos: 1 });
  }

  async stop(): Promise<void> {
    const c = this.client;
    this.client = null;
    if (c) await c.endAsync();
  }
}
