// Configuration as deployed: the systemd unit puts the store where the unit lets the agent write,
// and scanners[].suffix reaches the scanner reader.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { Agent } from '../src/agent';
import { AgentConfigSchema, loadAgentConfig } from '../src/config';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** `Key=value` lines of a unit file's [Service] section (repeated keys kept in order). */
function unitService(file: string): [string, string][] {
  const out: [string, string][] = [];
  let inService = false;
  for (const raw of fs.readFileSync(file, 'utf8').split('\n')) {
    const line = raw.trim();
    if (line.startsWith('[')) inService = line === '[Service]';
    else if (inService && line && !line.startsWith('#')) {
      const i = line.indexOf('=');
      out.push([line.slice(0, i), line.slice(i + 1)]);
    }
  }
  return out;
}

describe('agent configuration as deployed', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
  });

  it('under systemd/locker-agent.service the store path is inside ReadWritePaths, not under the read-only WorkingDirectory', () => {
    const svc = unitService(path.join(ROOT, 'systemd/locker-agent.service'));
    const env: NodeJS.ProcessEnv = {};
    for (const [k, v] of svc) if (k === 'Environment') env[v.slice(0, v.indexOf('='))] = v.slice(v.indexOf('=') + 1);
    delete env.LOCKER_AGENT_CONFIG; // /etc/locker/agent.yaml is not here; the environment decides anyway
    const writable = svc.filter(([k]) => k === 'ReadWritePaths').flatMap(([, v]) => v.split(/\s+/));
    const cwd = svc.find(([k]) => k === 'WorkingDirectory')![1];
    expect(svc.find(([k]) => k === 'ProtectSystem')?.[1]).toBe('strict');
    const cfg = loadAgentConfig({ env: { ...env, LOCKER_AGENT_TERMINAL_ID: 't1', LOCKER_AGENT_TERMINAL_SECRET: 's1' } });
    const store = path.resolve(cwd, cfg.store.path); // relative paths resolve under WorkingDirectory
    expect(writable.some((w) => store.startsWith(`${w}/`))).toBe(true);
    expect(store.startsWith(`${cwd}/`)).toBe(false);
  });

  it('scanners[].suffix reaches the reader: with "\\r" a slow first read is not cut in two', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'agent-cfg-'));
    dirs.push(dir);
    const make = (suffix: '\r' | '') =>
      AgentConfigSchema.parse({
        terminal: { id: 'term-cfg', secret: 'secret-cfg' },
        mqtt: { url: 'mqtt://127.0.0.1:1', reconnectMs: 60_000 },
        scanners: [{ name: 'scan0', port: 'tcp://127.0.0.1:1', suffix }],
        store: { path: path.join(dir, `agent-${suffix ? 'cr' : 'none'}.db`) },
        diagnostics: { enabled: false },
      });
    const refusals = async (suffix: '\r' | '') => {
      const agent = new Agent({ config: make(suffix), log: pino({ level: 'silent' }) });
      await agent.start();
      try {
        const reader = agent.scanners[0]!;
        reader.feed(Buffer.from('QR-SL')); // the scanner pauses mid-code (longer than the 60 ms inter-byte timeout)
        await sleep(200);
        reader.feed(Buffer.from('OW-1\r'));
        await sleep(300);
        return agent.store.recent(50).filter((r) => r.type === 'credentialRefused').length;
      } finally {
        await agent.stop();
      }
    };
    expect(await refusals('\r')).toBe(1); // one read: QR-SLOW-1
    expect(await refusals('')).toBe(2); // no suffix configured: the silence ended the first half
  });
});
