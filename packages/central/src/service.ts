// The central service: opens the store, migrates, builds the app and its workers. Constructor
// only assigns; start() does the work; stop() shuts down in reverse order.
import crypto from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { sql } from 'kysely';
import type { Config } from './config';
import { openDatabase, type Db } from './db/database';
import { createLogger, type Logger } from './logger';
import { systemClock, type Clock } from './clock';
import { TokenService } from './auth/tokens';
import { terminalDigestKey } from './auth/terminal-secret-digest';
import { DisconnectedTerminalGateway, type TerminalGateway } from './terminals/gateway';
import type { AppContext } from './context';
import { workerFactoryList } from './workers';
import { EmbeddedBroker } from './mqtt/embedded';
import { ExternalBroker } from './mqtt/external';
import type { MessageBus } from './mqtt/bus';
import { buildApp } from './app';
import { MqttTerminalGateway } from './edge/index';

export interface CentralServiceOptions {
  config: Config;
  log?: Logger;
  clock?: Clock;
  terminals?: TerminalGateway;
  /** PostgreSQL schema (tests isolate themselves in one) */
  pgSchema?: string;
  /** start the background workers (default true) */
  startWorkers?: boolean;
  /** embedded broker: take a free port when the configured one is in use (the demo does) */
  mqttPortFallback?: boolean;
}

export { registerWorkerFactory } from './workers';

async function signingKey(db: Db, configured: string | undefined): Promise<Buffer> {
  if (configured) return Buffer.from(configured, 'utf8');
  const k = db.kysely;
  const row = await k.selectFrom('settings').select('value').where('key', '=', 'token_signing_key').executeTakeFirst();
  if (row) return Buffer.from(row.value, 'base64');
  const fresh = crypto.randomBytes(32).toString('base64');
  await k.insertInto('settings').values({ key: 'token_signing_key', value: fresh }).onConflict((oc) => oc.column('key').doNothing()).execute();
  const stored = await k.selectFrom('settings').select('value').where('key', '=', 'token_signing_key').executeTakeFirstOrThrow();
  return Buffer.from(stored.value, 'base64');
}

export class CentralService {
  ctx!: AppContext;
  app!: FastifyInstance;
  private started = false;

  constructor(private readonly opts: CentralServiceOptions) {}

  async start(): Promise<AppContext> {
    const { config } = this.opts;
    const log = this.opts.log ?? createLogger({ level: config.log.level, pretty: config.log.pretty });
    const clock = this.opts.clock ?? systemClock;
    const db = await openDatabase({
      url: config.database.url,
      sqliteSynchronous: config.database.sqliteSynchronous,
      sqliteCheckpoints: config.database.sqliteCheckpoints,
      sqliteReadThreads: config.database.sqliteReadThreads,
      onReadThreadLost: (err) => log.error({ ns: 'central.db', err: err.message, errorCode: 'SQLITE_READ_THREAD_LOST' }, 'a SQLite read thread died: its reads run on the main connection until it is started again'),
      onCheckpointerFailure: (err) => log.error({ ns: 'central.db', err: err.message, errorCode: 'SQLITE_CHECKPOINTER_FAILED' }, 'the WAL checkpoint thread failed: checkpoints run in the commits again'),
      poolSize: config.database.poolSize,
      pgPreparedStatements: config.database.pgPreparedStatements,
      pgReadPipelines: config.database.pgReadPipelines,
      pgSchema: this.opts.pgSchema,
    });
    const applied = await db.migrate();
    if (applied.length) log.info({ ns: 'central.db', applied }, 'migrations applied');
    const tokens = new TokenService(await signingKey(db, config.auth.tokenSigningKey), config.auth.tokenLifetimeSeconds, clock);
    let bus: MessageBus | null = null;
    if (config.mqtt.mode === 'embedded') bus = new EmbeddedBroker({ host: config.mqtt.host, port: config.mqtt.port, db: db.kysely, committedGet: db.committedGet, log, fallbackToFreePort: this.opts.mqttPortFallback, maxMessageBytes: config.mqtt.maxMessageBytes, maxSubscriptions: config.mqtt.maxSubscriptions, acceptors: config.mqtt.acceptors, maxPendingLogins: config.mqtt.maxPendingLogins, loginCacheMs: config.mqtt.loginCacheSeconds * 1000, terminalDigestKey: terminalDigestKey({ pepper: config.mqtt.terminalSecretPepper, tokenSigningKey: config.auth.tokenSigningKey }) });
    else if (config.mqtt.mode === 'external') bus = new ExternalBroker({ url: config.mqtt.url, username: config.mqtt.username, password: config.mqtt.password, clientId: config.mqtt.clientId, sharedGroup: config.mqtt.sharedGroup, log });
    this.ctx = { config, db, log, clock, tokens, terminals: this.opts.terminals ?? (bus ? new MqttTerminalGateway({ bus, db: db.kysely, log, timeoutMs: config.edge.commandTimeoutMs }) : new DisconnectedTerminalGateway()), bus, workers: [] };
    // The bus starts first and stops last: workers (edge sync) publish through it.
    if (bus) this.ctx.workers.push({ name: `mqtt-${bus.kind}`, start: () => bus.start(), stop: () => bus.stop() });
    for (const f of workerFactoryList()) {
      const w = f(this.ctx);
      if (w) this.ctx.workers.push(w);
    }
    this.app = await buildApp(this.ctx);
    if (this.opts.startWorkers !== false) for (const w of this.ctx.workers) await w.start();
    this.started = true;
    return this.ctx;
  }

  /**
   * Healthy enough to ping the systemd watchdog: started and the database answers a trivial
   * query within `timeoutMs`.
   */
  async healthy(timeoutMs = 5000): Promise<boolean> {
    if (!this.started) return false;
    let timer: NodeJS.Timeout | undefined;
    try {
      const probe = sql`select 1 as ok`.execute(this.ctx.db.kysely).then(() => true);
      const timeout = new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), timeoutMs);
      });
      return await Promise.race([probe, timeout]);
    } catch (err) {
      this.ctx.log.warn({ ns: 'central.service', err: (err as Error).message }, 'health check failed');
      return false;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Listens on the configured host and port; returns the address. */
  async listen(): Promise<string> {
    return this.app.listen({ host: this.ctx.config.http.host, port: this.ctx.config.http.port });
  }

  async stop(): Promise<void> {
    if (!this.started) return;
    this.started = false;
    for (const w of [...this.ctx.workers].reverse()) {
      try {
        await w.stop();
      } catch (err) {
        this.ctx.log.error({ ns: 'central.service', err, worker: w.name }, 'worker failed to stop');
      }
    }
    await this.app.close();
    await this.ctx.db.close();
  }
}
