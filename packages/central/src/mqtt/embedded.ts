// The embedded MQTT broker (aedes) inside the central service. Terminals authenticate with their
// provisioned id and secret (username = client id = terminal id) and are confined to their own
// topics (topics.ts). The central service itself publishes and subscribes in-process.
import net from 'node:net';
import { Aedes, type AedesPublishPacket, type Client } from 'aedes';
import { indexRetained, type RetainedIndex, type RetainedPersistence } from './retained-index';
import type { Kysely } from 'kysely';
import type { Db } from '../db/database';
import type { Database } from '../db/schema';
import type { Logger } from '../logger';
import type { DigestKey } from '../auth/terminal-secret-digest';
import { ACCEPTORS, duplicateListener } from './acceptors';
import { TerminalLogins, AUTH_THROTTLE, MAX_PENDING_CHECKS, type AuthThrottle } from './terminal-auth';
import { TOPIC_ROOT, mayPublish, maySubscribe, parseTopic } from './topics';
import { topicMatches, type Handler, type MessageBus, type SubscribeOptions } from './bus';

export interface EmbeddedBrokerOptions {
  host: string;
  port: number;
  db: Kysely<Database>;
  /** SQLite in a file: reads of committed rows beside the writer (Db.committedGet), for the terminals' logins */
  committedGet?: Db['committedGet'];
  log: Logger;
  /** when the port is taken (say by a system Mosquitto), listen on a free one instead of failing */
  fallbackToFreePort?: boolean;
  /**
   * Topic filters whose terminal messages are acknowledged only by a beforeAck handler (the edge
   * sync storing them): with no such handler registered the message is refused, so the terminal
   * keeps it and sends it again. Default: every terminal's up/events. [] makes a plain bus.
   */
  storedBeforeAck?: string[];
  /** throttling of failed terminal logins (defaults: AUTH_THROTTLE) */
  authThrottle?: Partial<AuthThrottle>;
  /**
   * secret checks (scrypt) in progress at most (default MAX_PENDING_CHECKS); a login that would
   * start one more is refused at once with CONNACK 3 (server unavailable) and retried by the terminal
   */
  maxPendingLogins?: number;
  /** how long a verified terminal login is remembered (default 12 h; 0: not at all) */
  loginCacheMs?: number;
  /**
   * the key of the fast digests of high-entropy terminal secrets (terminalDigestKey of
   * mqtt.terminalSecretPepper); null or absent: every terminal login uses scrypt
   */
  terminalDigestKey?: DigestKey | null;
  /**
   * Largest MQTT packet a terminal may send (the packet's remaining length: topic and payload of a
   * PUBLISH), default MAX_TERMINAL_MESSAGE_BYTES. A larger one drops the connection as soon as its
   * header is read, before the payload is buffered. Messages the central service publishes (code
   * snapshots on down/) are not limited by it.
   */
  maxMessageBytes?: number;
  /** distinct topic filters one terminal connection may subscribe to (default MAX_SUBSCRIPTIONS) */
  maxSubscriptions?: number;
  /**
   * descriptors of the listening socket (default ACCEPTORS, mqtt/acceptors.ts): a turn of the
   * event loop accepts at most one connection per descriptor; 1: the socket's own only
   */
  acceptors?: number;
}

/** Default of mqtt.maxMessageBytes: far above the largest legitimate terminal message (a status). */
export const MAX_TERMINAL_MESSAGE_BYTES = 256 * 1024;
/** Default of mqtt.maxSubscriptions: a terminal subscribes to 4 filters (down/codes, down/commands, down/eventAcks, down/lockers). */
export const MAX_SUBSCRIPTIONS = 16;
/** The only up/ topic a terminal publishes retained (its status and last will). */
const RETAINED_KINDS = new Set(['status']);

export { AUTH_THROTTLE, MAX_PENDING_CHECKS, type AuthThrottle };

/**
 * aedes' `concurrency` (passed to its mqemitter). 0 = no bound: every message is handed to its
 * subscribers when published. With a bound (aedes' default 100), messages published while 100
 * deliveries are still pending (e.g. QoS 1 deliveries waiting for a terminal's socket to drain)
 * wait in a queue, and when a delivery completes mqemitter works through that queue by recursion
 * (released -> _do -> qlobber match -> fastparallel -> released ...): one level per queued message
 * whose subscribers answer synchronously (the central service's handlers, $SYS messages with no
 * subscriber). About 2,500 such messages overflow the stack (`RangeError: Maximum call stack size
 * exceeded` in qlobber's _match) and the process exits: a reconnect storm of thousands of
 * terminals (a $SYS message per connect and disconnect, a retained status per terminal) fills
 * that queue. The bound never limited memory (the queue has no bound), so there is no queue.
 * Shown by mqtt-emitter-recursion.test.ts.
 */
/**
 * The accept queue of the broker's socket. Node's default (511) is too short for a fleet that
 * reconnects at once: connections beyond it lose their SYN, the kernel retransmits it after 1, 3,
 * 7 ... s, and a terminal's 10 s connect timeout runs out before its CONNACK (10,000 terminals at
 * once: 10,237 timeouts and retries). The kernel caps it at net.core.somaxconn (4096 on current
 * kernels; raise that sysctl for larger waves).
 */
export const LISTEN_BACKLOG = 65_535;

export const AEDES_CONCURRENCY = 0;

const TERMINAL_SECRET_SQL = 'SELECT secret_hash, secret_fast FROM terminals WHERE id = ?';

/** The terminal messages the embedded broker never acknowledges unless a handler stored them. */
export const STORED_BEFORE_ACK = [`${TOPIC_ROOT}/+/up/events`];

export class EmbeddedBroker implements MessageBus {
  readonly kind = 'embedded' as const;
  private broker: Aedes | null = null;
  /** the index over retained messages (mqtt/retained-index.ts); null until started */
  retained: RetainedIndex | null = null;
  private server: net.Server | null = null;
  /** further descriptors of the server's socket (mqtt/acceptors.ts) */
  private acceptors: net.Server[] = [];
  private addr: string | null = null;
  private readonly logins: TerminalLogins;
  private readonly beforeAck: { filter: string; handler: Handler }[] = [];
  private readonly log: Logger;
  private readonly maxMessageBytes: number;
  private readonly maxSubscriptions: number;
  /** the distinct filters each connection subscribed to (gone with the client object) */
  private readonly subscriptions = new WeakMap<Client, { filters: Set<string>; warned: boolean }>();

  constructor(private readonly opts: EmbeddedBrokerOptions) {
    this.log = opts.log.child({ ns: 'central.mqtt.broker' });
    this.logins = new TerminalLogins({
      lookup: async (id) => {
        // SQLite in a file: read at once beside the writer (Db.committedGet), not queued behind the
        // edge sync's work: in a reconnect storm a login that waited there for the one connection
        // missed the terminal's CONNACK timeout, and every retry queued one more
        const row = opts.committedGet
          ? opts.committedGet<{ secret_hash: string; secret_fast: string | null }>(TERMINAL_SECRET_SQL, [id])
          : await opts.db.selectFrom('terminals').select(['secret_hash', 'secret_fast']).where('id', '=', id).executeTakeFirst();
        return row ? { hash: row.secret_hash, fast: row.secret_fast } : null;
      },
      digestKey: opts.terminalDigestKey,
      // only while the row still has the hash that verified (a re-provisioned secret wins)
      backfill: async (id, hash, digest) => {
        await opts.db.updateTable('terminals').set({ secret_fast: digest }).where('id', '=', id).where('secret_hash', '=', hash).execute();
      },
      throttle: opts.authThrottle,
      maxPendingChecks: opts.maxPendingLogins,
      cacheTtlMs: opts.loginCacheMs,
      cacheMax: opts.loginCacheMs === 0 ? 0 : undefined,
      log: this.log,
    });
    this.maxMessageBytes = opts.maxMessageBytes ?? MAX_TERMINAL_MESSAGE_BYTES;
    this.maxSubscriptions = opts.maxSubscriptions ?? MAX_SUBSCRIPTIONS;
  }

  private tooLarge(terminal: string | null, remote: string | undefined, bytes: number, cmd: string | undefined): void {
    this.log.warn({ terminal, remote, cmd, bytes, maxBytes: this.maxMessageBytes, errorCode: 'MESSAGE_TOO_LARGE' }, 'terminal message larger than mqtt.maxMessageBytes refused; connection dropped');
  }

  /**
   * Drops a connection as soon as the fixed header of a packet announces more than maxMessageBytes,
   * before the parser buffers the rest (aedes has no packet size limit of its own). It hooks the
   * length state of the client's mqtt-packet parser; authorizePublish checks the payload size again
   * in case that internal ever changes.
   */
  private limitPacketSize(client: Client, socket: net.Socket): void {
    const parser = (client as unknown as { _parser?: { packet: { cmd?: string; length: number }; _parseLength?: () => boolean } })._parser;
    if (!parser || typeof parser._parseLength !== 'function') return;
    const parseLength = parser._parseLength.bind(parser);
    parser._parseLength = () => {
      const ok = parseLength();
      if (ok && parser.packet.length > this.maxMessageBytes) {
        this.tooLarge(client.id ?? null, socket.remoteAddress, parser.packet.length, parser.packet.cmd);
        socket.destroy();
        return false;
      }
      return ok;
    };
  }

  async start(): Promise<void> {
    const broker = await Aedes.createBroker({
      id: 'locker-central',
      concurrency: AEDES_CONCURRENCY,
      authenticate: (client, username, password, done) => {
        const conn = client.conn as { remoteAddress?: string; destroyed?: boolean; _readableState?: { ended?: boolean } } | undefined;
        // closed: aedes closed the client, the socket is gone, or the terminal's end of it has
        // arrived (aedes reads nothing while a login is checked, so its 'end' event waits; the
        // stream has seen the EOF all the same: a terminal that gave up on this attempt)
        const isClosed = () => !!(client.closed || conn?.destroyed || conn?._readableState?.ended);
        this.logins.login({ clientId: client.id, username, password, address: conn?.remoteAddress ?? 'unknown', isClosed }).then(
          (r) => {
            if (r === 'ok') return done(null, true);
            const err =
              r === 'throttled'
                ? Object.assign(new Error('too many failed logins'), { returnCode: 5 as const })
                : r === 'bad'
                  ? Object.assign(new Error('bad terminal id or secret'), { returnCode: 4 as const })
                  : Object.assign(new Error(r === 'busy' ? 'server busy: too many logins in progress' : 'connection closed'), { returnCode: 3 as const });
            done(err as never, false);
          },
          (e) => {
            this.log.error({ err: e }, 'authentication failed with an error');
            done(Object.assign(new Error('server unavailable'), { returnCode: 3 as const }) as never, false);
          },
        );
      },
      authorizePublish: (client, packet, cb) => {
        if (!client) return cb(null); // the central service itself
        if (!mayPublish(client.id, packet.topic)) {
          this.log.warn({ terminal: client.id, topic: packet.topic }, 'publish outside own topics refused');
          return cb(new Error('not authorized'));
        }
        const size = Buffer.byteLength(packet.payload as Buffer | string);
        if (size > this.maxMessageBytes) {
          this.tooLarge(client.id, (client.conn as { remoteAddress?: string } | undefined)?.remoteAddress, size, 'publish');
          return cb(Object.assign(new Error('message too large'), { code: 'MESSAGE_TOO_LARGE' }));
        }
        // the protocol (docs/edge-protocol.md) is QoS 1 throughout, retained only on up/status
        if (packet.qos === 2) {
          this.log.warn({ terminal: client.id, topic: packet.topic, errorCode: 'QOS_NOT_ALLOWED' }, 'terminal publish with QoS 2 refused (the edge protocol uses QoS 0/1)');
          return cb(new Error('QoS 2 not allowed'));
        }
        if (packet.retain && !RETAINED_KINDS.has(parseTopic(packet.topic)?.kind ?? '')) {
          this.log.warn({ terminal: client.id, topic: packet.topic, errorCode: 'RETAIN_NOT_ALLOWED' }, 'retained terminal publish refused (only up/status is retained)');
          return cb(new Error('retain not allowed'));
        }
        // beforeAck subscribers run here, before aedes writes the PUBACK (QoS 1 acks first, then
        // delivers): the terminal's message is acknowledged only once they are done with it
        const hooks = this.beforeAck.filter((h) => topicMatches(h.filter, packet.topic));
        if (!hooks.length) {
          if (!(this.opts.storedBeforeAck ?? STORED_BEFORE_ACK).some((f) => topicMatches(f, packet.topic))) return cb(null);
          // nothing would store it (the edge sync is not running yet, or any more): refused, the
          // connection drops and the terminal sends it again from its journal
          this.log.warn({ terminal: client.id, topic: packet.topic, errorCode: 'NOT_STORED' }, 'terminal message refused: nothing stores it yet; the terminal sends it again');
          return cb(Object.assign(new Error('message not stored'), { code: 'NOT_STORED' }));
        }
        const payload = Buffer.isBuffer(packet.payload) ? packet.payload : Buffer.from(packet.payload);
        void Promise.allSettled(hooks.map((h) => Promise.resolve().then(() => h.handler(packet.topic, payload)))).then((results) => {
          const failed = results.filter((r) => r.status === 'rejected');
          for (const r of failed) this.log.error({ err: (r as PromiseRejectedResult).reason, topic: packet.topic }, 'message handler failed');
          // A message a handler could not deal with is not acknowledged: the broker drops the
          // connection instead, and the terminal sends it again from its journal.
          cb(failed.length ? new Error('message not stored') : null);
        });
      },
      authorizeSubscribe: (client, sub, cb) => {
        if (!maySubscribe(client.id, sub.topic)) {
          this.log.warn({ terminal: client.id, topic: sub.topic }, 'subscribe outside own topics refused');
          return cb(null, null); // SUBACK with a failure code for this filter
        }
        let subs = this.subscriptions.get(client);
        if (!subs) this.subscriptions.set(client, (subs = { filters: new Set(), warned: false }));
        if (!subs.filters.has(sub.topic) && subs.filters.size >= this.maxSubscriptions) {
          if (!subs.warned) this.log.warn({ terminal: client.id, topic: sub.topic, maxSubscriptions: this.maxSubscriptions, errorCode: 'TOO_MANY_SUBSCRIPTIONS' }, 'terminal subscription over mqtt.maxSubscriptions refused');
          subs.warned = true;
          return cb(null, null);
        }
        subs.filters.add(sub.topic);
        cb(null, sub);
      },
    });
    broker.on('clientError', (client, err) => this.log.debug({ terminal: client.id, err: err.message }, 'client error'));
    broker.on('unsubscribe', (filters, client) => {
      const subs = client && this.subscriptions.get(client);
      if (subs) for (const f of filters) subs.filters.delete(f);
    });
    // terminals' SUBSCRIBEs skip the scan of every retained status (mqtt/retained-index.ts)
    this.retained = indexRetained((broker as unknown as { persistence: RetainedPersistence }).persistence);
    this.broker = broker;
    const onConnection = (socket: net.Socket) => {
      // Nagle off: a message to a terminal never waits for its acknowledgement of the one before (packages/common/src/mqtt-socket.ts)
      socket.setNoDelay(true);
      const client = broker.handle(socket as never) as Client;
      this.limitPacketSize(client, socket);
    };
    const server = net.createServer(onConnection);
    const listen = (port: number) =>
      new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen({ port, host: this.opts.host, backlog: LISTEN_BACKLOG }, () => {
          server.off('error', reject);
          resolve();
        });
      });
    try {
      await listen(this.opts.port);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EADDRINUSE' || !this.opts.fallbackToFreePort) {
        await new Promise<void>((r) => broker.close(() => r()));
        throw new Error(`embedded MQTT broker cannot listen on ${this.opts.host}:${this.opts.port}: ${(e as Error).message} (set mqtt.port / LOCKER_MQTT_PORT, or mqtt.mode external)`);
      }
      this.log.warn({ port: this.opts.port }, 'MQTT port in use; the embedded broker takes a free port instead');
      await listen(0);
    }
    this.server = server;
    const want = this.opts.acceptors ?? ACCEPTORS;
    this.acceptors = await duplicateListener(server, { count: want, backlog: LISTEN_BACKLOG, onConnection });
    if (this.acceptors.length + 1 < want) this.log.warn({ acceptors: this.acceptors.length + 1, wanted: want }, 'the broker socket has fewer descriptors than mqtt.acceptors; connections are accepted more slowly in a reconnect storm');
    const a = server.address() as net.AddressInfo;
    this.addr = `mqtt://${a.address === '0.0.0.0' || a.address === '::' ? '127.0.0.1' : a.address}:${a.port}`;
    this.log.info({ listen: this.addr, acceptors: this.acceptors.length + 1 }, 'embedded MQTT broker listening');
  }

  /** login bookkeeping: checks in progress, cached logins, failure entries, scrypt checks run */
  loginStats(): ReturnType<TerminalLogins['stats']> {
    return this.logins.stats();
  }

  address(): string | null {
    return this.addr;
  }

  connected(): boolean {
    return this.server?.listening ?? false;
  }

  async publish(topic: string, payload: Buffer | string, opts: { qos?: 0 | 1; retain?: boolean } = {}): Promise<void> {
    const broker = this.broker;
    if (!broker) throw new Error('broker not started');
    await new Promise<void>((resolve, reject) =>
      broker.publish({ cmd: 'publish', topic, payload: Buffer.isBuffer(payload) ? payload : Buffer.from(payload), qos: opts.qos ?? 1, retain: opts.retain ?? false, dup: false }, (err) => (err ? reject(err) : resolve())),
    );
  }

  async subscribe(filter: string, handler: Handler, opts: SubscribeOptions = {}): Promise<void> {
    const broker = this.broker;
    if (!broker) throw new Error('broker not started');
    if (opts.beforeAck) {
      this.beforeAck.push({ filter, handler });
      return;
    }
    await new Promise<void>((resolve) =>
      broker.subscribe(
        filter,
        (packet: AedesPublishPacket, cb: () => void) => {
          try {
            const r = handler(packet.topic, Buffer.isBuffer(packet.payload) ? packet.payload : Buffer.from(packet.payload));
            if (r instanceof Promise) r.catch((err) => this.log.error({ err, topic: packet.topic }, 'message handler failed'));
          } catch (err) {
            this.log.error({ err, topic: packet.topic }, 'message handler failed');
          }
          cb();
        },
        resolve,
      ),
    );
  }

  async stop(): Promise<void> {
    const { server, broker, acceptors } = this;
    this.server = null;
    this.broker = null;
    this.acceptors = [];
    // the socket stays open (and accepting) while any of its descriptors is
    for (const s of acceptors) s.close();
    this.logins.close();
    if (broker) await new Promise<void>((r) => broker.close(() => r()));
    if (server) await new Promise<void>((r) => server.close(() => r()));
  }
}
