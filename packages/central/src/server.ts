// The only place that listens: starts the central service and shuts it down on SIGTERM/SIGINT.
import type { Config } from './config';
import { CentralService } from './service';
import { createLogger } from './logger';
import { systemdNotifier } from '@locker/common';

export async function runServer(config: Config, hooks: { afterStart?: (svc: CentralService, address: string) => Promise<void> | void; mqttPortFallback?: boolean } = {}) {
  const log = createLogger({ level: config.log.level, pretty: config.log.pretty });
  const svc = new CentralService({ config, log, mqttPortFallback: hooks.mqttPortFallback });
  await svc.start();
  const address = await svc.listen();
  log.info({ ns: 'central.server', listen: address, environment: config.environment, database: svc.ctx.db.engine }, 'central service listening');
  await hooks.afterStart?.(svc, address);
  const notifier = systemdNotifier();
  notifier.ready(`listening on ${address}`);
  notifier.startWatchdog();
  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ ns: 'central.server', signal }, 'shutting down');
    notifier.stopping();
    notifier.stop();
    const t = setTimeout(() => process.exit(1), 15_000);
    t.unref();
    try {
      await svc.stop();
    } finally {
      process.exit(0);
    }
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));
  return svc;
}
