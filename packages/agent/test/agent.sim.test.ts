// The agent with real parts: the firmware simulator on socat pseudo-terminals (opened with the
// real `serialport`), the central service's embedded MQTT broker (terminal auth + topic ACL) on a
// free port, and a SQLite store. The test plays the central side of docs/edge-protocol.md.
import fs from 'node:fs';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { World, codeEntry, sleep, waitFor } from './support/world';

const types = (evs: any[]) => evs.map((e) => e.type);
const DOOR_EVENTS = ['doorOpened', 'doorClosed', 'itemPlaced', 'itemRemoved', 'jam', 'forcedOpen', 'doorLeftOpen', 'dropOff', 'pickUp', 'unlockSent'];

describe('agent + simulator + embedded broker', () => {
  let w: World;
  beforeAll(async () => {
    w = await World.create();
  });
  afterAll(async () => {
    await w?.close();
  });

  it('announces itself online (retained status with version) and takes a code snapshot', async () => {
    const status = await waitFor(() => w.received.find((r) => r.kind === 'status' && r.body.state === 'online'), 'online status');
    expect(status.body).toMatchObject({ v: 1, terminalId: 'term-a1', codes: { epoch: null, version: 0, count: 0 } });
    await w.snapshot([codeEntry('c-drop', 'DropOff', 'QR-DROP-1', { board: 0, lock: 3 }), codeEntry('c-pin', 'PickUp', '123456', { board: 1, lock: 2 }, 'Code')], 1);
    const st = await waitFor(() => w.received.find((r) => r.kind === 'status' && r.body.codes?.version === 1), 'status with version 1');
    expect(st.body.codes).toEqual({ epoch: 'epoch-1', version: 1, count: 2 });
  });

  it('a scanned drop-off code opens the right lock; closing with an item gives a dropOff event', async () => {
    const before = w.events().length;
    await w.sim.scanner('scan0').scan('QR-DROP-1', { chunks: 3 });
    await waitFor(() => w.lock(0, 3).state.doorOpen, 'lock 0/3 open');
    // no other door moved
    expect(w.lock(0, 1).state.doorOpen || w.lock(0, 2).state.doorOpen || w.lock(1, 2).state.doorOpen).toBe(false);
    await waitFor(() => w.events().some((e) => e.type === 'doorOpened' && e.lock === 3), 'doorOpened event');
    w.lock(0, 3).putItem();
    w.lock(0, 3).closeDoor();
    const drop = await waitFor(() => w.events().find((e) => e.type === 'dropOff'), 'dropOff event');
    expect(drop).toMatchObject({ shipmentUid: 'ship-c-drop', codeId: 'c-drop', lockerUid: 'locker-0-3', bus: 'bus0', board: 0, lock: 3 });
    const evs = w.events().slice(before);
    expect(types(evs)).toEqual(['credentialAccepted', 'unlockSent', 'doorOpened', 'itemPlaced', 'doorClosed', 'dropOff']);
    expect(evs.find((e) => e.type === 'doorClosed')).toMatchObject({ item: true, sessionId: drop.sessionId });
    expect(evs.find((e) => e.type === 'credentialAccepted')).toMatchObject({ source: 'qr', usages: ['DropOff'], codeIds: ['c-drop'] });
    // no code value travels in an event
    expect(JSON.stringify(evs)).not.toContain('QR-DROP-1');
    // seq strictly increasing by one
    const seqs = w.events().map((e) => e.seq);
    expect(seqs).toEqual(seqs.map((_, i) => i + 1));
  });

  it('a keypad PIN for a pick-up opens its lock; taking the item out and closing gives pickUp', async () => {
    w.lock(1, 2).putItem(); // the parcel is already in there
    await waitFor(() => w.agent.buses.bus('bus0').locks(1)[1]!.item === true, 'item seen');
    await w.sim.scanner('scan0').typePin('123456');
    await waitFor(() => w.lock(1, 2).state.doorOpen, 'lock 1/2 open');
    await waitFor(() => w.events().some((e) => e.type === 'doorOpened' && e.board === 1 && e.lock === 2), 'doorOpened 1/2');
    w.lock(1, 2).takeItem();
    w.lock(1, 2).closeDoor();
    const pick = await waitFor(() => w.events().find((e) => e.type === 'pickUp'), 'pickUp event');
    expect(pick).toMatchObject({ shipmentUid: 'ship-c-pin', lock: 2, board: 1 });
  });

  it('an invalid code opens nothing; repeated failures lock the reader out for a while', async () => {
    const rx: string[] = [];
    const onFrame = (e: { dir: string; meaning: string }) => e.dir === 'rx' && e.meaning.startsWith('unlock') && rx.push(e.meaning);
    w.sim.on('frame', onFrame);
    const refusedBefore = w.events().filter((e) => e.type === 'credentialRefused').length;
    for (const bad of ['NOPE-1', 'NOPE-2', 'NOPE-3']) await w.sim.scanner('scan0').scan(bad);
    await waitFor(() => w.events().filter((e) => e.type === 'credentialRefused').length === refusedBefore + 3, 'three refusals');
    // now even the valid PIN is refused (THROTTLED) until the lock-out ends
    await w.snapshot([codeEntry('c-drop2', 'DropOff', 'QR-DROP-2', { board: 0, lock: 4 }), codeEntry('c-drop3', 'DropOff', 'QR-DROP-3', { board: 0, lock: 4 })], 2);
    await w.sim.scanner('scan0').scan('QR-DROP-3');
    const thr = await waitFor(() => w.events().find((e) => e.type === 'credentialRefused' && e.reason === 'THROTTLED'), 'THROTTLED');
    expect(thr).toMatchObject({ source: 'qr', reader: 'scan0' });
    expect(w.agent.state().throttled.map((t) => t.reader)).toEqual(['scan0']);
    await sleep(150);
    expect(rx).toEqual([]);
    expect(w.lock(0, 4).state.doorOpen).toBe(false);
    expect(w.events().filter((e) => e.type === 'credentialRefused').map((e) => e.reason).slice(-4)).toEqual(['UNKNOWN_CODE', 'UNKNOWN_CODE', 'UNKNOWN_CODE', 'THROTTLED']);
    // after the lock-out the valid code works again
    await waitFor(() => w.agent.state().throttled.length === 0, 'lock-out over', 5000);
    await w.sim.scanner('scan0').scan('QR-DROP-2');
    await waitFor(() => w.lock(0, 4).state.doorOpen, 'lock 0/4 open');
    expect(rx).toEqual(['unlock board 0 lock 4']);
    w.sim.off('frame', onFrame);
    await waitFor(() => w.events().some((e) => e.type === 'doorOpened' && e.board === 0 && e.lock === 4), 'doorOpened 0/4');
    w.lock(0, 4).closeDoor();
    await waitFor(() => w.events().some((e) => e.type === 'accessIncomplete' && e.reason === 'closed-empty'), 'closed empty');
  });

  it('code deltas: applied in order, repeats ignored, a gap asks for a snapshot on up/sync', async () => {
    const now = new Date().toISOString();
    await w.publish('codes', { v: 1, type: 'delta', epoch: 'epoch-1', baseVersion: 2, version: 3, at: now, upserts: [codeEntry('c-5', 'DropOff', 'QR-5', { board: 0, lock: 5 })], revoke: ['c-drop2', 'c-drop3'] });
    await waitFor(() => w.agent.state().codes.version === 3, 'version 3');
    expect(w.agent.state().codes.count).toBe(1);
    await w.publish('codes', { v: 1, type: 'delta', epoch: 'epoch-1', baseVersion: 2, version: 3, at: now, upserts: [], revoke: ['c-5'] }); // repeat: ignored
    await w.publish('codes', { v: 1, type: 'delta', epoch: 'epoch-1', baseVersion: 7, version: 8, at: now, upserts: [], revoke: ['c-5'] }); // gap
    const sync = await waitFor(() => w.received.find((r) => r.kind === 'sync'), 'sync request');
    expect(sync.body).toMatchObject({ v: 1, want: 'snapshot', reason: 'gap', have: { epoch: 'epoch-1', version: 3 } });
    expect(w.agent.state().codes).toMatchObject({ version: 3, count: 1 });
  });

  it('a code push the store cannot take (disk full) is not applied and does not end the agent; the next push is taken', async () => {
    const held = w.agent.state().codes;
    const now = new Date().toISOString();
    const errors: unknown[] = [];
    const onError = (e: unknown) => errors.push(e);
    process.on('uncaughtException', onError);
    const full = () => {
      throw new Error('SQLITE_FULL: database or disk is full');
    };
    const replace = vi.spyOn(w.agent.store, 'replaceCodes').mockImplementation(full);
    const delta = vi.spyOn(w.agent.store, 'applyDelta').mockImplementation(full);
    try {
      await w.publish('codes', { v: 1, type: 'snapshot', epoch: 'epoch-full', version: 1, at: now, codes: [codeEntry('c-full', 'DropOff', 'QR-FULL', { board: 0, lock: 6 })] });
      await w.publish('codes', { v: 1, type: 'delta', epoch: held.epoch, baseVersion: held.version, version: held.version + 1, at: now, upserts: [codeEntry('c-full2', 'DropOff', 'QR-FULL2', { board: 0, lock: 6 })], revoke: [] });
      await waitFor(() => replace.mock.calls.length === 1 && delta.mock.calls.length === 1, 'both pushes tried');
      await sleep(200);
    } finally {
      replace.mockRestore();
      delta.mockRestore();
      process.off('uncaughtException', onError);
    }
    expect(errors).toEqual([]);
    // the codes held are unchanged, and the agent goes on: it still answers a credential
    expect(w.agent.state().codes).toMatchObject({ epoch: held.epoch, version: held.version });
    expect(await w.agent.presentCredential({ source: 'qr', value: 'QR-FULL', reader: 'scan0' })).toMatchObject({ accepted: false });
    // writable again: the same snapshot is taken
    await w.publish('codes', { v: 1, type: 'snapshot', epoch: 'epoch-full', version: 1, at: now, codes: [codeEntry('c-full', 'DropOff', 'QR-FULL', { board: 0, lock: 6 })] });
    await waitFor(() => w.agent.state().codes.epoch === 'epoch-full', 'the snapshot taken');
    // the codes the later tests expect, back (a new epoch replaces whatever its version)
    await w.snapshot([codeEntry('c-5', 'DropOff', 'QR-5', { board: 0, lock: 5 })], held.version, held.epoch!);
    await waitFor(() => w.agent.state().codes.epoch === held.epoch && w.agent.state().codes.version === held.version, 'the codes held before');
  });

  it('garbage on MQTT and on the RS485 line does not crash it, and journals no door event from it', async () => {
    const seqBefore = w.agent.state().journal.lastSeq;
    await w.publish('codes', 'not json at all');
    await w.publish('codes', { v: 1, type: 'snapshot', epoch: 'x' });
    await w.publish('commands', Buffer.from([0xff, 0x00, 0x13]).toString('latin1'));
    await w.publish('commands', { v: 1, type: 'unlock', commandId: 'bad-1', bus: 'bus0' });
    const bad = await waitFor(() => w.received.find((r) => r.kind === 'acks' && r.body.commandId === 'bad-1'), 'BAD_COMMAND ack');
    expect(bad.body).toMatchObject({ ok: false, error: 'BAD_COMMAND' });
    const sb = w.sim.bus('bus0');
    sb.faults.set({ garbageBeforeReply: true, echo: true });
    await sleep(300);
    sb.faults.set({ garbageBeforeReply: false, badChecksum: true });
    await sleep(300);
    sb.faults.clear();
    await waitFor(() => w.agent.buses.bus('bus0').boardOnline(0) === true, 'board online');
    await sleep(200); // a few clean polls after the garbage
    expect(w.agent.state().codes.version).toBe(3);
    // nothing moved, so the garbage must not have produced a single door event (board on/offline may)
    const fromGarbage = w.agent.store.recent(500).filter((r) => r.seq > seqBefore && DOOR_EVENTS.includes(r.type));
    expect(fromGarbage).toEqual([]);
    expect([0, 1].flatMap((b) => w.agent.buses.bus('bus0').locks(b)).filter((l) => l.door !== 'closed')).toEqual([]);
    // still working: a hand-opened door is seen and reported as forced
    w.lock(1, 5).openDoor();
    await waitFor(() => w.events().some((e) => e.type === 'forcedOpen' && e.board === 1 && e.lock === 5), 'forcedOpen');
    w.lock(1, 5).closeDoor();
  });

  it('a remote unlock runs at most once and is acknowledged', async () => {
    const rx: string[] = [];
    const onFrame = (e: { dir: string; meaning: string }) => e.dir === 'rx' && e.meaning.startsWith('unlock') && rx.push(e.meaning);
    w.sim.on('frame', onFrame);
    const cmd = { v: 1, type: 'unlock', commandId: 'cmd-1', lockerUid: 'locker-1-6', bus: 'bus0', board: 1, lock: 6, shipmentUid: null, reason: 'api', issuedAt: new Date().toISOString(), expiresAt: new Date(Date.now() + 10_000).toISOString() };
    await w.publish('commands', cmd);
    const ack = await waitFor(() => w.received.find((r) => r.kind === 'acks' && r.body.commandId === 'cmd-1'), 'ack');
    expect(ack.body).toMatchObject({ ok: true });
    await waitFor(() => w.lock(1, 6).state.doorOpen, 'lock 1/6 open');
    w.lock(1, 6).closeDoor();
    await w.publish('commands', cmd); // delivered again
    const dup = await waitFor(() => w.received.find((r) => r.kind === 'acks' && r.body.commandId === 'cmd-1' && r.body.duplicate), 'duplicate ack');
    expect(dup.body).toMatchObject({ ok: true, duplicate: true });
    await w.publish('commands', { ...cmd, commandId: 'cmd-old', expiresAt: new Date(Date.now() - 1000).toISOString() });
    const old = await waitFor(() => w.received.find((r) => r.kind === 'acks' && r.body.commandId === 'cmd-old'), 'expired ack');
    expect(old.body).toMatchObject({ ok: false, error: 'EXPIRED' });
    await w.publish('commands', { ...cmd, commandId: 'cmd-nobus', bus: 'bus9' });
    expect((await waitFor(() => w.received.find((r) => r.kind === 'acks' && r.body.commandId === 'cmd-nobus'), 'unknown lock ack')).body).toMatchObject({ ok: false, error: 'UNKNOWN_LOCK' });
    await sleep(100);
    w.sim.off('frame', onFrame);
    expect(rx).toEqual(['unlock board 1 lock 6']);
    expect(w.events().filter((e) => e.type === 'unlockSent' && e.cause === 'command')).toHaveLength(1);
  });

  it('broker down: events are journalled; broker back: all delivered in order, none lost', async () => {
    const delivered = w.events().length;
    const lastSeq = w.agent.state().journal.lastSeq;
    await w.stopBroker();
    await waitFor(() => !w.agent.state().mqtt.connected, 'agent sees the broker gone');
    // door activity while the broker is away
    for (const lock of [7, 8, 9]) {
      w.lock(0, lock).openDoor();
      await waitFor(() => w.agent.state().journal.lastSeq >= lastSeq + (lock - 6) * 2, `journal grows (${lock})`);
    }
    for (const lock of [7, 8, 9]) w.lock(0, lock).closeDoor();
    await waitFor(() => w.agent.state().journal.unsent >= 9, 'nine unsent events');
    const unsent = w.agent.state().journal.unsent;
    await w.startBroker(w.brokerPort);
    await waitFor(() => w.agent.state().journal.unsent === 0, 'all sent after the broker is back', 15_000);
    // every event the journal holds arrives (the journal may have grown after `unsent` was read:
    // a door bounce, a board poll), and each exactly once. After a reconnect, what was in flight
    // on the old connection may arrive before the resend of an older unacknowledged event: the
    // central service applies by seq and holds an early one (docs/edge-protocol.md, "Order and
    // acknowledgement")
    const journalled = w.agent.state().journal.lastSeq;
    expect(journalled).toBeGreaterThanOrEqual(delivered + unsent);
    await waitFor(() => w.events().length >= journalled, 'every journalled event delivered');
    const evs = w.events();
    expect(evs.map((e) => e.seq).sort((a, b) => a - b)).toEqual(Array.from({ length: journalled }, (_, i) => i + 1));
    expect(evs.filter((e) => e.seq > lastSeq).filter((e) => e.type === 'doorClosed')).toHaveLength(3);
  });

  it('a journal that cannot be written: the code is refused (JOURNAL_UNAVAILABLE), no lock pulsed, the watchdog check fails', async () => {
    await w.snapshot([codeEntry('c-j', 'DropOff', 'QR-JOURNAL', { board: 1, lock: 8 })], 1, 'epoch-j');
    const rx: string[] = [];
    const onFrame = (e: { dir: string; meaning: string }) => e.dir === 'rx' && e.meaning.startsWith('unlock') && rx.push(e.meaning);
    w.sim.on('frame', onFrame);
    expect(w.agent.healthy()).toBe(true);
    const append = vi.spyOn(w.agent.store, 'appendAll').mockImplementation(() => {
      throw new Error('SQLITE_READONLY: attempt to write a readonly database');
    });
    try {
      const r = await w.agent.presentCredential({ source: 'qr', value: 'QR-JOURNAL', reader: 'scan0' });
      expect(r).toMatchObject({ accepted: false, reason: 'JOURNAL_UNAVAILABLE' });
      await sleep(300);
      expect(rx).toEqual([]);
      expect(w.lock(1, 8).state.doorOpen).toBe(false);
      // the store still reads, but the failed write keeps the watchdog from being pinged
      expect(w.agent.state().journal.lastSeq).toBeGreaterThan(0);
      expect(w.agent.healthy()).toBe(false);
      // a remote unlock cannot be begun in the store: not executed, not acknowledged, no crash
      const begin = vi.spyOn(w.agent.store, 'beginCommand').mockImplementation(() => {
        throw new Error('SQLITE_READONLY: attempt to write a readonly database');
      });
      try {
        await w.publish('commands', { v: 1, type: 'unlock', commandId: 'cmd-ro', lockerUid: 'locker-1-8', bus: 'bus0', board: 1, lock: 8, shipmentUid: null, reason: 'api', issuedAt: new Date().toISOString(), expiresAt: new Date(Date.now() + 10_000).toISOString() });
        await sleep(300);
        expect(begin).toHaveBeenCalled();
        expect(rx).toEqual([]);
        expect(w.received.some((r) => r.kind === 'acks' && r.body.commandId === 'cmd-ro')).toBe(false);
      } finally {
        begin.mockRestore();
      }
      // the technician's open on the diagnostics page: refused too, nothing pulsed
      const meta = vi.spyOn(w.agent.store, 'markUnlockPending').mockImplementation(() => {
        throw new Error('SQLITE_READONLY: attempt to write a readonly database');
      });
      try {
        expect(await w.agent.technicianOpen({ bus: 'bus0', board: 1, lock: 8 })).toMatchObject({ ok: false, error: 'JOURNAL_UNAVAILABLE' });
        await sleep(300);
        expect(rx).toEqual([]);
        expect(w.lock(1, 8).state.doorOpen).toBe(false);
      } finally {
        meta.mockRestore();
      }
    } finally {
      append.mockRestore();
      w.sim.off('frame', onFrame);
    }
    // writable again: the same code opens the lock, and the next successful write makes it healthy
    const ok = await w.agent.presentCredential({ source: 'qr', value: 'QR-JOURNAL', reader: 'scan0' });
    expect(ok).toMatchObject({ accepted: true, lockerUid: 'locker-1-8' });
    expect(w.agent.healthy()).toBe(true);
    await waitFor(() => w.lock(1, 8).state.doorOpen, 'lock 1/8 open');
    w.lock(1, 8).closeDoor();
    await waitFor(() => w.events().some((e) => e.type === 'accessIncomplete' && e.lockerUid === 'locker-1-8'), 'access over');
  });

  it('a vanished serial port: reported, survived, codes refused with LOCK_UNAVAILABLE meanwhile, and the lock works again when it is back', async () => {
    const sb = w.sim.bus('bus0');
    await w.snapshot([codeEntry('c-gone', 'DropOff', 'QR-GONE', { board: 0, lock: 11 })], 1, 'epoch-gone');
    await sb.unplug();
    await waitFor(() => w.events().some((e) => e.type === 'busPortLost'), 'busPortLost');
    expect(w.agent.state().buses[0]!.portOpen).toBe(false);
    // a valid code while the port is gone: refused with LOCK_UNAVAILABLE (docs/agent.md), journalled
    await w.sim.scanner('scan0').scan('QR-GONE');
    const refused = await waitFor(() => w.events().find((e) => e.type === 'credentialRefused' && e.reason === 'LOCK_UNAVAILABLE'), 'LOCK_UNAVAILABLE');
    expect(refused).toMatchObject({ source: 'qr', reader: 'scan0', error: 'BUS_UNAVAILABLE' });
    expect(w.events().some((e) => e.type === 'unlockSent' && e.lockerUid === 'locker-0-11')).toBe(false);
    await sb.replug();
    await waitFor(() => w.events().some((e) => e.type === 'busPortRestored'), 'busPortRestored', 10_000);
    await waitFor(() => w.agent.buses.bus('bus0').boardOnline(0) === true, 'board online again');
    await w.snapshot([codeEntry('c-after', 'DropOff', 'QR-AFTER', { board: 0, lock: 10 })], 10, 'epoch-2');
    await w.sim.scanner('scan0').scan('QR-AFTER');
    await waitFor(() => w.lock(0, 10).state.doorOpen, 'lock 0/10 open after replug');
    w.lock(0, 10).closeDoor();
  });

  it('stop(): bus events that come while it shuts down are still journalled', async () => {
    const file = w.config.store.path;
    const stopping = w.agent.stop();
    // a door event reported by the bus after stop() began, before the buses stopped
    w.agent.buses.emit('forcedOpen', { type: 'forcedOpen', bus: 'bus0', board: 1, lock: 12, reason: 'during-shutdown', at: Date.now() } as never);
    await stopping;
    expect(fs.existsSync(file)).toBe(true);
    const db = new Database(file, { readonly: true });
    try {
      const rows = db.prepare("SELECT type, fields FROM journal WHERE type = 'forcedOpen'").all() as { type: string; fields: string }[];
      expect(rows.map((r) => JSON.parse(r.fields)).filter((f) => f.lock === 12 && f.reason === 'during-shutdown')).toHaveLength(1);
    } finally {
      db.close();
    }
  });
});
