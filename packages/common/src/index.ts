// @locker/common: small pieces shared by the central service and the terminal agent.
export { systemdNotifier, type Notifier } from './systemd';
export * from './edge-protocol';
