// Issue 11, "Tests": the crash test. The real central service (SQLite, embedded broker), the lock
// board simulator (boards on TCP, a scanner/keypad on a socat pty, driven over its control port)
// and the terminal agent run as three separate processes. The test acts as the people at the
// locker: it books shipments through the tenant API, presents their codes at the scanner or the
// keypad, opens, fills, empties and shuts doors in the simulator, and SIGKILLs the agent at seeded
// random points of the door cycles (after the code, after the unlock, with the door open, after the
// parcel moved, while the door is shut with the agent dead, just after the close), restarting it
// each time. It keeps its own ledger of what the doors physically did and, after the agent
// drained, demands:
//   - every shipment is in the state its door history says (GetShipments): dropped off ->
//     ReadyForPickup, picked up -> PickedUp, never dropped off -> ReadyForDropoff (a swap that never
//     happened: LockerAssigned);
//   - exactly one dropOff event per physical drop-off and one pickUp per physical pick-up in the
//     central service's edge_events (none lost, none duplicated, none invented: a drop-off where the
//     person gave up and shut the door empty has none).
//
// LOCKER_CRASH_SEED=<n>   repeat a run (the seed is printed at the start and in the summary)
// LOCKER_CRASH_CYCLES=<n> door cycles (default 100; a longer run: e.g. 1000)
// LOCKER_CRASH_KILL_RATE  share of cycles with a kill (default 0.35; the kill points are drawn from
//                         a shuffled bag of all six, so every point is hit once in every six kills)
// LOCKER_CRASH_KEEP=1     keep the temporary directory (logs of the three processes, databases)
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Api, AgentRunner, CentralDb, freePort, Procs, sleep, startCentral, startSim, waitFor, type CentralHandle, type SimHandle } from './support/crash-procs';
import { KILL_POINTS, Rng, expectedStates, type Codes, type CycleKind, type CycleRecord, type KillPoint, type ShipTruth } from './support/crash-plan';

const envInt = (name: string, dflt: number) => {
  const v = process.env[name];
  if (v === undefined || v === '') return dflt;
  const n = Number(v);
  if (!Number.isFinite(n)) throw new Error(`${name}=${v}: not a number`);
  return n;
};
const SEED = envInt('LOCKER_CRASH_SEED', Math.floor(Math.random() * 2 ** 31)) >>> 0;
const CYCLES = envInt('LOCKER_CRASH_CYCLES', 100);
const KILL_RATE = envInt('LOCKER_CRASH_KILL_RATE', 0.35);
const KEEP = process.env.LOCKER_CRASH_KEEP === '1';

const PUP = 'c0ffee00c0ffee00c0ffee00c0ffee01';
const TERMINAL = { id: 'term-crash-01', secret: 'terminal-secret-crash-01' };
const TENANT = { clientId: 'crash-dispatch', clientSecret: 'crash-secret-change-me' };
const DIMENSION = { width: 40, height: 10, length: 60 };
/** Sixteen lockers on both boards of bus0 (board 0 locks 1-12, board 1 locks 1-4). */
const LOCKERS = [
  ...Array.from({ length: 12 }, (_, i) => ({ board: 0, lock: i + 1 })),
  ...Array.from({ length: 4 }, (_, i) => ({ board: 1, lock: i + 1 })),
].map((at, i) => ({ ...at, name: `CR-${String(i + 1).padStart(2, '0')}`, uid: `c0ffee00c0ffee00c0ffee00c0ff${String(i + 1).padStart(4, '0')}` }));

function siteFile(dir: string): string {
  const site = {
    pickupPoints: [
      {
        uid: PUP,
        name: 'Crash Test Lockers',
        timeZone: 'Europe/Amsterdam',
        locationAddress: { streetName: 'Teststraat 1', mailbox: '', city: 'Amsterdam', countryIso2: 'NL' },
        lockers: LOCKERS.map((l) => ({ uid: l.uid, name: l.name, dimension: DIMENSION, sizeCode: 'S', typeCode: 'normal', bus: 'bus0', boardAddress: l.board, lockNumber: l.lock })),
      },
    ],
    tenants: [
      {
        ...TENANT,
        name: 'Crash Dispatch',
        mainAccount: { email: 'dispatch@crash.example', firstName: 'Crash', lastName: 'Dispatcher', languageCode: 'en' },
        pickupPoints: [PUP],
      },
    ],
    terminals: [{ ...TERMINAL, pupUid: PUP, name: 'Crash test terminal' }],
  };
  const file = path.join(dir, 'site.json');
  fs.writeFileSync(file, JSON.stringify(site, null, 2));
  return file;
}

interface Slot {
  name: string;
  uid: string;
  board: number;
  lock: number;
  /** booked, waiting for its drop-off (its parcel is not inside) */
  booked: ShipTruth | null;
  /** whose parcel is physically inside */
  inside: ShipTruth | null;
  /** why the test cannot use this locker any more (a failure in itself) */
  stuck: string | null;
}

describe('crash test: central service, simulator and agent as processes; the agent SIGKILLed at random points of door cycles', () => {
  const procs = new Procs();
  let dir: string;
  let central: CentralHandle;
  let sim: SimHandle;
  let agent: AgentRunner;
  let api: Api;
  let db: CentralDb;
  let userUid: string;
  let failed = true;

  beforeAll(async () => {
    console.log(`[crash] seed ${SEED} (LOCKER_CRASH_SEED=${SEED} repeats this run), ${CYCLES} cycles, kill rate ${KILL_RATE}`);
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-crash-'));
    central = await startCentral(procs, dir, siteFile(dir));
    sim = await startSim(procs, dir);
    const diagPort = await freePort();
    const config = {
      terminal: TERMINAL,
      mqtt: { url: central.mqttUrl, reconnectMs: 200, connectTimeoutMs: 5000, statusIntervalSeconds: 60, syncRetrySeconds: 1, publishTimeoutMs: 5000 },
      buses: [
        {
          name: 'bus0',
          port: `tcp://127.0.0.1:${sim.busPort}`,
          dialect: 'kerong-cu16',
          boards: [{ address: 0 }, { address: 1 }],
          pollMs: 50,
          replyTimeoutMs: 200,
          pulseMs: 300,
          jamWindowMs: 10_000,
          doorLeftOpenMs: null,
          reconnect: { initialMs: 50, maxMs: 500 },
        },
      ],
      scanners: [{ name: 'scan0', port: sim.scannerPath, suffix: '\r' }],
      store: { path: path.join(dir, 'agent.db') },
      diagnostics: { enabled: true, host: '127.0.0.1', port: diagPort, technicianPassword: 'crash-technician' },
      // a person retrying a code after a restart must never be locked out
      access: { maxFailures: 1000, terminalMaxFailures: 1000, failureWindowSeconds: 60, lockoutSeconds: 1 },
      log: { level: 'info' },
    };
    const configFile = path.join(dir, 'agent.json');
    fs.writeFileSync(configFile, JSON.stringify(config, null, 2));
    agent = new AgentRunner(procs, dir, configFile, diagPort);
    agent.start();
    await agent.ready();
    api = new Api(central.apiUrl, TENANT.clientId, TENANT.clientSecret);
    db = new CentralDb(central.dbFile);
    userUid = (await api.ok('/v1/Account/CreateOrGetAccount', { emailAddress: 'receiver@crash.example', firstName: 'Rita', lastName: 'Receiver', pickUpPointUid: PUP })).userUid;
  }, 240_000);

  afterAll(async () => {
    try {
      db?.close();
    } catch {
      /* already closed */
    }
    sim?.control.close();
    await procs.killAll();
    if (dir) {
      if (failed || KEEP) console.log(`[crash] logs and databases kept in ${dir} (central.log, sim.log, agent.log, central.db, agent.db); seed ${SEED}`);
      else fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it(
    `drives ${CYCLES} door cycles with seeded SIGKILLs of the agent: nothing lost, nothing duplicated, nothing invented`,
    async () => {
      const rng = new Rng(SEED);
      const ships = new Map<string, ShipTruth>();
      const cycles: CycleRecord[] = [];
      const kills = Object.fromEntries(KILL_POINTS.map((k) => [k, 0])) as Record<KillPoint, number>;
      const slots: Slot[] = LOCKERS.map((l) => ({ ...l, booked: null, inside: null, stuck: null }));
      const startedAt = Date.now();
      const restartMs: number[] = [];
      const swapRefused: string[] = [];
      let bag: KillPoint[] = [];
      const nextKillPoint = (): KillPoint => {
        if (bag.length === 0) bag = rng.shuffle(KILL_POINTS);
        return bag.pop()!;
      };

      // ---------------------------------------------------------------- API and terminal helpers
      const codesOf = async (uid: string): Promise<Codes> => {
        const items = (await api.ok('/v1/Logistics/GetShipmentAccessConfig', { shipmentUid: uid })).items as { usage: string; type: string; value: string }[];
        const find = (usage: string, type: string) => items.find((i) => i.usage === usage && i.type === type)?.value ?? '';
        return { dropQr: find('DropOff', 'Qr'), dropPin: find('DropOff', 'Code'), pickQr: find('PickUp', 'Qr'), pickPin: find('PickUp', 'Code') };
      };
      /** Every drop-off / pick-up the central service stored has an outcome: what the agent sent has been acted on. */
      const centralCaughtUp = () =>
        waitFor(
          () => db.get<{ n: number }>("SELECT count(*) AS n FROM edge_events WHERE terminal_id = ? AND type IN ('dropOff', 'pickUp') AND (outcome IS NULL OR outcome = 'applying')", TERMINAL.id)!.n === 0,
          'the central service to act on the stored dropOff / pickUp events',
          60_000,
          50,
        );
      /** The shipment's valid codes were pushed and the agent holds that code version. */
      const codesAtTerminal = async (uid: string) => {
        const ids = db.all<{ uid: string }>("SELECT uid FROM access_codes WHERE shipment_uid = ? AND valid = 1 AND usage IN ('DropOff', 'PickUp')", uid).map((r) => r.uid);
        await waitFor(() => ids.every((id) => db.get('SELECT 1 AS x FROM edge_pushed_codes WHERE terminal_id = ? AND code_uid = ?', TERMINAL.id, id)), `codes of ${uid} pushed to the terminal`, 60_000, 50);
        const v = db.get<{ codes_version: number }>('SELECT codes_version FROM edge_terminals WHERE terminal_id = ?', TERMINAL.id)!.codes_version;
        await waitFor(async () => ((await agent.state())?.codes.version ?? -1) >= v, `code version ${v} at the terminal`, 60_000, 50);
      };
      const book = async (slot: Slot): Promise<void> => {
        await centralCaughtUp(); // a pick-up just done must have released the locker
        const r = await api.call('/v1/Logistics/CreateLocalShipment', { ToUserUid: userUid, PupUid: PUP, Dimension: DIMENSION, AllowLargerLockers: true, AllowOverflowLockers: false, LockerUid: slot.uid });
        if (r.status !== 200 || r.body?.success !== true) {
          slot.stuck = `booking the empty locker failed: ${r.status} ${r.body?.error ?? ''} ${r.body?.message ?? ''}`.trim();
          return;
        }
        const uid = r.body.shipmentUid as string;
        const s: ShipTruth = { uid, locker: slot.name, codes: await codesOf(uid), swaps: null, dropped: 0, picked: 0, gaveUp: 0, history: [] };
        ships.set(uid, s);
        slot.booked = s;
      };
      const restart = async () => {
        const t = Date.now();
        agent.start();
        await agent.ready();
        restartMs.push(Date.now() - t);
      };
      const kill = async (point: KillPoint) => {
        kills[point]++;
        await agent.kill();
      };
      const lockState = (slot: Slot) => sim.control.lock(slot.board, slot.lock);
      const doorOpens = (slot: Slot, ms: number) => waitFor(async () => (await lockState(slot)).doorOpen, `door ${slot.name} to open`, ms, 10).then(
        () => true,
        () => false,
      );
      /** The live agent has seen the lock as the simulator shows it now (a person is never faster than a poll). */
      const agentSees = async (slot: Slot) => {
        const phys = await lockState(slot);
        await waitFor(
          async () => {
            const v = await agent.lockView(slot.board, slot.lock);
            return v && v.door === (phys.doorOpen ? 'open' : 'closed') && v.item === phys.item;
          },
          `the agent to see ${slot.name} ${phys.doorOpen ? 'open' : 'closed'} ${phys.item ? 'with' : 'without'} an item`,
          30_000,
          20,
        );
      };

      for (const s of slots) await book(s);

      // ---------------------------------------------------------------- the door cycles
      for (let no = 1; no <= CYCLES; no++) {
        const usable = slots.filter((s) => !s.stuck && (s.inside || s.booked));
        if (usable.length === 0) break;
        const slot = rng.pick(usable);
        let kind: CycleKind = slot.inside ? (rng.chance(0.4) ? 'swap' : 'pick') : rng.chance(0.15) ? 'giveup' : 'drop';
        const killAt: KillPoint | null = rng.chance(KILL_RATE) ? nextKillPoint() : null;
        const t0 = Date.now();

        // who is involved, and which code opens the door
        let main: ShipTruth;
        let swap: ShipTruth | null = null;
        if (kind === 'drop' || kind === 'giveup') main = slot.booked!;
        else {
          main = slot.inside!;
          if (kind === 'swap') {
            const r = await api.call('/v1/Logistics/CreateLocalShipment', { ToUserUid: userUid, PupUid: PUP, Dimension: DIMENSION, AllowLargerLockers: true, AllowOverflowLockers: false, SwapsShipmentUid: main.uid });
            if (r.status !== 200 || r.body?.success !== true) {
              // the central service does not hold the parcel where the doors put it: a plain pick-up instead
              swapRefused.push(`cycle ${no}: creating a swap of ${main.uid} was refused: ${r.status} ${r.body?.error ?? ''} ${r.body?.message ?? ''}`.trim());
              kind = 'pick';
            } else {
              const uid = r.body.shipmentUid as string;
              swap = { uid, locker: slot.name, codes: await codesOf(uid), swaps: main.uid, dropped: 0, picked: 0, gaveUp: 0, history: [] };
              ships.set(uid, swap);
            }
          }
        }
        await codesAtTerminal(main.uid);
        if (swap) await codesAtTerminal(swap.uid);
        const qr = rng.chance(0.5);
        const code = kind === 'drop' || kind === 'giveup' ? (qr ? main.codes.dropQr : main.codes.dropPin) : qr ? main.codes.pickQr : main.codes.pickPin;
        expect(code, `cycle ${no}: the code to present`).not.toBe('');
        const present = () => sim.control.cmd(qr ? `scan ${code}` : `pin ${code}`);

        let presentations = 1;
        await present();
        let agentAlive = true;
        if (killAt === 'code') {
          await sleep(rng.int(0, 250));
          await kill('code');
          await sleep(300);
          await restart();
        }
        // the person waits for the door; if it stays shut, they present the code again (twice at most)
        let opened = await doorOpens(slot, killAt === 'code' ? 2000 : 15_000);
        while (!opened && presentations < 3) {
          presentations++;
          await present();
          opened = await doorOpens(slot, 15_000);
        }
        const label = (extra = '') => `#${no} ${kind}${killAt ? ` (kill: ${killAt})` : ''}${extra}`;
        if (!opened) {
          slot.stuck = `cycle ${no}: the door did not open for a ${kind} after ${presentations} presentations of the code`;
          main.history.push(label(': door never opened'));
          swap?.history.push(label(': door never opened'));
          cycles.push({ no, kind, locker: slot.name, shipments: [main.uid, ...(swap ? [swap.uid] : [])], kill: killAt, outcome: 'door-never-opened', presentations, ms: Date.now() - t0, effects: [] });
          continue;
        }
        if (killAt === 'unlocked') {
          await kill('unlocked');
          await restart();
        }
        await agentSees(slot); // the person takes a moment: the agent sees the door open
        if (killAt === 'open') {
          await kill('open');
          await restart();
          await agentSees(slot);
        }
        if (killAt === 'dead') {
          await kill('dead');
          agentAlive = false;
        }

        // the parcel moves
        if (kind === 'drop') await sim.control.cmd(`put ${slot.board} ${slot.lock}`);
        if (kind === 'pick') await sim.control.cmd(`take ${slot.board} ${slot.lock}`);
        if (kind === 'swap') {
          await sim.control.cmd(`take ${slot.board} ${slot.lock}`);
          if (agentAlive) await agentSees(slot);
          await sim.control.cmd(`put ${slot.board} ${slot.lock}`);
        }
        if (killAt === 'item') {
          await sleep(rng.int(0, 200));
          await kill('item');
          await restart();
        }
        if (agentAlive) await agentSees(slot);

        await sim.control.cmd(`close ${slot.board} ${slot.lock}`);
        if (killAt === 'close') {
          // half of them at once, before the agent can have polled the close; the rest within a few polls
          await sleep(rng.chance(0.5) ? 0 : rng.int(0, 300));
          await kill('close');
          await restart();
        }
        if (killAt === 'dead') await restart();
        // settled: the agent sees the door shut and has handed everything it journalled to the broker
        await agentSees(slot);
        await waitFor(async () => (await agent.state())?.journal.unsent === 0, `cycle ${no}: the agent's journal sent`, 60_000, 50);

        // the ledger
        const phys = await lockState(slot);
        expect(phys.doorOpen, `cycle ${no}: door shut`).toBe(false);
        switch (kind) {
          case 'drop':
            main.dropped++;
            slot.inside = main;
            slot.booked = null;
            break;
          case 'giveup':
            main.gaveUp++;
            break;
          case 'pick':
            main.picked++;
            slot.inside = null;
            break;
          case 'swap':
            main.picked++;
            swap!.dropped++;
            slot.inside = swap;
            break;
        }
        expect(phys.item, `cycle ${no}: item sensor of ${slot.name}`).toBe(slot.inside !== null);
        main.history.push(label());
        swap?.history.push(label(` (swap of ${main.uid})`));
        const effects: CycleRecord['effects'] = kind === 'drop' ? [{ type: 'dropOff', uid: main.uid }] : kind === 'pick' ? [{ type: 'pickUp', uid: main.uid }] : kind === 'swap' ? [{ type: 'pickUp', uid: main.uid }, { type: 'dropOff', uid: swap!.uid }] : [];
        cycles.push({ no, kind, locker: slot.name, shipments: [main.uid, ...(swap ? [swap.uid] : [])], kill: killAt, outcome: 'done', presentations, ms: Date.now() - t0, effects });
        if (kind === 'pick') await book(slot); // the locker is free again: the next booking
      }

      // ---------------------------------------------------------------- drain and judge
      await waitFor(async () => (await agent.state())?.journal.unsent === 0, 'the agent to drain its journal', 60_000, 100);
      await centralCaughtUp();
      await sleep(1000);
      await centralCaughtUp();

      const events = db.all<{ event_id: string; seq: number; type: string; payload: string; outcome: string | null }>(
        "SELECT event_id, seq, type, payload, outcome FROM edge_events WHERE terminal_id = ? AND type IN ('dropOff', 'pickUp') ORDER BY seq",
        TERMINAL.id,
      );
      const reported = new Map<string, { dropOff: number; pickUp: number; outcomes: string[] }>();
      const problems: string[] = [];
      for (const e of events) {
        const uid = (JSON.parse(e.payload) as { shipmentUid: string }).shipmentUid;
        const r = reported.get(uid) ?? { dropOff: 0, pickUp: 0, outcomes: [] };
        r[e.type as 'dropOff' | 'pickUp']++;
        r.outcomes.push(`${e.type}#${e.seq}:${e.outcome}`);
        reported.set(uid, r);
        // the event that reports a door's drop-off / pick-up is the one that moves the shipment; a
        // swap's drop-off is the exception: rule 7 already moved it with the pick-up of the old parcel
        const s = ships.get(uid);
        const want = e.type === 'pickUp' ? /^PickUp:applied:PickedUp$/ : s?.swaps ? /./ : /^DropOff:applied:ReadyForPickup$/;
        if (s && !want.test(e.outcome ?? '')) problems.push(`${e.type} event #${e.seq} of ${uid} not applied by the central service: ${e.outcome} (history: ${s.history.join('; ')})`);
      }

      const tally = { lostDrop: 0, lostPick: 0, dupDrop: 0, dupPick: 0, invented: 0, wrongState: 0 };
      for (const s of ships.values()) {
        const r = reported.get(s.uid) ?? { dropOff: 0, pickUp: 0, outcomes: [] };
        const got = await api.ok('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 1, shipmentUid: s.uid });
        const state = (got.items as { stateCode: string }[])[0]?.stateCode ?? '(not found)';
        const want = expectedStates(s);
        const story = `${s.uid} in ${s.locker} [${s.history.join('; ') || 'no door cycle'}] events [${r.outcomes.join(', ')}]`;
        if (!want.includes(state)) {
          tally.wrongState++;
          problems.push(`state ${state}, the doors say ${want.join(' or ')}: ${story}`);
        }
        if (r.dropOff < s.dropped) {
          tally.lostDrop += s.dropped - r.dropOff;
          problems.push(`drop-off LOST (${s.dropped} physical, ${r.dropOff} reported): ${story}`);
        }
        if (r.pickUp < s.picked) {
          tally.lostPick += s.picked - r.pickUp;
          problems.push(`pick-up LOST (${s.picked} physical, ${r.pickUp} reported): ${story}`);
        }
        if (r.dropOff > s.dropped) {
          if (s.dropped === 0) tally.invented += r.dropOff;
          else tally.dupDrop += r.dropOff - s.dropped;
          problems.push(`drop-off ${s.dropped === 0 ? 'INVENTED' : 'DUPLICATED'} (${s.dropped} physical, ${r.dropOff} reported): ${story}`);
        }
        if (r.pickUp > s.picked) {
          if (s.picked === 0) tally.invented += r.pickUp;
          else tally.dupPick += r.pickUp - s.picked;
          problems.push(`pick-up ${s.picked === 0 ? 'INVENTED' : 'DUPLICATED'} (${s.picked} physical, ${r.pickUp} reported): ${story}`);
        }
      }
      for (const uid of reported.keys()) if (!ships.has(uid)) problems.push(`events for a shipment the test never made: ${uid} ${reported.get(uid)!.outcomes.join(', ')}`);
      for (const s of slots) if (s.stuck) problems.push(`locker ${s.name} unusable: ${s.stuck}`);
      problems.push(...swapRefused);
      const done = cycles.filter((c) => c.outcome === 'done');
      if (cycles.length < CYCLES) problems.push(`only ${cycles.length} of ${CYCLES} door cycles could be run (no usable locker left)`);

      // summary
      const count = <K extends string>(xs: K[]) => xs.reduce((m, x) => ((m[x] = (m[x] ?? 0) + 1), m), {} as Record<string, number>);
      const physical = { dropOffs: 0, pickUps: 0 };
      for (const s of ships.values()) {
        physical.dropOffs += s.dropped;
        physical.pickUps += s.picked;
      }
      // per kill point: door cycles whose drop-off / pick-up never reached the central service
      const lostBy: Record<string, string> = {};
      for (const k of [...KILL_POINTS, null]) {
        const cs = cycles.filter((c) => c.kill === k && c.effects.length > 0);
        const lost = cs.filter((c) => c.effects.some((e) => (reported.get(e.uid)?.[e.type] ?? 0) === 0)).length;
        lostBy[k ?? 'none'] = `${lost}/${cs.length}`;
      }
      const lines = [
        `[crash] seed ${SEED}: ${cycles.length} door cycles (${done.length} done) in ${Math.round((Date.now() - startedAt) / 1000)} s, ${agent.starts - 1} agent restarts`,
        `[crash] cycles by kind: ${JSON.stringify(count(cycles.map((c) => c.kind)))}; outcomes: ${JSON.stringify(count(cycles.map((c) => c.outcome)))}`,
        `[crash] kills per point: ${JSON.stringify(kills)}; cycles without a kill: ${cycles.filter((c) => !c.kill).length}; a door cycle took ${Math.round(cycles.reduce((n, c) => n + c.ms, 0) / Math.max(1, cycles.length))} ms on average, a restart until the agent was ready ${Math.round(restartMs.reduce((n, x) => n + x, 0) / Math.max(1, restartMs.length))} ms`,
        `[crash] physical: ${physical.dropOffs} drop-offs, ${physical.pickUps} pick-ups, ${[...ships.values()].reduce((n, s) => n + s.gaveUp, 0)} given up; reported: ${events.filter((e) => e.type === 'dropOff').length} dropOff, ${events.filter((e) => e.type === 'pickUp').length} pickUp events`,
        `[crash] door cycles that lost their drop-off/pick-up, by kill point: ${JSON.stringify(lostBy)}`,
        `[crash] lost: ${tally.lostDrop} drop-offs, ${tally.lostPick} pick-ups; duplicated: ${tally.dupDrop} drop-offs, ${tally.dupPick} pick-ups; invented: ${tally.invented}; shipments in a state the doors contradict: ${tally.wrongState} of ${ships.size}`,
        ...(problems.length ? [`[crash] ${problems.length} problems (by kill point of the cycles involved: ${JSON.stringify(count(problems.flatMap((p) => [...p.matchAll(/kill: (\w+)/g)].map((m) => m[1]!))))}):`, ...problems.map((p) => `  - ${p}`)] : []),
      ];
      console.log(lines.join('\n'));

      expect(problems, `seed ${SEED}: what the doors did and what the central service holds disagree`).toEqual([]);
      // the run itself must have been what it claims
      expect(cycles.length, 'door cycles run').toBe(CYCLES);
      if (CYCLES >= 100 && KILL_RATE >= 0.2) for (const k of KILL_POINTS) expect(kills[k], `kills at "${k}"`).toBeGreaterThan(0);
      expect(physical.dropOffs, 'physical drop-offs').toBeGreaterThan(0);
      expect(physical.pickUps, 'physical pick-ups').toBeGreaterThan(0);
      if (CYCLES >= 100) expect(cycles.filter((c) => c.kind === 'swap' && c.outcome === 'done').length, 'swaps done').toBeGreaterThan(0);
      if (CYCLES >= 100) expect(cycles.filter((c) => c.kind === 'giveup' && c.outcome === 'done').length, 'drop-offs given up').toBeGreaterThan(0);
      failed = false;
    },
    Math.max(20 * 60_000, CYCLES * 12_000),
  );
});
