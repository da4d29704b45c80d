// The central service as a client of an external MQTT broker (Mosquitto here; EMQX or HiveMQ
// clusters in the field). The session is persistent (clean: false, a stable client id), so the
// broker keeps QoS 1 messages for a central instance that is down and hands them over when it is
// back; a message is acknowledged (PUBACK) only after its handlers have finished with it, so a
// crash in between makes the broker deliver it again. Several instances each get every terminal
// message (or, with mqtt.sharedGroup, their share); the handlers deduplicate (terminal events by
// event id).
//
// Messages are handled concurrently: mqtt.js works off incoming packets strictly one at a time
// and sends a QoS 1 message's PUBACK when its handler calls back, so holding the callback until the
// handler finished made every handler wait for the one before it, and the PUBACKs of this
// instance's own publishes (code pushes, event acknowledgements) wait behind them all. Instead the
// callback runs at once and the PUBACK mqtt.js then sends is held back (the _sendPacket wrapper in start()) until the
// message's handlers finished; held PUBACKs go out in the order the messages came (MQTT 3.1.1
// 4.6), and a handler that fails drops the connection with its PUBACK and all later ones unsent, so
// the broker delivers those again. How many messages are in flight at once is the broker's bound
// (Mosquitto: max_inflight_messages, 20 by default); the event ingestion batches what they bring.
import os from 'node:os';
import mqtt, { type MqttClient } from 'mqtt';
import { mqttNoDelay } from '@locker/common';
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

/** A received QoS 1 message whose PUBACK waits for its handlers (in arrival order). */
interface HeldAck {
  messageId: number;
  /** the connection it came on: a PUBACK never goes out on another one */
  stream: unknown;
  handled: boolean;
  /** the PUBACK mqtt.js wanted to send, with its continuation */
  send: (() => void) | null;
}

type SendPacket = (packet: { cmd: string; messageId?: number }, cb?: (err?: Error) => void, ...rest: unknown[]) => void;

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
  /** QoS 1 messages in flight whose PUBACK is held until they are handled, in arrival order */
  private held: HeldAck[] = [];
  private readonly heldById = new Map<number, HeldAck>();
  /** the broker still had this instance's session at the first connect (its subscriptions and queued messages) */
  private sessionPresent = false;
  /** messages being handled right now */
  inFlight = 0;
  /** the most handled at once so far */
  maxInFlight = 0;

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
    // Handlers run before the PUBACK (held until they finished: see the top of this file). A
    // persistent session delivers queued messages right after CONNECT, before the service has
    // subscribed its handlers again: those wait (unacknowledged) until a matching handler exists.
    const sendPacket = (client as unknown as { _sendPacket: SendPacket })._sendPacket.bind(client);
    (client as unknown as { _sendPacket: SendPacket })._sendPacket = (packet, cb, ...rest) => {
      if (packet.cmd !== 'puback') return sendPacket(packet, cb, ...rest);
      // a PUBACK never waits for the next connection (mqtt.js would queue it): there its id names another message
      if (!client.connected) return cb?.();
      const h = packet.messageId !== undefined ? this.heldById.get(packet.messageId) : undefined;
      if (!h || h.send) return sendPacket(packet, cb, ...rest);
      h.send = () => sendPacket(packet, () => undefined, ...rest);
      cb?.(); // mqtt.js goes on with the next incoming packet
      this.flushAcks();
    };
    // Nagle off: a push that follows a held PUBACK goes out at once (packages/common/src/mqtt-socket.ts)
    mqttNoDelay(client);
    client.on('close', () => this.dropHeld());
    client.handleMessage = (packet, done) => {
      const payload = Buffer.isBuffer(packet.payload) ? packet.payload : Buffer.from(packet.payload);
      const finished = this.hold(packet.qos === 1 ? packet.messageId : undefined);
      if (!this.handlers.some((h) => topicMatches(h.filter, packet.topic))) {
        if (this.pending.length < MAX_PENDING) this.pending.push({ topic: packet.topic, payload, done: finished });
        else {
          this.log.error({ topic: packet.topic }, 'too many messages without a handler; dropping the connection');
          finished(new Error('too many messages without a handler'));
        }
      } else this.dispatch(packet.topic, payload, finished);
      done(); // the PUBACK is held until `finished` (a QoS 1 message); the next packet is taken in
    };
    client.on('error', (err) => this.log.warn({ err: err.message }, 'broker connection error'));
    client.on('reconnect', () => this.log.info('reconnecting to broker'));
    this.client = client;
    await new Promise<void>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`cannot connect to MQTT broker ${maskUrl(this.opts.url)}`)), 10_000);
      client.once('connect', (connack) => {
        this.sessionPresent = Boolean(connack.sessionPresent);
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

  /**
   * Registers a received message's PUBACK as held (QoS 1: `messageId`); returns what to call once
   * its handlers finished (with an error: not acknowledged, the connection is dropped).
   */
  private hold(messageId: number | undefined): (err?: Error) => void {
    this.inFlight++;
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    let h: HeldAck | null = null;
    if (messageId !== undefined) {
      h = { messageId, stream: this.client?.stream, handled: false, send: null };
      this.held.push(h);
      this.heldById.set(messageId, h);
    }
    let called = false;
    return (err?: Error) => {
      if (called) return;
      called = true;
      this.inFlight--;
      if (err) {
        // not acknowledged (nor is anything after it): drop the connection so the broker delivers them again
        const stream = this.client?.stream;
        if (!h || h.stream === stream) {
          this.dropHeld();
          stream?.destroy();
        }
        return;
      }
      if (h) {
        h.handled = true;
        this.flushAcks();
      }
    };
  }

  /** Sends the held PUBACKs from the oldest on, as far as their messages are handled. */
  private flushAcks(): void {
    const stream = this.client?.stream;
    while (this.held.length) {
      const h = this.held[0]!;
      if (h.stream !== stream || !this.client?.connected) {
        // from a connection that is gone: the broker delivers that message again
        this.held.shift();
        if (this.heldById.get(h.messageId) === h) this.heldById.delete(h.messageId);
        continue;
      }
      if (!h.handled || !h.send) return;
      this.held.shift();
      if (this.heldById.get(h.messageId) === h) this.heldById.delete(h.messageId);
      h.send();
    }
  }

  /** The connection ended: no held PUBACK may go out (on the next connection an id names another message). */
  private dropHeld(): void {
    this.held = [];
    this.heldById.clear();
  }

  private dispatch(topic: string, payload: Buffer, done: (err?: Error) => void): void {
    const hs = this.handlers.filter((h) => topicMatches(h.filter, topic));
    void Promise.allSettled(hs.map((h) => Promise.resolve().then(() => h.handler(topic, payload)))).then((results) => {
      const failed = results.filter((r) => r.status === 'rejected') as PromiseRejectedResult[];
      for (const r of failed) this.log.error({ err: r.reason, topic }, 'message handler failed');
      done(failed.length ? new Error('message not handled') : undefined);
    });
  }

  async subscribe(filter: string, handler: Handler, opts: SubscribeOptions = {}): Promise<void> {
    if (!this.client) throw new Error('bus not started');
    this.handlers.push({ filter, handler });
    const waiting = this.pending.filter((m) => topicMatches(filter, m.topic));
    this.pending = this.pending.filter((m) => !topicMatches(filter, m.topic));
    for (const m of waiting) this.dispatch(m.topic, m.payload, m.done);
    // a shared subscription delivers with the plain topic: the handler's filter stays the plain one
    const shared = Boolean(opts.shared && this.opts.sharedGroup);
    const wire = shared ? `$share/${this.opts.sharedGroup}/${filter}` : filter;
    await this.client.subscribeAsync(wire, { qos: 1 });
    if (shared && opts.retained && !this.sessionPresent) {
      // the retained messages (e.g. every terminal's last status) once, at the first start of this
      // instance's session (a resumed session kept the shared subscription, and what was published
      // while the instance was away is queued for it): the broker queues them for this session on
      // the SUBSCRIBE and delivers them although the plain subscription is dropped right after;
      // live messages that came through both meanwhile are handled twice (idempotent)
      await this.client.subscribeAsync(filter, { qos: 1 });
      await this.client.unsubscribeAsync(filter);
    }
  }

  async stop(): Promise<void> {
    const c = this.client;
    this.client = null;
    if (c) await c.endAsync();
  }
}
