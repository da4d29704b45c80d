// @locker/common: small pieces shared by the central service and the terminal agent.
export { systemdNotifier, type Notifier } from './systemd';
export * from './edge-protocol';
export { createRedactor, pinoRedaction, redactUrl, isSensitiveSegment, registerRouteWords, SECRET_KEYS, PERSONAL_KEYS, TOP_LEVEL_ONLY_KEYS, CENSOR, type Redactor } from './redact';
export * from './cli';
export { MetricsListener, type MetricsListenerOptions } from './metrics-listener';
export { mqttNoDelay, type MqttClientLike } from './mqtt-socket';
export { isHighEntropySecret, generateTerminalSecret, MIN_BASE64_CHARS, MIN_HEX_CHARS } from './terminal-secret';
