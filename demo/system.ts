// The whole demo system in one process: the central service with the demo site (SQLite and the
// embedded MQTT broker by default), the lock-board simulator for the boards of one demo pick up
// point (TCP, so socat is not needed for the boards; a scanner on a socat pty when socat is there),
// and the terminal agent of that pick up point connected to both. `npm start` (demo/start.ts) runs
// it with a command line; tests can run it in process.
//
// One process rather than three: one Ctrl-C and one exit code for everything, one command line
// that acts on the simulator and (without socat) presents codes straight to the agent, and an
// event feed that reads the agent's journal and the shipments' transitions directly. The parts
// talk to each other over their real links all the same (HTTP, MQTT over TCP, the lock-board
// protocol over TCP, the scanner over a pty).
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pino, { type Logger } from 'pino';
import { CentralService, loadConfig, type Config } from '@locker/central';
import { Agent, loadAgentConfig, type AgentConfig } from '@locker/agent';
import { Simulator, SimError } from '@locker/firmware-sim';
import { createLogger } from '../packages/central/src/logger';
import { applyProvisioning, parseProvisioning, readProvisioningFile } from '../packages/central/src/provisioning/apply';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const DEMO_SITE = path.join(ROOT, 'packages/central/provisioning/demo-site.yaml');
/** The terminal the demo runs (the Central Station PUP's). */
export const DEMO_TERMINAL = 'term-ams-cs-01';
/** The technician password of the demo terminal's diagnostics page (LOCKER_AGENT_TECHNICIAN_PASSWORD overrides it). */
export const DEMO_TECHNICIAN_PASSWORD = 'demo-technician';
const DEFAULT_DIAGNOSTICS_PORT = 8090;

/** Variables of the demo launcher itself (the central service would refuse them as unknown). */
export const DEMO_ENV = ['LOCKER_DEMO_DATA_DIR'] as const;

export interface DemoOptions {
  env?: NodeJS.ProcessEnv;
}

export interface DemoLock {
  bus: string;
  board: number;
  lock: number;
  lockerName: string;
}

export interface DemoSystem {
  dataDir: string;
  logFile: string;
  config: Config;
  central: CentralService;
  apiAddress: string;
  /** a note when the configured HTTP port was taken and a free one used instead */
  httpPortNote: string | null;
  mqttAddress: string | null;
  sim: Simulator;
  /** why there is no simulated scanner (socat missing), or null */
  scannerMissing: string | null;
  agent: Agent | null;
  agentConfig: AgentConfig | null;
  /** why the terminal is not running (MQTT off), or null */
  agentMissing: string | null;
  diagnosticsAddress: string | null;
  technicianPassword: string | null;
  tenants: { clientId: string; clientSecret: string; name: string }[];
  terminal: { id: string; pupUid: string; pupName: string };
  locks: DemoLock[];
  provisioned: { created: number; updated: number; unchanged: number };
  stop(): Promise<void>;
}

/** Is host:port free to listen on? */
function portFree(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen({ host, port, exclusive: true }, () => s.close(() => resolve(true)));
  });
}

function centralEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(env)) if (!/^LOCKER_(AGENT|SIM|DEMO)_/.test(k)) out[k] = v;
  return out;
}

export async function startDemo(opts: DemoOptions = {}): Promise<DemoSystem> {
  const env = opts.env ?? process.env;
  const dataDir = path.resolve(env.LOCKER_DEMO_DATA_DIR || path.join(process.cwd(), 'data'));
  fs.mkdirSync(dataDir, { recursive: true });
  const logFile = path.join(dataDir, 'demo.log');

  // ---- configuration: the central service's (file < LOCKER_* < the demo's staging default)
  const config = loadConfig({ env: centralEnv(env), overrides: env.LOCKER_ENVIRONMENT ? {} : { environment: 'staging' } });
  if (config.database.url === './data/locker.db') config.database.url = path.join(dataDir, 'locker.db');
  // one machine, a developer's own receiver on localhost: the demo lets callbacks reach private
  // addresses unless told otherwise (production keeps callbacks.allowPrivateNetworks off: docs/callbacks.md)
  if (env.LOCKER_CALLBACKS_ALLOW_PRIVATE_NETWORKS === undefined) config.callbacks.allowPrivateNetworks = true;
  let httpPortNote: string | null = null;
  if (!env.LOCKER_HTTP_PORT && config.http.port !== 0 && !(await portFree(config.http.host, config.http.port))) {
    httpPortNote = `port ${config.http.port} is in use, so the API took a free port (LOCKER_HTTP_PORT sets one)`;
    config.http.port = 0;
  }

  // Everything logs to data/demo.log; errors also to stderr.
  const level = config.log.level;
  const fileDest = pino.destination({ dest: logFile, mkdir: true, sync: true });
  const streams = pino.multistream([
    { level: level === 'silent' ? 'fatal' : level, stream: fileDest },
    { level: 'error', stream: process.stderr },
  ]);
  const centralLog = createLogger({ level, destination: streams });

  const site = parseProvisioning(readProvisioningFile(DEMO_SITE));
  const term = site.terminals.find((t) => t.id === DEMO_TERMINAL);
  if (!term) throw new Error(`the demo site has no terminal ${DEMO_TERMINAL}`);
  const pup = site.pickupPoints.find((p) => p.uid === term.pupUid);
  if (!pup) throw new Error(`the demo site has no pick up point ${term.pupUid}`);
  const locks: DemoLock[] = pup.lockers.map((l) => ({ bus: l.bus, board: l.boardAddress, lock: l.lockNumber, lockerName: l.name }));
  const busNames = [...new Set(locks.map((l) => l.bus))];

  const stops: (() => Promise<void>)[] = [];
  const stopAll = async () => {
    for (const s of stops.splice(0).reverse()) {
      try {
        await s();
      } catch (err) {
        centralLog.error({ ns: 'demo', err: (err as Error).message }, 'stop failed');
      }
    }
    fileDest.flushSync();
  };

  try {
    // ---- the central service
    const central = new CentralService({ config, log: centralLog, mqttPortFallback: true });
    await central.start();
    stops.push(() => central.stop());
    const provisioned = await applyProvisioning(central.ctx.db.kysely, site, central.ctx.clock);
    const apiAddress = await central.listen();
    centralLog.info({ ns: 'demo', listen: apiAddress, environment: config.environment }, 'central service listening');
    const mqttAddress = central.ctx.bus?.address() ?? (config.mqtt.mode === 'external' ? config.mqtt.url : null);

    // ---- the simulator: the PUP's boards (CU16) on TCP, a scanner on a pty when socat is there
    const simLog = pino({ level: level === 'silent' ? 'fatal' : level === 'info' ? 'warn' : level, base: { service: 'locker-sim' } }, streams);
    const buses = busNames.map((name) => ({
      name,
      dialect: 'kerong-cu16' as const,
      link: { kind: 'tcp' as const, port: 0, host: '127.0.0.1' },
      boards: [...new Set(locks.filter((l) => l.bus === name).map((l) => l.board))].sort((a, b) => a - b).map((address) => ({ address })),
    }));
    let scannerMissing: string | null = null;
    let sim = new Simulator({ buses, scanners: [{ name: 'scanner0', link: { kind: 'pty' }, suffix: '\r' }], logger: simLog });
    try {
      await sim.start();
    } catch (err) {
      if (!(err instanceof SimError) || !/^SIM_SOCAT/.test(err.code)) throw err;
      scannerMissing = `${err.code}: ${err.message}`;
      sim = new Simulator({ buses, logger: simLog });
      await sim.start();
    }
    const simulator = sim;
    stops.push(() => simulator.stop());

    // ---- the terminal agent
    let agent: Agent | null = null;
    let agentConfig: AgentConfig | null = null;
    let agentMissing: string | null = null;
    let diagnosticsAddress: string | null = null;
    if (!mqttAddress) {
      agentMissing = 'MQTT is off (LOCKER_MQTT_MODE=off), so no terminal can connect';
    } else {
      let diagPort = Number(env.LOCKER_AGENT_DIAGNOSTICS_PORT || DEFAULT_DIAGNOSTICS_PORT);
      if (!env.LOCKER_AGENT_DIAGNOSTICS_PORT && !(await portFree(env.LOCKER_AGENT_DIAGNOSTICS_HOST || '127.0.0.1', diagPort))) diagPort = 0;
      // The demo's values as defaults under the LOCKER_AGENT_* variables the developer set.
      const agentEnv: NodeJS.ProcessEnv = {
        LOCKER_AGENT_TERMINAL_ID: term.id,
        LOCKER_AGENT_TERMINAL_SECRET: term.secret,
        LOCKER_AGENT_MQTT_URL: mqttAddress,
        LOCKER_AGENT_STORE_PATH: path.join(dataDir, `agent-${term.id}.db`),
        LOCKER_AGENT_TECHNICIAN_PASSWORD: DEMO_TECHNICIAN_PASSWORD,
        ...Object.fromEntries(Object.entries(env).filter(([k, v]) => k.startsWith('LOCKER_AGENT_') && v !== undefined && v !== '')),
        LOCKER_AGENT_DIAGNOSTICS_PORT: String(diagPort),
      };
      agentConfig = loadAgentConfig({
        env: agentEnv,
        overrides: {
          buses: buses.map((b) => ({
            name: b.name,
            port: `tcp://127.0.0.1:${simulator.bus(b.name).tcpPort}`,
            dialect: b.dialect,
            boards: b.boards,
            pollMs: 250,
          })),
          scanners: scannerMissing ? [] : [{ name: 'scanner0', port: simulator.scanner('scanner0').path!, baudRate: 9600, suffix: '\r' }],
        },
      });
      const agentLog = pino({ level: agentConfig.log.level, base: { service: 'locker-agent', terminal: agentConfig.terminal.id } }, streams);
      const a = new Agent({ config: agentConfig, log: agentLog });
      stops.push(() => a.stop());
      await a.start();
      agent = a;
      diagnosticsAddress = a.diagnostics?.address ?? null;
    }

    return {
      dataDir,
      logFile,
      config,
      central,
      apiAddress,
      httpPortNote,
      mqttAddress,
      sim: simulator,
      scannerMissing,
      agent,
      agentConfig,
      agentMissing,
      diagnosticsAddress,
      technicianPassword: agentConfig?.diagnostics.technicianPassword ?? null,
      tenants: site.tenants.map((t) => ({ clientId: t.clientId, clientSecret: t.clientSecret, name: t.name })),
      terminal: { id: term.id, pupUid: pup.uid, pupName: pup.name },
      locks,
      provisioned: { created: provisioned.created, updated: provisioned.updated, unchanged: provisioned.unchanged },
      stop: stopAll,
    };
  } catch (err) {
    await stopAll();
    throw err;
  }
}

export type { Logger };
