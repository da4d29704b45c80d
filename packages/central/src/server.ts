// The only place that listens: starts the central service and shuts it down on SIGTERM/SIGINT.
// The signal handlers are installed before anything starts, so a SIGTERM during migrations is a
// graceful stop too. Exit code 0 only when the stop succeeded. systemd Type=notify: READY=1 once
// listening, WATCHDOG=1 only while the service is healthy (the database answers), STOPPING=1.
import type { Config } from './config';
import { CentralService } from './service';
import { createLogger } from './logger';
import { systemdNotifier } from '@locker/common';

export async function runServer(config: Config, hooks: { afterStart?: (svc: CentralService, address: string) => Promise<void> | void; mqttPortFallback?: boolean } = {}) {
  const log = createLogger({ level: config.log.level, pretty: config.log.pretty });
  const svc = new CentralService({ config, log, mqttPortFallback: hooks.mqttPortFallback });
  const notifier = systemdNotifier();
  let stopping = false;
  let starting: Promise<unknown> = Promise.resolve();
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ ns: 'central.server', signal }, 'shutting down');
    notifier.stopping();
    notifier.stop();
    const t = setTimeout(() => process.exit(1), 15_000);
    t.unref();
    let code = 0;
    try {
      await starting.catch(() => undefined); // a start under way (migrations) finishes first
      await svc.stop();
    } catch (err) {
      code = 1;
      log.error({ ns: 'central.server', err: (err as Error).message }, 'stop failed');
    }
    process.exit(code);
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));
  const run = async (): Promise<string | null> => {
    await svc.start();
    if (stopping) return null;
    const address = await svc.listen();
    log.info({ ns: 'central.server', listen: address, environment: config.environment, database: svc.ctx.db.engine }, 'central service listening');
    await hooks.afterStart?.(svc, address);
    return address;
  };
  const started = run();
  starting = started;
  const address = await started;
  if (address === null || stopping) return svc;
  notifier.ready(`listening on ${address}`);
  notifier.startWatchdog(() => svc.healthy());
  return svc;
}
