export { buildApp, centralPlugin } from './app';
export { CentralService, registerWorkerFactory } from './service';
export { loadConfig, ConfigSchema, type Config } from './config';
export { openDatabase, type Db } from './db/database';
export { applyProvisioning } from './provisioning/apply';
export type { AppContext, TenantPrincipal, Worker } from './context';
export type { TerminalGateway, UnlockCommand, UnlockResult } from './terminals/gateway';
