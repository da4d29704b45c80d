// `npm start`: the whole system on one machine with no external services (demo/system.ts): the
// central service with the demo site (SQLite, embedded MQTT broker), the simulated lock boards of
// the Central Station pick up point and its terminal agent. Prints where everything is, shows what
// happens at the terminal and to shipments as it happens, and reads simulator commands on stdin
// (`pin <code>`, `scan <code>`, `put 0 1`, `close 0 1`, ...). Ctrl-C / SIGTERM stop everything
// (exit code 0). When stdin is not a terminal and ends, it keeps running until a signal.
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { HELP as SIM_HELP, runCommand, SimError, type CommandContext } from '@locker/firmware-sim';
import { startDemo, type DemoSystem } from './system';

const say = (s: string) => process.stdout.write(`${s}\n`);

function banner(d: DemoSystem): string {
  const api = d.apiAddress;
  const db = d.config.database.url;
  const rel = (p: string) => (path.isAbsolute(p) && p.startsWith(process.cwd() + path.sep) ? path.relative(process.cwd(), p) : p);
  const t = d.tenants[0]!;
  const pupUid = d.terminal.pupUid;
  const first = d.locks[0];
  const boardsOf = (bus: string) => [...new Set(d.locks.filter((l) => l.bus === bus).map((l) => l.board))].join(',');
  const busLines = d.sim.busNames().map((b) => `simulated kerong-cu16 ${b}, boards ${boardsOf(b)}, on tcp://127.0.0.1:${d.sim.bus(b).tcpPort}`);
  const last = d.locks[d.locks.length - 1];
  // Shell lines that can be pasted one after another: each keeps what the next one needs in a variable.
  const json = (o: object) => `'${JSON.stringify(o).replace(/\$(\w+)/g, `'"$$$1"'`)}'`;
  const curl = (route: string, body: object) => `curl -s -H "authorization: Bearer $TOKEN" -H 'content-type: application/json' -d ${json(body)} ${api}${route}`;
  const grab = (field: string) => `| tee /dev/stderr | sed -E 's/.*"${field}":"([^"]+)".*/\\1/'); echo`;
  const lines = [
    '',
    `  Locker platform demo is running (${d.config.environment}, ${/^postgres/i.test(db) ? 'PostgreSQL' : `SQLite ${rel(db)}`})`,
    '',
    '  Central service',
    `    API:          ${api}/v1/   (token: POST ${api}/connect/token)`,
    `    API docs:     ${api}/docs`,
    ...(d.httpPortNote ? [`                  (${d.httpPortNote})`] : []),
    `    MQTT:         ${d.central.ctx.bus ? `${d.central.ctx.bus.kind} broker ${d.mqttAddress}` : 'off'}   (terminals connect here)`,
    '    Demo tenants (client_id / client_secret):',
    ...d.tenants.map((x) => `      ${x.clientId} / ${x.clientSecret}   (${x.name})`),
    '',
    `  Terminal ${d.terminal.id} at "${d.terminal.pupName}" (pupUid ${pupUid})`,
    ...(d.agent
      ? [
          `    Diagnostics:  ${d.diagnosticsAddress ?? 'off'}/   (technician password: ${d.technicianPassword ?? 'none: the open button is disabled'})`,
          ...busLines.map((b) => `    Lock boards:  ${b}`),
          first && last ? `                  (${first.lockerName} = board ${first.board} lock ${first.lock} ... ${last.lockerName} = board ${last.board} lock ${last.lock})` : '',
          d.scannerMissing
            ? `    Scanner:      none (no socat: ${d.scannerMissing.split(':')[0]}); "pin" and "scan" below hand the code straight to the agent`
            : `    Scanner:      simulated on ${d.sim.scanner('scanner0').path} (QR reads and keypad PINs)`,
        ]
      : [`    not running: ${d.agentMissing}`]),
    `  Logs:           ${rel(d.logFile)}`,
    '',
    '  Try it from another shell (bash; paste the lines in order):',
    `    TOKEN=$(curl -s -d grant_type=client_credentials -d client_id=${t.clientId} -d client_secret=${t.clientSecret} -d scope=integration_api ${api}/connect/token | sed -E 's/.*"access_token":"([^"]+)".*/\\1/')`,
    `    USER_UID=$(${curl('/v1/Account/CreateOrGetAccount', { emailAddress: 'ann@example.com', firstName: 'Ann', lastName: 'Example', pickUpPointUid: pupUid })} ${grab('userUid')}`,
    `    SHIPMENT_UID=$(${curl('/v1/Logistics/CreateLocalShipment', { toUserUid: '$USER_UID', pupUid, dimension: { width: 30, height: 10, length: 40 }, allowLargerLockers: true, allowOverflowLockers: false })} ${grab('shipmentUid')}`,
    `    ${curl('/v1/Logistics/GetShipmentAccessConfig', { shipmentUid: '$SHIPMENT_UID' })}; echo`,
    '        -> the DropOff and PickUp codes (type Code = keypad PIN, Qr = scanner)',
    `    ${curl('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 1, shipmentUid: '$SHIPMENT_UID' })}; echo`,
    '        -> stateCode: ReadyForDropoff, then ReadyForPickup, PickedUp (activeShipments: true lists all open ones)',
    '',
    '  The same steps with the typed TypeScript client (@locker/client: tokens, Idempotency-Key, typed errors; docs/client.md):',
    `    npx tsx --conditions=@locker/source demo/client-example.ts --api ${api} --client-id ${t.clientId} --client-secret ${t.clientSecret} --pup ${pupUid}`,
    `        -> const api = new LockerClient({ baseUrl: '${api}', clientId, clientSecret });`,
    `           await api.call('/v1/Logistics/CreateLocalShipment', { ToUserUid, PupUid, Dimension, ... })   (source: demo/client-example.ts)`,
    '',
    '  Then act at the locker, here (lock numbers as on the boards; the lines below say which door opened):',
    '    pin <DropOff code>     keypad entry (or: scan <DropOff Qr>): the terminal opens the booked locker',
    '    put 0 1                an item goes into board 0 lock 1',
    '    close 0 1              the door shuts: the shipment becomes ReadyForPickup',
    '    pin <PickUp code>, then take 0 1 and close 0 1: PickedUp',
    '    status, help           doors, latches and items; every simulator command',
    '    quit                   stop everything (or Ctrl-C)',
    '',
  ];
  return lines.join('\n');
}

/** Terminal events (the agent's journal), the link, the code cache and shipment transitions as they happen. */
function startFeed(d: DemoSystem, print: (s: string) => void): () => void {
  const lockerName = (bus: unknown, board: unknown, lock: unknown) => d.locks.find((l) => l.bus === bus && l.board === board && l.lock === lock)?.lockerName;
  const where = (f: Record<string, unknown>) => {
    if (f.bus === undefined) return '';
    if (f.lock === undefined) return ` ${f.bus} board ${f.board}`;
    const name = lockerName(f.bus, f.board, f.lock);
    return ` ${name ? `${name} ` : ''}(${f.bus} board ${f.board} lock ${f.lock})`;
  };
  const agent = d.agent;
  let lastSeq = agent ? agent.store.lastSeq() : 0;
  let connected: boolean | null = null;
  let codes = -1;
  let lastAt = d.central.ctx.clock.now().toISOString();
  let seenAtLast = new Set<string>();
  let transitionsOk = true;
  let busy = false;

  const terminalLine = (type: string, f: Record<string, unknown>): string | null => {
    switch (type) {
      case 'credentialAccepted':
        return `code accepted (${f.source})${where(f)}`;
      case 'credentialRefused':
        return `code refused (${f.source}): ${f.reason}`;
      case 'unlockSent':
        return `lock pulsed${where(f)}, cause ${f.cause}: the door is open; "put ${f.board} ${f.lock}" / "take ${f.board} ${f.lock}", then "close ${f.board} ${f.lock}"`;
      case 'doorOpened':
        return `door opened${where(f)}${f.commanded ? '' : ' by hand'}`;
      case 'doorClosed':
        return `door closed${where(f)}, ${f.item ? 'with an item' : 'empty'}`;
      case 'itemPlaced':
        return `item placed${where(f)}`;
      case 'itemRemoved':
        return `item removed${where(f)}`;
      case 'dropOff':
        return `drop-off done${where(f)}: reported to the central service`;
      case 'pickUp':
        return `pick-up done${where(f)}: reported to the central service`;
      case 'accessIncomplete':
        return `access not completed${where(f)}: ${f.reason}`;
      case 'boardOnline':
      case 'boardOffline':
      case 'jam':
      case 'forcedOpen':
      case 'doorLeftOpen':
      case 'busPortLost':
      case 'busPortRestored':
        return `${type}${where(f)}${f.reason ? `: ${f.reason}` : ''}`;
      default:
        return null;
    }
  };

  const tick = async () => {
    if (busy) return;
    busy = true;
    try {
      if (agent) {
        const st = agent.state();
        if (st.mqtt.connected !== connected) {
          connected = st.mqtt.connected;
          print(`terminal  ${connected ? `connected to the central service (${st.mqtt.url})` : `not connected to the central service${st.mqtt.lastError ? `: ${st.mqtt.lastError}` : ''}`}`);
        }
        if (st.codes.count !== codes && st.codes.epoch !== null) {
          codes = st.codes.count;
          print(`terminal  holds ${codes} access code${codes === 1 ? '' : 's'} (version ${st.codes.version})`);
        }
        const rows = agent.store.recent(100).filter((r) => r.seq > lastSeq).sort((a, b) => a.seq - b.seq);
        for (const r of rows) {
          lastSeq = Math.max(lastSeq, r.seq);
          const line = terminalLine(r.type, r.fields);
          if (line) print(`terminal  ${line}`);
        }
      }
      if (transitionsOk) {
        try {
          const rows = await d.central.ctx.db.kysely
            .selectFrom('shipment_transitions')
            .select(['shipment_uid', 'seq', 'from_state', 'to_state', 'cause', 'at'])
            .where('at', '>=', lastAt)
            .orderBy('at')
            .orderBy('seq')
            .limit(200)
            .execute();
          for (const r of rows) {
            const key = `${r.shipment_uid}:${r.seq}`;
            const at = String(r.at);
            if (at === lastAt && seenAtLast.has(key)) continue;
            if (at > lastAt) {
              lastAt = at;
              seenAtLast = new Set();
            }
            seenAtLast.add(key);
            print(`shipment  ${r.shipment_uid}: ${r.from_state ?? '(new)'} -> ${r.to_state} (${r.cause})`);
          }
        } catch {
          transitionsOk = false; // the feed is a convenience; GetShipments is the real thing
        }
      }
    } finally {
      busy = false;
    }
  };
  const timer = setInterval(() => void tick(), 250);
  return () => clearInterval(timer);
}

/**
 * Under `npm start` the chain is npm -> sh -> tsx -> this process. A SIGTERM to npm reaches only
 * sh, and sh (dash) dies without passing it on, which would leave the demo running on its own. So,
 * when started by npm on Linux, watch tsx's parent and stop when it is gone.
 */
function watchNpm(onGone: () => void): void {
  if (!process.env.npm_lifecycle_event || process.platform !== 'linux') return;
  const parentOf = (pid: number): number | null => {
    try {
      // /proc/<pid>/stat: "pid (comm) state ppid ..."; comm may contain spaces and parentheses
      return Number(fs.readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^[\s\S]*\) /, '').split(' ')[1]);
    } catch {
      return null;
    }
  };
  const launcher = process.ppid;
  const first = parentOf(launcher);
  if (first === null) return;
  const timer = setInterval(() => {
    if (parentOf(launcher) !== first) {
      clearInterval(timer);
      onGone();
    }
  }, 1000);
  timer.unref();
}

async function main(): Promise<void> {
  let demo: DemoSystem;
  try {
    demo = await startDemo();
  } catch (err) {
    const code = (err as { code?: string }).code;
    process.stderr.write(`locker demo: cannot start${code ? ` [${code}]` : ''}: ${(err as Error).message}\n`);
    process.exit(1);
  }
  const d = demo;
  say(`demo site loaded: ${d.provisioned.created} created, ${d.provisioned.updated} updated, ${d.provisioned.unchanged} unchanged`);
  say(banner(d));

  const tty = process.stdin.isTTY === true;
  const rl = readline.createInterface({ input: process.stdin, output: process.stdout, terminal: tty });
  rl.setPrompt('locker> ');
  const print = (s: string) => {
    if (tty) {
      readline.clearLine(process.stdout, 0);
      readline.cursorTo(process.stdout, 0);
    }
    say(s);
    if (tty && !stopping) rl.prompt(true);
  };
  const stopFeed = startFeed(d, print);

  let stopping: Promise<void> | null = null;
  const shutdown = (why: string) => {
    stopping ??= (async () => {
      const force = setTimeout(() => process.exit(1), 15_000);
      force.unref();
      stopFeed();
      say(`\nstopping (${why})...`);
      rl.close();
      await d.stop();
      say('stopped');
      process.exit(0);
    })();
    return stopping;
  };
  // process.on, not once: a second Ctrl-C while stopping must not find the signal unhandled (tsx
  // then exits at once with 130, leaving the stop half done); shutdown() runs only once anyway
  process.on('SIGINT', () => void shutdown('SIGINT'));
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  watchNpm(() => void shutdown('npm stopped'));

  const ctx: CommandContext = { sim: d.sim, bus: d.sim.busNames()[0] ?? '', frames: false, quit: false };
  d.sim.on('frame', (e) => {
    if (ctx.frames) print(`[${e.bus}] ${e.dir === 'rx' ? 'host->board' : 'board->host'} ${e.hex}  ${e.meaning}`);
  });

  const run = async (line: string): Promise<string> => {
    const words = line.trim().split(/\s+/).filter(Boolean);
    const cmd = words[0]?.toLowerCase();
    if (cmd === 'quit' || cmd === 'exit') {
      void shutdown(cmd);
      return '';
    }
    if (cmd === 'help' || cmd === '?') {
      return `${SIM_HELP}${d.scannerMissing ? '\n(no simulated scanner: "pin" and "scan" hand the code to the terminal agent directly)' : ''}\nCtrl-C or "quit" stops the whole demo.`;
    }
    // Without socat there is no simulated scanner: hand scan/pin to the agent as its scanner would.
    if ((cmd === 'scan' || cmd === 'pin') && d.scannerMissing && d.agent) {
      const value = words.slice(1).filter((w) => !w.startsWith('-')).join(' ');
      if (!value) return `usage: ${cmd} <code>`;
      if (cmd === 'pin' && !/^\d+$/.test(value)) return 'error [SIM_BAD_COMMAND]: a PIN is digits only';
      await d.agent.presentCredential({ source: cmd === 'pin' ? 'keypad' : 'qr', value, reader: 'console' });
      return `terminal: ${cmd === 'pin' ? 'keypad' : 'scanner'} entry of ${value.length} characters handed to the agent`;
    }
    return runCommand(ctx, line);
  };

  let queue = Promise.resolve();
  rl.on('line', (line) => {
    queue = queue.then(async () => {
      if (stopping) return;
      try {
        const out = await run(line);
        if (out) say(out);
      } catch (err) {
        say(`error [${err instanceof SimError ? err.code : 'ERROR'}]: ${(err as Error).message}`);
      }
      if (tty && !stopping) rl.prompt();
    });
  });
  // At a terminal readline takes Ctrl-C itself (raw mode): treat it as the signal it stands for.
  rl.on('SIGINT', () => void shutdown('Ctrl-C'));
  rl.on('close', () => {
    // Ctrl-D at a terminal quits; a closed pipe (started with </dev/null or in the background) keeps running.
    if (tty) void queue.then(() => shutdown('end of input'));
  });
  if (tty) rl.prompt();
}

void main();
