// The agent's claims on its lock-bus ports (@locker/lockbus port-claim.ts, docs/lockbus.md "Which to
// use when"): a file per bus port in `<the store's directory>/ports/` while the agent runs, so the
// wiring-check CLI (`locker-lockbus scan`) refuses a port the agent polls instead of reporting the
// ghost boards that two masters on one bus produce. Serial ports are also locked by the OS (flock);
// an RS485-over-TCP gateway has only this. A claim that cannot be written is logged, not fatal.
import path from 'node:path';
import type { Logger } from 'pino';
import { claimPorts } from '@locker/lockbus';
import type { AgentConfig } from './config';

/** The agent's state directory: where its store is (the CLI's --agent-state). */
export function agentStateDir(cfg: AgentConfig): string | null {
  return cfg.store.path === ':memory:' ? null : path.dirname(path.resolve(cfg.store.path));
}

/** Claims every bus port; returns what releases them (at stop). */
export function claimBusPorts(cfg: AgentConfig, log: Logger): () => void {
  const dir = agentStateDir(cfg);
  if (!dir || cfg.buses.length === 0) return () => undefined;
  const d = cfg.diagnostics;
  const diagnosticsUrl = d.enabled && d.port ? `http://${d.host.includes(':') ? `[${d.host}]` : d.host}:${d.port}/` : undefined;
  try {
    const release = claimPorts(dir, cfg.buses.map((b) => ({ bus: b.name, port: b.port })), diagnosticsUrl ? { diagnosticsUrl } : {});
    log.debug({ dir: path.join(dir, 'ports'), buses: cfg.buses.map((b) => b.name) }, 'bus ports claimed');
    return () => {
      try {
        release();
      } catch (err) {
        log.warn({ err: (err as Error).message }, 'bus port claims not removed');
      }
    };
  } catch (err) {
    log.warn({ err: (err as Error).message, dir }, 'bus port claims not written: the wiring-check CLI cannot see that this agent holds its ports');
    return () => undefined;
  }
}
