// An unlock that no session covers (a central command, a technician's open) is written to the
// store as pending before its frame goes to the board, and cleared with its unlockSent. A process
// that died in between (kill -9, a power cut while the board's answer was awaited) left the lock
// possibly pulsed and nothing in the journal: the restart journals it as sent, uncertain, at the
// time it was begun, and a door of it found open is the unlock's (commanded), not a door that
// opened by itself. Real parts: the simulated boards on socat ptys, the embedded broker, the store.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentStore } from '../src/store';
import { World, waitFor } from './support/world';

describe('an unlock begun by a process that died before journalling it', () => {
  let w: World;
  beforeAll(async () => {
    w = await World.create({}, { startAgent: false });
  });
  afterAll(async () => {
    await w?.close();
  });

  it('is journalled at start as sent (uncertain) before what the doors did, and its door found open counts as commanded', async () => {
    // the store as the dead process left it: locks 1/4 and 1/6 last known closed, a command's
    // unlock of 1/4 and a technician's of 1/6 begun, neither journalled
    const store = new AgentStore(w.config.store.path);
    store.open();
    const known = new Date(Date.now() - 60_000).toISOString();
    store.appendAll([], { locks: [4, 6].map((lock) => ({ bus: 'bus0', board: 1, lock, door: 'closed' as const, item: false, at: known })) });
    expect(store.beginCommand('cmd-died', new Date())).toEqual({ state: 'new' });
    const begun = new Date(Date.now() - 1000);
    store.markUnlockPending({ bus: 'bus0', board: 1, lock: 4 }, { lockerUid: 'locker-1-4', cause: 'command', commandId: 'cmd-died', shipmentUid: null }, begun);
    store.markUnlockPending({ bus: 'bus0', board: 1, lock: 6 }, { lockerUid: 'locker-1-6', cause: 'technician' }, begun);
    store.close();
    // the command's pulse reached the board: its door sprang open while nobody watched; the
    // technician's did not (its door stays shut)
    w.lock(1, 4).openDoor();

    await w.startAgent();
    await waitFor(() => w.events().some((e) => e.type === 'doorOpened' && e.board === 1 && e.lock === 4), 'the door found open');
    const at = (lock: number) => w.events().filter((e) => e.board === 1 && e.lock === lock);
    expect(at(4).map((e) => e.type)).toEqual(['unlockSent', 'doorOpened']);
    expect(at(4)[0]).toMatchObject({ cause: 'command', commandId: 'cmd-died', lockerUid: 'locker-1-4', uncertain: true, unwatched: true, at: begun.toISOString() });
    expect(at(4)[1]).toMatchObject({ commanded: true, unwatched: true });
    expect(at(6).map((e) => e.type)).toEqual(['unlockSent']);
    expect(at(6)[0]).toMatchObject({ cause: 'technician', uncertain: true });
    expect(w.events().some((e) => e.type === 'forcedOpen')).toBe(false);
    // journalled once: nothing pending any more, and a second restart adds nothing
    expect(w.agent.store.pendingUnlocks()).toEqual([]);
    const unlocks = () => w.agent.store.recent(500).filter((r) => r.type === 'unlockSent').length;
    expect(unlocks()).toBe(2);
    await w.agent.stop();
    await w.startAgent();
    expect(unlocks()).toBe(2);
  });
});
