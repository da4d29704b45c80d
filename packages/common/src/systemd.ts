// systemd Type=notify support without a native addon: the sd_notify datagram is sent by the
// `systemd-notify` tool (the unit sets NotifyAccess=all so systemd accepts it from a child).
// READY=1 once listening, WATCHDOG=1 at half the WatchdogSec interval, STOPPING=1 on shutdown.
import { execFile } from 'node:child_process';

export interface Notifier {
  ready(status?: string): void;
  stopping(): void;
  /** starts watchdog pings when systemd asked for them; `healthy` gates each ping */
  startWatchdog(healthy?: () => boolean): void;
  stop(): void;
}

function send(args: string[]): void {
  execFile('systemd-notify', args, () => {
    /* best effort: no systemd, no harm */
  });
}

export function systemdNotifier(env: NodeJS.ProcessEnv = process.env): Notifier {
  const active = !!env.NOTIFY_SOCKET;
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
      timer = setInterval(() => {
        if (healthy()) send(['WATCHDOG=1']);
      }, Math.max(500, usec / 2000));
      timer.unref();
    },
    stop() {
      if (timer) clearInterval(timer);
      timer = null;
    },
  };
}
