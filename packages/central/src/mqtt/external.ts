// The central service as a client of an external MQTT broker (Mosquitto here; EMQX or HiveMQ
// clusters in the field). Several central instances share the broker; each subscribes with a
// shared subscription ($share/central/...) when asked, so one instance handles each event.
import mqtt, { type MqttClient } from 'mqtt';
import type { Logger } from '../logger';
import { topicMatches, type Handler, type MessageBus } from './bus';

export interface ExternalBrokerOptions {
  url: string;
  username?: string;
  password?: string;
  clientId?: string;
  log: Logger;
}

export class ExternalBroker implements MessageBus {
  readonly kind = 'external' as const;
  private client: MqttClient | null = null;
  private readonly handlers: { filter: string; handler: Handler }[] = [];
  private readonly log: Logger;

  constructor(private readonly opts: ExternalBrokerOptions) {
    this.log = opts.log.child({ ns: 'central.mqtt.client' });
  }

  async start(): Promise<void> {
    const client = mqtt.connect(this.opts.url, {
      clientId: this.opts.clientId ?? `locker-central-${process.pid}-${Math.random().toString(16).slice(2, 8)}`,
      username: this.opts.username,
      password: this.opts.password,
      reconnectPeriod: 1000,
      connectTimeout: 10_000,
      clean: true,
    });
    client.on('message', (topic, payload) => {
      for (const h of this.handlers) {
        if (!topicMatches(h.filter, topic)) continue;
        try {
          const r = h.handler(topic, payload);
          if (r instanceof Promise) r.catch((err) => this.log.error({ err, topic }, 'message handler failed'));
        } catch (err) {
          this.log.error({ err, topic }, 'message handler failed');
        }
      }
    });
    client.on('error', (err) => this.log.warn({ err: err.message }, 'broker connection error'));
    client.on('reconnect', () => this.log.info('reconnecting to broker'));
    this.client = client;
    await new Promise<void>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`cannot connect to MQTT broker ${this.opts.url}`)), 10_000);
      client.once('connect', () => {
        clearTimeout(t);
        resolve();
      });
    });
    this.log.info({ url: this.opts.url }, 'connected to external MQTT broker');
  }

  address(): string | null {
    return this.opts.url;
  }

  async publish(topic: string, payload: Buffer | string, opts: { qos?: 0 | 1; retain?: boolean } = {}): Promise<void> {
    if (!this.client) throw new Error('bus not started');
    await this.client.publishAsync(topic, payload, { qos: opts.qos ?? 1, retain: opts.retain ?? false });
  }

  async subscribe(filter: string, handler: Handler): Promise<void> {
    if (!this.client) throw new Error('bus not started');
    this.handlers.push({ filter, handler });
    await this.client.subscribeAsync(filter, { qos: 1 });
  }

  async stop(): Promise<void> {
    const c = this.client;
    this.client = null;
    if (c) await c.endAsync();
  }
}
