// down/lockers on the terminal (docs/edge-protocol.md): the agent subscribes to it, stores the
// list in its SQLite store, answers store.lockerInfo(bus, board, lock) from it (the technician's
// page reads that), shows the version held in its status, keeps the newest list (a late one of the
// same epoch is ignored, a new epoch replaces), and drops a malformed message without touching
// what it holds. A real agent on the embedded broker; the test plays the central side.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { World, sleep, waitFor } from './support/world';
import { decideLockers } from '../src/lockers';

const size = (code: string | null) => ({ code, width: 40, height: 10, length: 60 });
const list = (epoch: string, version: number, lockers: unknown[]) => ({ v: 1, epoch, version, at: new Date().toISOString(), lockers });
const l1 = { uid: 'locker-1', name: 'CS-01', size: size('S'), serviceState: 'active', bus: 'bus0', board: 0, lock: 1, shipmentState: null };
const l2 = { uid: 'locker-2', name: 'CS-02', size: size(null), serviceState: 'outOfService', bus: 'bus0', board: 1, lock: 2, shipmentState: 'ReadyForPickup' };

describe('decideLockers (pure)', () => {
  it('keeps the newest list of an epoch; another epoch replaces', () => {
    expect(decideLockers({ epoch: null, version: 0 }, { epoch: 'e', version: 1 })).toEqual({ action: 'replace' });
    expect(decideLockers({ epoch: 'e', version: 3 }, { epoch: 'e', version: 4 })).toEqual({ action: 'replace' });
    expect(decideLockers({ epoch: 'e', version: 3 }, { epoch: 'e', version: 3 })).toEqual({ action: 'ignore', why: 'same' });
    expect(decideLockers({ epoch: 'e', version: 3 }, { epoch: 'e', version: 2 })).toEqual({ action: 'ignore', why: 'stale' });
    expect(decideLockers({ epoch: 'e', version: 3 }, { epoch: 'f', version: 1 })).toEqual({ action: 'replace' });
  });
});

describe('agent takes the locker list', () => {
  let w: World;
  beforeAll(async () => {
    w = await World.create();
  });
  afterAll(async () => {
    await w?.close();
  });

  it('announces the list it holds (none) in its status', async () => {
    const st = await waitFor(() => w.received.find((r) => r.kind === 'status' && r.body.state === 'online'), 'online status');
    expect(st.body.lockers).toEqual({ epoch: null, version: 0 });
    expect(w.agent.store.lockerInfo('bus0', 0, 1)).toBeNull();
  });

  it('stores a pushed list and lockerInfo answers per lock position; the status shows the version', async () => {
    await w.publish('lockers', list('epoch-1', 1, [l1, l2]));
    await waitFor(() => w.agent.store.lockerInfo('bus0', 0, 1), 'locker info');
    expect(w.agent.store.lockerInfo('bus0', 0, 1)).toEqual({ uid: 'locker-1', name: 'CS-01', size: size('S'), serviceState: 'active', shipmentState: null });
    expect(w.agent.store.lockerInfo('bus0', 1, 2)).toEqual({ uid: 'locker-2', name: 'CS-02', size: size(null), serviceState: 'outOfService', shipmentState: 'ReadyForPickup' });
    expect(w.agent.store.lockerInfo('bus0', 1, 3)).toBeNull();
    await waitFor(() => w.received.find((r) => r.kind === 'status' && r.body.lockers?.version === 1 && r.body.lockers.epoch === 'epoch-1'), 'status with lockers version 1');
  });

  it('a newer list replaces (a shipment state changed, a locker gone); a late older one is ignored', async () => {
    await w.publish('lockers', list('epoch-1', 2, [{ ...l1, shipmentState: 'ReadyForDropoff' }]));
    await waitFor(() => w.agent.store.lockerInfo('bus0', 0, 1)?.shipmentState === 'ReadyForDropoff', 'version 2');
    expect(w.agent.store.lockerInfo('bus0', 1, 2)).toBeNull();
    await w.publish('lockers', list('epoch-1', 1, [l1, l2])); // late redelivery
    await sleep(200);
    expect(w.agent.store.lockersMeta()).toMatchObject({ epoch: 'epoch-1', version: 2, count: 1 });
    expect(w.agent.store.lockerInfo('bus0', 0, 1)?.shipmentState).toBe('ReadyForDropoff');
  });

  it('a malformed list is dropped and the held one kept; the agent keeps working', async () => {
    await w.publish('lockers', 'not json');
    await w.publish('lockers', list('epoch-1', 3, [{ ...l1, serviceState: 'exploded' }]));
    await w.publish('lockers', list('epoch-1', 4, [{ ...l1, name: 'bad\u0000name' }]));
    await w.publish('lockers', { v: 1, epoch: 'epoch-1', version: 5, lockers: [l1] }); // no `at`
    await sleep(300);
    expect(w.agent.store.lockersMeta()).toMatchObject({ epoch: 'epoch-1', version: 2, count: 1 });
    expect(w.agent.store.lockerInfo('bus0', 0, 1)).toMatchObject({ name: 'CS-01', serviceState: 'active' });
    await w.publish('lockers', list('epoch-1', 6, [{ ...l1, name: 'CS-01b' }]));
    await waitFor(() => w.agent.store.lockerInfo('bus0', 0, 1)?.name === 'CS-01b', 'a good list after the bad ones');
    expect(w.agent.state().mqtt.connected).toBe(true);
  });
});
