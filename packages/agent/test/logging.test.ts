// The agent's logs carry no secrets and no personal data: pino redaction by path (logger.ts), and
// a real agent handling a code logs neither the code value nor the terminal secret.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { createAgentLogger } from '../src/logger';
import { Agent } from '../src/agent';
import { AgentConfigSchema } from '../src/config';

function capture() {
  const out: string[] = [];
  const destination = new Writable({
    write(chunk, _enc, cb) {
      out.push(String(chunk));
      cb();
    },
  });
  return { out, destination, text: () => out.join('') };
}

describe('agent log redaction', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
  });

  it('hides secrets, code values and personal data wherever they appear in a logged object', () => {
    const c = capture();
    const log = createAgentLogger({ level: 'debug', terminalId: 'term-a1', destination: c.destination }).child({ ns: 'agent.test' });
    log.info({ secret: 'terminal-secret-XYZ', password: 'tech-pass-XYZ', pin: '918273', qr: 'QR-VALUE-XYZ', code: 'CODE-XYZ', token: 'tok-XYZ' }, 'top level');
    log.info({ terminal: { id: 'term-a1', secret: 'nested-secret-XYZ' }, diagnostics: { technicianPassword: 'nested-tech-XYZ' }, credential: { value: 'scanned-XYZ', pin: '192837' } }, 'one level down');
    log.info({ config: { terminal: { secret: 'deep-secret-XYZ' }, recipient: { email: 'ann@example.com', phoneNumber: '+43 660 1234567', firstName: 'Ann', lastName: 'Doe' } } }, 'two levels down');
    log.child({ ns: 'agent.link' }).warn({ email: 'bob@example.com', userName: 'bob' }, 'child logger');
    const text = c.text();
    for (const v of ['terminal-secret-XYZ', 'tech-pass-XYZ', '918273', 'QR-VALUE-XYZ', 'CODE-XYZ', 'tok-XYZ', 'nested-secret-XYZ', 'nested-tech-XYZ', 'scanned-XYZ', '192837', 'deep-secret-XYZ', 'ann@example.com', '1234567', '"Ann"', '"Doe"', 'bob@example.com', '"bob"']) {
      expect(text, v).not.toContain(v);
    }
    expect(c.out).toHaveLength(4);
    expect(text).toContain('[redacted]');
    expect(JSON.parse(c.out[3]!)).toMatchObject({ ns: 'agent.link', service: 'locker-agent', terminal: 'term-a1', msg: 'child logger' });
  });

  it('a running agent refusing and accepting codes logs neither the code value nor the terminal secret', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'agent-log-'));
    dirs.push(dir);
    const config = AgentConfigSchema.parse({
      terminal: { id: 'term-log', secret: 'terminal-secret-LOG-1' },
      mqtt: { url: 'mqtt://127.0.0.1:1', reconnectMs: 60_000, connectTimeoutMs: 500 },
      store: { path: path.join(dir, 'agent.db') },
      diagnostics: { enabled: false, technicianPassword: 'tech-password-LOG' },
      log: { level: 'debug' },
    });
    const c = capture();
    const agent = new Agent({ config, log: createAgentLogger({ level: 'debug', terminalId: 'term-log', destination: c.destination }) });
    await agent.start();
    try {
      for (let i = 0; i < 3; i++) expect(await agent.presentCredential({ source: 'keypad', value: '55501234', reader: 'kp0' })).toMatchObject({ accepted: false, reason: 'UNKNOWN_CODE' });
      expect(await agent.presentCredential({ source: 'qr', value: 'QR-SECRET-CONTENT', reader: 'scan0' })).toMatchObject({ accepted: false });
    } finally {
      await agent.stop();
    }
    const text = c.text();
    expect(text).toContain('code refused: unknown');
    for (const v of ['55501234', 'QR-SECRET-CONTENT', 'terminal-secret-LOG-1', 'tech-password-LOG']) expect(text, v).not.toContain(v);
  });
});
