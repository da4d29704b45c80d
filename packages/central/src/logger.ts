// pino, one namespace per module (`log.child({ ns: 'central.http' })`). Secrets and personal data
// are redacted by key wherever they appear in logged objects (packages/common/src/redact.ts);
// request/response bodies are never logged. URLs (a `url` key, a request's url) are logged through
// redactUrl: e-mail-like and code-like path segments and every query value are replaced.
import pino, { type Logger } from 'pino';
import { pinoRedaction, redactUrl } from '@locker/common';

export type { Logger };

export interface LoggerOptions {
  level?: string;
  pretty?: boolean;
  destination?: pino.DestinationStream;
}

export function createLogger(opts: LoggerOptions = {}): Logger {
  const options: pino.LoggerOptions = {
    level: opts.level ?? 'info',
    base: { service: 'locker-central' },
    // secrets and personal data at any depth (packages/common/src/redact.ts)
    ...pinoRedaction(),
    serializers: {
      url: redactUrl,
      // a request object (fastify's or node's), should one be logged: method, redacted url, id only
      req: (req: { method?: string; url?: string; id?: string }) => (req && typeof req === 'object' ? { method: req.method, url: redactUrl(req.url), id: req.id } : req),
    },
  };
  if (opts.destination) return pino(options, opts.destination);
  if (opts.pretty) return pino({ ...options, transport: { target: 'pino-pretty', options: { colorize: true } } });
  return pino(options);
}
