// locker-sim: run the lock-board / scanner simulator from a terminal.
//   npx tsx firmware-sim/src/cli.ts [options]      (see --help)
//   npx tsx firmware-sim/src/cli.ts fleet ...      the fleet simulator (fleet/cli.ts)
// Prints the device paths for the agent, then reads commands from stdin (type "help").
import readline from 'node:readline';
import pino from 'pino';
import { runCommand, type CommandContext } from './commands';
import { parseArgs, USAGE } from './config';
import { ControlServer, parseControlSpec } from './control';
import { SimError } from './errors';
import { fleetMain } from './fleet/cli';
import { suffixName } from './scanner';
import { Simulator } from './simulator';

async function main(): Promise<number> {
  // `locker-sim fleet ...`: the fleet simulator (thousands of simulated terminals over MQTT)
  if (process.argv[2] === 'fleet') return fleetMain(process.argv.slice(3));
  let cfg;
  try {
    cfg = parseArgs(process.argv.slice(2));
  } catch (err) {
    console.error(`locker-sim: ${(err as Error).message}`);
    return 2;
  }
  if (cfg.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  const logger = pino({ level: cfg.logLevel, base: { service: 'locker-sim' } }, pino.destination(2));
  const sim = new Simulator({ ...cfg.options, logger });
  const ctx: CommandContext = { sim, bus: cfg.options.buses[0]?.name ?? '', frames: cfg.frames, quit: false };
  sim.on('frame', (e) => {
    if (ctx.frames) console.log(`[${e.bus}] ${e.dir === 'rx' ? 'host->board' : 'board->host'} ${e.hex}  ${e.meaning}`);
  });
  sim.on('door', (e) => {
    if (ctx.frames) console.log(`[${e.bus}] board ${e.board} lock ${e.lock}: ${e.event}`);
  });

  try {
    await sim.start();
  } catch (err) {
    const code = err instanceof SimError ? ` [${err.code}]` : '';
    console.error(`locker-sim: cannot start${code}: ${(err as Error).message}`);
    return 1;
  }

  // Signal handlers first: whoever reads the paths below may stop us right away.
  let stopping: Promise<void> | null = null;
  let control: ControlServer | null = null;
  const shutdown = (code: number) => {
    stopping ??= (control ? control.stop() : Promise.resolve()).then(() => sim.stop()).finally(() => process.exit(code));
    return stopping;
  };
  process.once('SIGINT', () => void shutdown(130));
  process.once('SIGTERM', () => void shutdown(143));

  for (const name of sim.busNames()) {
    const b = sim.bus(name);
    const where = b.path ?? `tcp://127.0.0.1:${b.tcpPort}`;
    console.log(
      `bus ${name} (${b.dialect.name}, ${b.baudRate} baud, ${b.polarity}, boards ${b.boardAddresses.join(',')}): ${where}`,
    );
  }
  for (const name of sim.scannerNames()) {
    const s = sim.scanner(name);
    console.log(`scanner ${name} (suffix ${suffixName(s.suffix)}): ${s.path}`);
  }
  if (cfg.control !== null) {
    const spec = parseControlSpec(cfg.control);
    control = new ControlServer({ sim, host: spec.host, port: spec.port, bus: ctx.bus, onQuit: () => void shutdown(0) });
    try {
      const port = await control.start();
      console.log(`control tcp://${spec.host.includes(':') ? `[${spec.host}]` : spec.host}:${port}`);
    } catch (err) {
      console.error(`locker-sim: cannot listen on the control port ${cfg.control}: ${(err as Error).message}`);
      await sim.stop();
      return 1;
    }
  }
  console.log('ready; type "help" for commands');


  if (!cfg.repl) return new Promise<number>(() => undefined);

  const rl = readline.createInterface({ input: process.stdin, output: process.stdout, terminal: process.stdin.isTTY === true });
  if (process.stdin.isTTY) {
    rl.setPrompt('sim> ');
    rl.prompt();
  }
  // Commands run one after another, in the order typed.
  let queue = Promise.resolve();
  rl.on('line', (line) => {
    queue = queue.then(async () => {
      if (ctx.quit) return;
      try {
        const out = await runCommand(ctx, line);
        if (out) console.log(out);
      } catch (err) {
        const code = err instanceof SimError ? err.code : 'ERROR';
        console.log(`error [${code}]: ${(err as Error).message}`);
      }
      if (ctx.quit) {
        rl.close();
        await shutdown(0);
      } else if (process.stdin.isTTY) rl.prompt();
    });
  });
  // At a terminal readline takes Ctrl-C itself (raw mode): treat it as the signal it stands for.
  rl.on('SIGINT', () => void shutdown(130));
  rl.on('close', () => {
    // Ctrl-D at a terminal quits; a closed pipe (e.g. started with </dev/null) keeps running until a signal.
    if (process.stdin.isTTY) void queue.then(() => shutdown(0));
  });
  return new Promise<number>(() => undefined);
}

main().then(
  (code) => process.exit(code),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
