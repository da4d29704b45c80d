// The agent's pino logger: one namespace per module (`log.child({ ns: 'agent.link' })`), and the
// terminal's secrets and any personal data redacted wherever they appear in logged objects, with
// the redactor the central service uses (packages/common/src/redact.ts). Code values (PINs, QR
// contents) are never logged on purpose; on the terminal `code`, `value` and `codeValue` are
// redacted at every depth as well, should one slip into a logged object.
import pino, { type DestinationStream, type Logger } from 'pino';
import { createRedactor, PERSONAL_KEYS, pinoRedaction, SECRET_KEYS } from '@locker/common';

export const AGENT_REDACTED_KEYS = [...SECRET_KEYS, ...PERSONAL_KEYS, 'code', 'codeValue', 'value', 'name_of_recipient'];

export interface AgentLoggerOptions {
  level?: string;
  terminalId?: string;
  destination?: DestinationStream;
}

/**
 * The last lines the logger wrote (as written: redacted already), for the technician's log view
 * (GET /api/logs). Bounded by count and by line length; parsed only when read.
 */
export class LogRing {
  private lines: string[] = [];
  constructor(
    readonly size = 1000,
    private readonly maxLineChars = 4000,
  ) {}

  push(line: string): void {
    this.lines.push(line.length > this.maxLineChars ? line.slice(0, this.maxLineChars) : line);
    if (this.lines.length > this.size) this.lines.splice(0, this.lines.length - this.size);
  }

  /** The last `limit` lines, oldest first, parsed (a truncated line as { msg }), redacted once more on the way out. */
  recent(limit: number): Record<string, unknown>[] {
    const redact = createRedactor(AGENT_REDACTED_KEYS, []);
    return this.lines.slice(-Math.max(0, limit)).map((l) => {
      try {
        return redact(JSON.parse(l) as Record<string, unknown>);
      } catch {
        return { msg: '[line too long: truncated]' };
      }
    });
  }
}

const rings = new WeakMap<Logger, LogRing>();

/** The ring a logger made by createAgentLogger writes into (null for any other logger). */
export function logRingOf(log: Logger): LogRing | null {
  return rings.get(log) ?? null;
}

export function createAgentLogger(opts: AgentLoggerOptions = {}): Logger {
  const options: pino.LoggerOptions = {
    level: opts.level ?? 'info',
    base: { service: 'locker-agent', ...(opts.terminalId ? { terminal: opts.terminalId } : {}) },
    ...pinoRedaction(AGENT_REDACTED_KEYS, []),
  };
  const ring = new LogRing();
  const out = opts.destination ?? pino.destination({ dest: 1, sync: true });
  // every line goes to the destination and into the ring
  const tee: DestinationStream = {
    write(line: string) {
      ring.push(line.endsWith('\n') ? line.slice(0, -1) : line);
      return out.write(line);
    },
  };
  const log = pino(options, tee);
  rings.set(log, ring);
  return log;
}
