// Everything a route or service needs, created once by the service and passed down.
import type { Config } from './config';
import type { Db } from './db/database';
import type { Logger } from './logger';
import type { Clock } from './clock';
import type { TokenService } from './auth/tokens';
import type { TerminalGateway } from './terminals/gateway';
import type { MessageBus } from './mqtt/bus';

/** A long-running part of the service (outbox delivery, expiry sweep, MQTT sync). */
export interface Worker {
  name: string;
  start(): Promise<void>;
  stop(): Promise<void>;
}

export interface AppContext {
  config: Config;
  db: Db;
  log: Logger;
  clock: Clock;
  tokens: TokenService;
  terminals: TerminalGateway;
  /** The MQTT bus to terminals (embedded broker or external broker client); null when mqtt.mode is off. */
  bus: MessageBus | null;
  /** Background workers the service starts after the app is ready and stops on shutdown. */
  workers: Worker[];
}

/** The authenticated caller of a /v1/ route. */
export interface TenantPrincipal {
  uid: string;
  clientId: string;
  name: string;
  mainAccountUid: string;
  /** uids of the pick up points the tenant manages */
  pupUids: Set<string>;
}

declare module 'fastify' {
  interface FastifyRequest {
    tenant: TenantPrincipal;
  }
}
