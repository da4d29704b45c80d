// locker-agent: the terminal agent's command line.
//   locker-agent run --config FILE     run the agent (systemd Type=notify: READY, WATCHDOG, STOPPING)
//   locker-agent check-config --config FILE
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseCliArgs, systemdNotifier } from '@locker/common';
import { AgentConfigError, loadAgentConfig, type AgentConfig } from './config';
import { Agent, type AgentState } from './agent';
import { createAgentLogger } from './logger';

const HELP = `locker-agent: the parcel-locker terminal agent

Usage:
  locker-agent run [--config FILE]           run the agent
  locker-agent check-config [--config FILE]  validate the configuration and print it (secrets hidden)

--config FILE: YAML or JSON (LOCKER_AGENT_CONFIG does the same); LOCKER_AGENT_* variables override
it (see docs/agent.md).
`;

/** The systemd STATUS= text: the terminal and its broker link (`systemctl status locker-agent`). */
export function statusText(terminalId: string, state: AgentState['mqtt']): string {
  const head = `terminal ${terminalId} running`;
  if (state.connected) return `${head}; broker connected`;
  const parts = [`broker down since ${state.downSince ?? '?'}`];
  if (state.refusals) parts.push(`${state.refusals} failed attempt${state.refusals === 1 ? '' : 's'} (last ${state.lastRefusal?.reason ?? '?'})`);
  if (state.downTooLong) parts.push(`UNHEALTHY: down for longer than ${state.unhealthyAfterMinutes} min`);
  return `${head}; ${parts.join(', ')}`;
}

/** Sends STATUS= alone (the Notifier sends it only with READY=1); best effort, like the Notifier. */
function linkStatusUpdates(agent: Agent, terminalId: string, sent: string, env: NodeJS.ProcessEnv = process.env): () => void {
  if (!env.NOTIFY_SOCKET) return () => undefined;
  let last = sent;
  const update = () => {
    let text: string;
    try {
      text = statusText(terminalId, agent.state().mqtt);
    } catch {
      return; // stopping
    }
    if (text === last) return;
    last = text;
    execFile('systemd-notify', [`--status=${text}`], { env: process.env }, () => undefined);
  };
  agent.link.on('linkState', update);
  // the unhealthy threshold passes without a link event
  const t = setInterval(update, 30_000);
  t.unref();
  update();
  return () => {
    clearInterval(t);
    agent.link.off('linkState', update);
  };
}

function fail(msg: string): never {
  console.error(`locker-agent: ${msg}`);
  process.exit(2);
}

function config(file: string | undefined): AgentConfig {
  if (!file && !process.env.LOCKER_AGENT_CONFIG && !process.env.LOCKER_AGENT_TERMINAL_ID) {
    fail('no configuration: pass --config FILE (the packaged one is /etc/locker/agent.yaml) or set LOCKER_AGENT_CONFIG; see --help');
  }
  try {
    return loadAgentConfig({ file });
  } catch (e) {
    if (e instanceof AgentConfigError) fail(e.message);
    throw e;
  }
}

export async function main(argv: string[]): Promise<void> {
  const { values, positionals } = parseCliArgs({ args: argv, allowPositionals: true, options: { config: { type: 'string' }, help: { type: 'boolean', short: 'h' } } }, fail);
  const [cmd] = positionals;
  if (values.help || !cmd) {
    console.log(HELP);
    return;
  }
  if (cmd === 'check-config') {
    const cfg = config(values.config);
    console.log(JSON.stringify({ ...cfg, terminal: { ...cfg.terminal, secret: '[hidden]' }, diagnostics: { ...cfg.diagnostics, technicianPassword: cfg.diagnostics.technicianPassword ? '[hidden]' : undefined } }, null, 2));
    return;
  }
  if (cmd !== 'run') fail(`unknown command ${cmd}\n\n${HELP}`);
  const cfg = config(values.config);
  const log = createAgentLogger({ level: cfg.log.level, terminalId: cfg.terminal.id });
  const agent = new Agent({ config: cfg, log });
  const notifier = systemdNotifier();
  let stopping = false;
  let starting: Promise<void> = Promise.resolve();
  let stopStatus = () => undefined as void;
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ ns: 'agent.cli', signal }, 'shutting down');
    stopStatus();
    notifier.stopping();
    notifier.stop();
    const t = setTimeout(() => process.exit(1), 15_000);
    t.unref();
    let code = 0;
    try {
      await starting.catch(() => undefined); // a start under way finishes first
      await agent.stop();
    } catch (err) {
      code = 1; // systemd and the tests see that the stop failed
      log.error({ ns: 'agent.cli', err: (err as Error).message }, 'stop failed');
    }
    process.exit(code);
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));
  try {
    starting = agent.start();
    await starting;
  } catch (err) {
    log.fatal({ ns: 'agent.cli', err: (err as Error).message }, 'agent failed to start');
    process.exit(1);
  }
  if (stopping) return;
  const readyStatus = statusText(cfg.terminal.id, agent.state().mqtt);
  notifier.ready(readyStatus);
  notifier.startWatchdog(() => agent.healthy());
  stopStatus = linkStatusUpdates(agent, cfg.terminal.id, readyStatus);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  main(process.argv.slice(2)).catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
