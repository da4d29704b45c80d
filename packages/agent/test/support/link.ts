// The agent's own broker link (EdgeLink) on a store of its own in a temp folder, with no agent
// around it: for tests of the link against a real broker. The broker is not asked to check the
// secret; the status is a fixed online one.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { EdgeLink } from '../../src/edge-link';
import { AgentStore } from '../../src/store';

export function bareLink(url: string, terminalId: string, opts: { publishTimeoutMs?: number } = {}): { link: EdgeLink; store: AgentStore; dispose(): Promise<void> } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'agent-link-'));
  const store = new AgentStore(path.join(dir, 'agent.db'));
  store.open();
  const at = new Date().toISOString();
  const link = new EdgeLink({
    url,
    terminalId,
    secret: 'not-checked-by-this-broker',
    keepaliveSeconds: 30,
    reconnectMs: 1000,
    connectTimeoutMs: 5000,
    publishTimeoutMs: opts.publishTimeoutMs ?? 10_000,
    store,
    log: pino({ level: 'silent' }),
    status: () => ({ v: 1, state: 'online', terminalId, agentVersion: 'test', startedAt: at, at, codes: { epoch: null, version: 0, count: 0 }, journal: { unsent: 0, lastSeq: 0 }, buses: [] }),
  });
  return {
    link,
    store,
    async dispose() {
      await link.stop();
      store.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
