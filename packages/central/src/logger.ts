// pino, one namespace per module (`log.child({ ns: 'central.http' })`). Secrets and personal data
// are redacted by path wherever they appear in logged objects; request/response bodies are never
// logged.
import pino, { type Logger } from 'pino';

export type { Logger };

export const REDACT_PATHS = [
  'password', 'secret', 'clientSecret', 'client_secret', 'token', 'access_token', 'authKey', 'authorization',
  'emailAddress', 'email', 'phoneNumber', 'phone', 'firstName', 'lastName', 'userName', 'pinCode', 'code',
  '*.password', '*.secret', '*.clientSecret', '*.client_secret', '*.token', '*.access_token', '*.authKey',
  '*.emailAddress', '*.email', '*.phoneNumber', '*.phone', '*.firstName', '*.lastName', '*.userName', '*.pinCode',
  'req.headers.authorization', 'req.headers["x-api-key"]', 'req.headers.cookie',
];

export interface LoggerOptions {
  level?: string;
  pretty?: boolean;
  destination?: pino.DestinationStream;
}

export function createLogger(opts: LoggerOptions = {}): Logger {
  const options: pino.LoggerOptions = {
    level: opts.level ?? 'info',
    base: { service: 'locker-central' },
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
  };
  if (opts.destination) return pino(options, opts.destination);
  if (opts.pretty) return pino({ ...options, transport: { target: 'pino-pretty', options: { colorize: true } } });
  return pino(options);
}
