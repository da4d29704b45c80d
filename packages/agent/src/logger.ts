// The agent's pino logger: one namespace per module (`log.child({ ns: 'agent.link' })`), and the
// terminal's secrets and any personal data redacted wherever they appear in logged objects, with
// the redactor the central service uses (packages/common/src/redact.ts). Code values (PINs, QR
// contents) are never logged on purpose; on the terminal `code`, `value` and `codeValue` are
// redacted at every depth as well, should one slip into a logged object.
import pino, { type DestinationStream, type Logger } from 'pino';
import { PERSONAL_KEYS, pinoRedaction, SECRET_KEYS } from '@locker/common';

export const AGENT_REDACTED_KEYS = [...SECRET_KEYS, ...PERSONAL_KEYS, 'code', 'codeValue', 'value', 'name_of_recipient'];

export interface AgentLoggerOptions {
  level?: string;
  terminalId?: string;
  destination?: DestinationStream;
}

export function createAgentLogger(opts: AgentLoggerOptions = {}): Logger {
  const options: pino.LoggerOptions = {
    level: opts.level ?? 'info',
    base: { service: 'locker-agent', ...(opts.terminalId ? { terminal: opts.terminalId } : {}) },
    ...pinoRedaction(AGENT_REDACTED_KEYS, []),
  };
  return opts.destination ? pino(options, opts.destination) : pino(options);
}
