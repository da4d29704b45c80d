// systemd Type=notify support without a native addon: the sd_notify datagram is sent by the
// `systemd-notify` tool (the unit sets NotifyAccess=all so systemd accepts it from a child).
// READY=1 once listening, WATCHDOG=1 at half the WatchdogSec interval, STOPPING=1 on shutdown.
import { execFile } from 'node:child_process';

export interface Notifier {
  ready(status?: string): void;
  stopping(): void;
  /**
   * starts watchdog pings when systemd asked for them; `healthy` gates each ping (a promise is
   * awaited: a check that rejects, answers false or is still running at the next tick sends none)
   */
  startWatchdog(healthy?: () => boolean | Promise<boolean>): void;
  stop(): void;
}


export function systemdNotifier(env: NodeJS.ProcessEnv = process.env): Notifier {
  const active = !!env.NOTIFY_SOCKET;
  // the socket of the environment this notifier was made for (not necessarily process.env)
  const send = (args: string[]): void => {
    execFile('systemd-notify', args, { env: { ...process.env, NOTIFY_SOCKET: env.NOTIFY_SOCKET } }, () => {
      /* best effort: no systemd, no harm */
    });
  };
  let timer: NodeJS.Timeout | null = null;
  return {
    ready(status) {
      if (active) send(['--ready', ...(status ? [`--status=${status}`] : [])]);
    },
    stopping() {
      if (active) send(['STOPPING=1']);
    },
    startWatchdog(healthy = () => true) {
      const usec = Number(env.WATCHDOG_USEC ?? 0);
      if (!active || !usec) return;
      let checking = false;
      timer = setInterval(() => {
        if (checking) return; // the last check hangs: no ping, systemd restarts the service
        checking = true;
        Promise.resolve()
          .then(healthy)
          .then(
            (ok) => {
              if (ok && timer) send(['WATCHDOG=1']);
            },
            () => undefined,
          )
          .finally(() => {
            checking = false;
          });
      }, Math.max(500, usec / 2000));
      timer.unref();
    },
    stop() {
      if (timer) clearInterval(timer);
      timer = null;
    },
  };
}
