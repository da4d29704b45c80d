// The agent's pino logger: one namespace per module (`log.child({ ns: 'agent.link' })`), and the
// terminal's secrets and any personal data redacted by path wherever they appear in logged
// objects (top level and two levels down). Code values (PINs, QR contents) are never logged on
// purpose; the paths below catch them should one slip into a logged object.
import pino, { type DestinationStream, type Logger } from 'pino';

const SECRET_KEYS = [
  'password', 'secret', 'technicianPassword', 'terminalSecret', 'token', 'access_token', 'authorization', 'cookie',
  'pin', 'pinCode', 'qr', 'code', 'codeValue', 'value',
];
const PERSONAL_KEYS = ['emailAddress', 'email', 'phoneNumber', 'phone', 'firstName', 'lastName', 'userName', 'name_of_recipient'];

export const AGENT_REDACT_PATHS = [...SECRET_KEYS, ...PERSONAL_KEYS].flatMap((k) => [k, `*.${k}`, `*.*.${k}`]);

export interface AgentLoggerOptions {
  level?: string;
  terminalId?: string;
  destination?: DestinationStream;
}

export function createAgentLogger(opts: AgentLoggerOptions = {}): Logger {
  const options: pino.LoggerOptions = {
    level: opts.level ?? 'info',
    base: { service: 'locker-agent', ...(opts.terminalId ? { terminal: opts.terminalId } : {}) },
    redact: { paths: AGENT_REDACT_PATHS, censor: '[redacted]' },
  };
  return opts.destination ? pino(options, opts.destination) : pino(options);
}
