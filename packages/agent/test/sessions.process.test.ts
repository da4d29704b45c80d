// Door sessions survive the agent (issue 11, docs/agent.md "What survives what"): the agent runs
// as a real process (bin/locker-agent.js run) against the simulator on a pty and the embedded
// broker; it is killed with SIGKILL at each point of a door cycle, the doors move while it is dead,
// and the restarted agent reports every drop-off / pick-up exactly once (the same event across
// restarts) and invents none; killed while a central unlock command waits for the board's answer,
// the restarted agent journals that unlock (uncertain) and its door's opening as commanded.
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { World, codeEntry, waitFor } from './support/world';

const BIN = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../bin/locker-agent.js');

function journal(file: string): { seq: number; type: string; fields: any }[] {
  if (!fs.existsSync(file)) return [];
  try {
    const db = new Database(file, { readonly: true, fileMustExist: true });
    try {
      return (db.prepare('SELECT seq, type, fields FROM journal ORDER BY seq').all() as any[]).map((r) => ({ ...r, fields: JSON.parse(r.fields) }));
    } finally {
      db.close();
    }
  } catch {
    return [];
  }
}

type Step = 'put' | 'take' | 'close' | 'none';

interface Case {
  name: string;
  usage: 'DropOff' | 'PickUp';
  /** the lock's item before the code */
  itemBefore: boolean;
  /** the journalled event after which the agent is killed */
  killAfter: 'unlockSent' | 'doorOpened' | 'itemPlaced' | 'itemRemoved' | 'doorClosed';
  /** done at the locker before the kill (the agent watching) */
  before: Step[];
  /** done at the locker while the agent is dead */
  whileDead: Step[];
  /** the access events the terminal must have reported for this shipment, in all */
  expect: { type: 'dropOff' | 'pickUp' | 'accessIncomplete'; reason?: string }[];
  /** a jammed door: the unlock releases the latch, the door does not move */
  jammed?: boolean;
}

const CASES: Case[] = [
  { name: 'drop-off: killed right after the unlock; parcel put and door shut while dead', usage: 'DropOff', itemBefore: false, killAfter: 'unlockSent', before: [], whileDead: ['put', 'close'], expect: [{ type: 'dropOff' }] },
  { name: 'drop-off: killed with the door open; parcel put and door shut while dead', usage: 'DropOff', itemBefore: false, killAfter: 'doorOpened', before: [], whileDead: ['put', 'close'], expect: [{ type: 'dropOff' }] },
  { name: 'drop-off: killed after the parcel went in; door shut while dead', usage: 'DropOff', itemBefore: false, killAfter: 'itemPlaced', before: ['put'], whileDead: ['close'], expect: [{ type: 'dropOff' }] },
  { name: 'drop-off: killed just after the close: reported once, not twice', usage: 'DropOff', itemBefore: false, killAfter: 'doorClosed', before: ['put', 'close'], whileDead: [], expect: [{ type: 'dropOff' }] },
  { name: 'pick-up: killed with the door open; parcel taken and door shut while dead', usage: 'PickUp', itemBefore: true, killAfter: 'doorOpened', before: [], whileDead: ['take', 'close'], expect: [{ type: 'pickUp' }] },
  { name: 'pick-up: killed after the parcel came out; door shut while dead', usage: 'PickUp', itemBefore: true, killAfter: 'itemRemoved', before: ['take'], whileDead: ['close'], expect: [{ type: 'pickUp' }] },
  { name: 'drop-off given up: door shut empty while dead: no drop-off invented', usage: 'DropOff', itemBefore: false, killAfter: 'doorOpened', before: [], whileDead: ['close'], expect: [{ type: 'accessIncomplete', reason: 'closed-empty' }] },
  { name: 'jammed door: killed after the unlock, nothing moved: no drop-off invented', usage: 'DropOff', itemBefore: false, killAfter: 'unlockSent', before: [], whileDead: [], jammed: true, expect: [{ type: 'accessIncomplete', reason: 'not-seen-open' }] },
];

describe('agent process: a kill -9 at any point of a door cycle loses no drop-off or pick-up and invents none', () => {
  let w: World;
  let configFile: string;
  let dbFile: string;
  const children: ChildProcess[] = [];

  const spawnAgent = () => {
    const child = spawn(process.execPath, [BIN, 'run', '--config', configFile], { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, NOTIFY_SOCKET: '' } });
    child.stderr!.resume();
    children.push(child);
    return child;
  };
  const exited = (c: ChildProcess) => new Promise<void>((r) => (c.exitCode !== null || c.signalCode !== null ? r() : c.once('exit', () => r())));

  beforeAll(async () => {
    w = await World.create({}, { startAgent: false });
    configFile = path.join(w.dir, 'agent.json');
    dbFile = w.config.store.path;
    fs.writeFileSync(configFile, JSON.stringify({ ...w.config, log: { level: 'error' } }));
  });
  // a case that failed leaves its agent running: it must not watch the next case's doors
  afterEach(async () => {
    const alive = children.filter((c) => c.exitCode === null && c.signalCode === null);
    for (const c of alive) c.kill('SIGKILL');
    await Promise.all(alive.map(exited));
  });
  afterAll(async () => {
    await w?.close();
  });

  const act = (lock: ReturnType<World['lock']>, s: Step) => {
    if (s === 'put') lock.putItem();
    else if (s === 'take') lock.takeItem();
    else if (s === 'close') lock.closeDoor();
  };

  it.each(CASES.map((c, i) => [c.name, c, i] as const))('%s', async (_name, c, i) => {
    const lockNo = i + 1; // each case on a lock of its own (board 0 locks 1..8)
    const lock = w.lock(0, lockNo);
    if (c.itemBefore) lock.putItem();
    const shipment = `ship-case-${i}`;
    const code = `QR-CASE-${i}`;
    const onlines = () => w.received.filter((r) => r.kind === 'status' && r.body.state === 'online').length;
    const n0 = onlines();
    let agent = spawnAgent();
    await waitFor(() => onlines() > n0, 'agent online', 20_000);
    await w.publish('codes', { v: 1, type: 'snapshot', epoch: `epoch-${i}`, version: 1, at: new Date().toISOString(), codes: [codeEntry(`c-${i}`, c.usage, code, { board: 0, lock: lockNo }, 'Qr', shipment)] });
    await waitFor(() => w.received.some((r) => r.kind === 'status' && r.body.codes?.epoch === `epoch-${i}`), 'codes held', 20_000);
    if (c.jammed) w.sim.bus('bus0').faults.set({ jammedDoor: [{ board: 0, lock: lockNo }] });
    const seqBefore = journal(dbFile).at(-1)?.seq ?? 0;
    const mine = () => journal(dbFile).filter((r) => r.seq > seqBefore);
    await w.sim.scanner('scan0').scan(code);
    if (!c.jammed) await waitFor(() => lock.state.doorOpen, 'door open', 10_000);
    if (c.before.length) await waitFor(() => mine().some((r) => r.type === 'doorOpened'), 'doorOpened journalled', 10_000);
    for (const s of c.before) {
      act(lock, s);
      await new Promise((r) => setTimeout(r, 150));
    }
    await waitFor(() => mine().some((r) => r.type === c.killAfter && r.fields.lock === lockNo), `${c.killAfter} journalled`, 10_000);
    agent.kill('SIGKILL');
    await exited(agent);
    for (const s of c.whileDead) act(lock, s);
    if (c.jammed) w.sim.bus('bus0').faults.set({ jammedDoor: [] });

    agent = spawnAgent();
    const done = (e: any) => (e.type === 'dropOff' || e.type === 'pickUp' || e.type === 'accessIncomplete') && (e.shipmentUid === shipment || e.shipmentUids?.includes(shipment));
    await waitFor(() => w.events().filter(done).length >= c.expect.length, 'the outcome reported', 20_000);
    // the journal is drained and acknowledged, then a while longer: nothing else comes
    await waitFor(() => journal(dbFile).length > 0 && w.events().length >= journal(dbFile).length, 'journal delivered', 20_000);
    await new Promise((r) => setTimeout(r, 500));
    const outcome = w.events().filter(done);
    expect(outcome.map((e) => ({ type: e.type, ...(e.reason ? { reason: e.reason } : {}) }))).toEqual(c.expect);
    if (c.expect[0]!.type !== 'accessIncomplete') expect(outcome[0]).toMatchObject({ shipmentUid: shipment, codeId: `c-${i}`, bus: 'bus0', board: 0, lock: lockNo });
    // a second restart changes nothing: the session is over
    agent.kill('SIGKILL');
    await exited(agent);
    const count = journal(dbFile).length;
    const n1 = onlines();
    agent = spawnAgent();
    await waitFor(() => onlines() > n1, 'restarted', 20_000);
    await new Promise((r) => setTimeout(r, 1500));
    expect(journal(dbFile).slice(count).filter((r) => ['dropOff', 'pickUp', 'accessIncomplete'].includes(r.type))).toEqual([]);
    agent.kill('SIGTERM');
    await exited(agent);
  });
});

describe('agent process: killed while a central unlock command waits for the board', () => {
  let w: World;
  const children: ChildProcess[] = [];
  const exited = (c: ChildProcess) => new Promise<void>((r) => (c.exitCode !== null || c.signalCode !== null ? r() : c.once('exit', () => r())));

  beforeAll(async () => {
    // boards that answer an unlock (generic-8a80), late: the agent waits for the answer after the
    // pulse, and the kill lands between the pulse and the unlock's journal entry
    w = await World.create({}, { startAgent: false, dialect: 'generic-8a80', simBoards: [1, 2], agentBoards: [1, 2], busTiming: { replyTimeoutMs: 5000 } });
  });
  afterAll(async () => {
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    await Promise.all(children.map(exited));
    await w?.close();
  });

  it('the restart journals the unlock (uncertain, at the time it was begun) before the door found open, which counts as commanded', async () => {
    const configFile = path.join(w.dir, 'agent.json');
    const dbFile = w.config.store.path;
    fs.writeFileSync(configFile, JSON.stringify({ ...w.config, log: { level: 'error' } }));
    const spawnAgent = () => {
      const child = spawn(process.execPath, [BIN, 'run', '--config', configFile], { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, NOTIFY_SOCKET: '' } });
      child.stderr!.resume();
      children.push(child);
      return child;
    };
    const lockNo = 3;
    const lock = w.lock(1, lockNo);
    const onlines = () => w.received.filter((r) => r.kind === 'status' && r.body.state === 'online').length;
    const n0 = onlines();
    let agent = spawnAgent();
    await waitFor(() => onlines() > n0, 'agent online', 20_000);
    let pulsed = false;
    const onFrame = (e: { dir: string; meaning: string }) => {
      if (e.dir !== 'rx' || !e.meaning.startsWith('unlock') || pulsed) return;
      pulsed = true;
      agent.kill('SIGKILL');
    };
    w.sim.on('frame', onFrame);
    w.sim.bus('bus0').faults.set({ lateReplyMs: 3000 });
    try {
      await w.publish('commands', { v: 1, type: 'unlock', commandId: 'cmd-killed', lockerUid: 'locker-1-3', bus: 'bus0', board: 1, lock: lockNo, shipmentUid: null, reason: 'api', issuedAt: new Date().toISOString(), expiresAt: new Date(Date.now() + 60_000).toISOString() });
      await waitFor(() => pulsed, 'the unlock frame at the board', 20_000);
      await exited(agent);
    } finally {
      w.sim.off('frame', onFrame);
      w.sim.bus('bus0').faults.set({ lateReplyMs: 0 });
    }
    await waitFor(() => lock.state.doorOpen, 'the door sprang open', 5000);
    // nothing of the unlock in the journal: the process died before writing it
    expect(journal(dbFile).filter((r) => r.type === 'unlockSent')).toEqual([]);

    agent = spawnAgent();
    const mine = () => w.events().filter((e) => e.board === 1 && e.lock === lockNo && (e.type === 'unlockSent' || e.type === 'doorOpened' || e.type === 'forcedOpen'));
    await waitFor(() => mine().some((e) => e.type === 'doorOpened'), 'the door found open reported', 20_000);
    expect(mine().map((e) => e.type)).toEqual(['unlockSent', 'doorOpened']);
    expect(mine()[0]).toMatchObject({ cause: 'command', commandId: 'cmd-killed', uncertain: true, unwatched: true });
    expect(mine()[1]).toMatchObject({ commanded: true, unwatched: true });
    lock.closeDoor();
    agent.kill('SIGTERM');
    await exited(agent);
  });
});
