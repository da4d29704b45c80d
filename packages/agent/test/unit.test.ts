// Unit tests of the agent's pure parts and its SQLite store: code-sync decisions, access
// sessions (drop-off / pick-up rules of product.md), journal order and at-most-once commands,
// configuration errors that name the key.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { hashCode, type CodeEntry } from '@locker/common';
import { decideCodes } from '../src/codes';
import { closeOutcome, journalInput, sessionStep, type Session, type Sessions } from '../src/session';
import { AgentStore } from '../src/store';
import { AgentConfigError, loadAgentConfig } from '../src/config';

const at = { bus: 'bus0', board: 0, lock: 3 };
const code = (id: string, usage: 'DropOff' | 'PickUp', value: string, shipmentUid = `s-${id}`): CodeEntry => ({
  id,
  shipmentUid,
  usage,
  type: 'Qr',
  hash: hashCode(value),
  locker: { uid: 'locker-3', ...at },
});

describe('code sync decisions', () => {
  const held = { epoch: 'e1', version: 5 };
  const delta = (baseVersion: number, version: number, epoch = 'e1') => ({ v: 1 as const, type: 'delta' as const, epoch, baseVersion, version, at: 'x', upserts: [], revoke: [] });
  it('a snapshot always replaces', () => expect(decideCodes(held, { v: 1, type: 'snapshot', epoch: 'e2', version: 1, at: 'x', codes: [] })).toEqual({ action: 'replace' }));
  it('the next delta applies', () => expect(decideCodes(held, delta(5, 6))).toEqual({ action: 'apply' }));
  it('an old or repeated delta is ignored', () => {
    expect(decideCodes(held, delta(4, 5))).toEqual({ action: 'ignore', why: 'already-applied' });
    expect(decideCodes(held, delta(1, 2))).toEqual({ action: 'ignore', why: 'already-applied' });
  });
  it('a gap asks for a snapshot', () => expect(decideCodes(held, delta(6, 7))).toEqual({ action: 'requestSnapshot', reason: 'gap' }));
  it('another epoch asks for a snapshot', () => expect(decideCodes(held, delta(5, 6, 'e9'))).toEqual({ action: 'requestSnapshot', reason: 'epoch' }));
  it('an empty cache cannot take a delta from another epoch', () => expect(decideCodes({ epoch: null, version: 0 }, delta(0, 1))).toEqual({ action: 'requestSnapshot', reason: 'epoch' }));
});

describe('access sessions', () => {
  const start = (codes: Session['codes'], sessions: Sessions = {}, doorOpen = false) =>
    sessionStep(sessions, { kind: 'start', session: { sessionId: 'sess', lockerUid: 'locker-3', at, codes }, doorOpen });
  const drop = { id: 'c1', usage: 'DropOff' as const, shipmentUid: 'ship-1' };
  const pick = { id: 'c2', usage: 'PickUp' as const, shipmentUid: 'ship-0' };

  it('drop-off: opened with a drop-off code, closed with an item', () => {
    let s = start([drop]).sessions;
    s = sessionStep(s, { kind: 'doorOpened', at }).sessions;
    const r = sessionStep(s, { kind: 'doorClosed', at, item: true });
    expect(r.effects).toEqual([{ type: 'dropOff', fields: { sessionId: 'sess', shipmentUid: 'ship-1', codeId: 'c1', lockerUid: 'locker-3', item: true, ...at } }]);
    expect(r.sessions).toEqual({});
  });
  it('drop-off code closed empty is not a drop-off', () => {
    let s = start([drop]).sessions;
    s = sessionStep(s, { kind: 'doorOpened', at }).sessions;
    const r = sessionStep(s, { kind: 'doorClosed', at, item: false });
    expect(r.effects.map((e) => [e.type, (e.fields as any).reason])).toEqual([['accessIncomplete', 'closed-empty']]);
  });
  it('pick-up: opened with a pick-up code, closed empty; with the item left in: incomplete', () => {
    const opened = sessionStep(start([pick]).sessions, { kind: 'doorOpened', at }).sessions;
    expect(sessionStep(opened, { kind: 'doorClosed', at, item: false }).effects.map((e) => e.type)).toEqual(['pickUp']);
    expect(sessionStep(opened, { kind: 'doorClosed', at, item: true }).effects.map((e) => [e.type, (e.fields as any).reason])).toEqual([['accessIncomplete', 'item-still-present']]);
  });
  it('a swap (shared code) closed with the new item: pick-up first, then drop-off', () => {
    expect(closeOutcome({ sessionId: 's', lockerUid: 'l', at, codes: [drop, pick], opened: true, sawItemRemoved: true }, true).map((e) => [e.type, (e.fields as any).shipmentUid])).toEqual([
      ['pickUp', 'ship-0'],
      ['dropOff', 'ship-1'],
    ]);
  });
  it('a swap whose watched door never showed the old parcel out swapped nothing: no pick-up or drop-off invented', () => {
    const begin = sessionStep({}, { kind: 'start', session: { sessionId: 'sw', lockerUid: 'locker-3', at, codes: [drop, pick], itemAtStart: true } }).sessions;
    const opened = sessionStep(begin, { kind: 'doorOpened', at }).sessions;
    expect(sessionStep(opened, { kind: 'doorClosed', at, item: true }).effects.map((e) => [e.type, (e.fields as any).reason])).toEqual([['accessIncomplete', 'item-still-present']]);
    // seen out, then a new one in: the swap
    const out = sessionStep(opened, { kind: 'itemRemoved', at }).sessions;
    expect(sessionStep(out, { kind: 'doorClosed', at, item: true }).effects.map((e) => e.type)).toEqual(['pickUp', 'dropOff']);
    // its board went offline meanwhile: the sensor may have missed it, the codes decide
    const blind = sessionStep(opened, { kind: 'blindBoard', bus: at.bus, board: at.board }).sessions;
    expect(Object.values(blind)[0]!.blind).toBe(true);
    expect(sessionStep(blind, { kind: 'doorClosed', at, item: true }).effects.map((e) => e.type)).toEqual(['pickUp', 'dropOff']);
    // another board going offline changes nothing here
    expect(sessionStep(opened, { kind: 'blindBoard', bus: at.bus, board: at.board + 1 }).sessions).toBe(opened);
    // closed after a gap (the agent dead) with the door seen open before: the codes decide
    expect(sessionStep(opened, { kind: 'unobserved', at, item: true }).effects.map((e) => e.type)).toEqual(['pickUp', 'dropOff']);
  });
  it('the replay maps a boardOffline to the blindness of that board', () => {
    expect(journalInput('boardOffline', { bus: 'bus0', board: 2, error: 'NO_REPLY' })).toEqual({ kind: 'blindBoard', bus: 'bus0', board: 2 });
  });
  it('no item sensor: the code decides', () => {
    expect(closeOutcome({ sessionId: 's', lockerUid: 'l', at, codes: [drop], opened: true, sawItemRemoved: false }, null).map((e) => e.type)).toEqual(['dropOff']);
  });
  it('a close without an opening seen ends nothing; a door already open counts as opened', () => {
    const s = start([drop]).sessions;
    expect(sessionStep(s, { kind: 'doorClosed', at, item: true }).effects).toEqual([]);
    const open = start([drop], {}, true).sessions;
    expect(sessionStep(open, { kind: 'doorClosed', at, item: true }).effects.map((e) => e.type)).toEqual(['dropOff']);
  });
  it('a jam ends the session as door-did-not-open; a new code at the same lock supersedes', () => {
    const s = start([drop]).sessions;
    expect(sessionStep(s, { kind: 'jam', at }).effects.map((e) => (e.fields as any).reason)).toEqual(['door-did-not-open']);
    expect(start([pick], s).effects.map((e) => (e.fields as any).reason)).toEqual(['superseded']);
  });
});

describe('agent store', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
  });
  const open = () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'agent-store-'));
    dirs.push(dir);
    const file = path.join(dir, 'agent.db');
    const s = new AgentStore(file);
    s.open();
    return { s, file };
  };

  it('journal: seq 1..n without gaps, unsent in order, survives reopening', () => {
    const { s, file } = open();
    const rows = [1, 2, 3].map((i) => s.append('doorOpened', { i }, new Date()));
    expect(rows.map((r) => r.seq)).toEqual([1, 2, 3]);
    s.markSent(1, new Date());
    s.close();
    const again = new AgentStore(file);
    again.open();
    expect(again.unsentCount()).toBe(2);
    expect(again.nextUnsent()?.seq).toBe(2);
    expect(again.nextUnsent(2)?.fields).toEqual({ i: 3 });
    expect(again.lastSeq()).toBe(3);
    expect(again.append('doorClosed', {}, new Date()).seq).toBe(4);
    again.close();
  });

  it('codes: snapshot replaces, delta upserts and revokes, lookup by hash', () => {
    const { s } = open();
    s.replaceCodes('e1', 3, [code('a', 'DropOff', 'AAA'), code('b', 'PickUp', 'BBB')]);
    expect(s.codesMeta()).toEqual({ epoch: 'e1', version: 3, count: 2 });
    s.applyDelta(4, [code('c', 'DropOff', 'CCC'), { ...code('a', 'DropOff', 'AAA2') }], ['b']);
    expect(s.codesMeta()).toEqual({ epoch: 'e1', version: 4, count: 2 });
    expect(s.findCodes(hashCode('AAA'))).toEqual([]);
    expect(s.findCodes(hashCode('AAA2')).map((c) => c.id)).toEqual(['a']);
    expect(s.findCodes(hashCode('BBB'))).toEqual([]);
    expect(s.lockerAt('bus0', 0, 3)).toBe('locker-3');
    s.close();
  });

  it('commands: begun once; a repeat sees the stored outcome or that it was begun', () => {
    const { s } = open();
    expect(s.beginCommand('cmd-1', new Date())).toEqual({ state: 'new' });
    expect(s.beginCommand('cmd-1', new Date())).toEqual({ state: 'started' });
    s.finishCommand('cmd-1', { ok: true });
    expect(s.beginCommand('cmd-1', new Date())).toEqual({ state: 'done', ack: { ok: true } });
    s.close();
  });
});

describe('agent config', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
  });
  const file = (text: string, name = 'agent.yaml') => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'agent-cfg-'));
    dirs.push(dir);
    fs.writeFileSync(path.join(dir, name), text);
    return path.join(dir, name);
  };

  it('defaults, file, then environment', () => {
    const f = file('terminal: { id: term-a1, secret: s3cret }\nbuses:\n  - { name: bus0, port: /dev/ttyUSB0, dialect: kerong-cu16, boards: [{ address: 0 }] }\n');
    const c = loadAgentConfig({ file: f, env: { LOCKER_AGENT_MQTT_URL: 'mqtt://central:1883', LOCKER_AGENT_DIAGNOSTICS_PORT: '9001' } });
    expect(c.mqtt.url).toBe('mqtt://central:1883');
    expect(c.diagnostics.port).toBe(9001);
    expect(c.buses[0]).toMatchObject({ name: 'bus0', polarity: 'closed-high', pollMs: 500 });
    expect(c.store.path).toBe('./data/agent.db');
  });

  it('fails fast naming the bad key', () => {
    const f = file('terminal: { id: t, secret: s }\nbuses:\n  - { name: bus0, port: /dev/x, dialect: kerong-99, boards: [{ address: 0 }] }\n');
    expect(() => loadAgentConfig({ file: f, env: {} })).toThrow(/setting buses\.0\.dialect/);
    expect(() => loadAgentConfig({ file: file('terminal: { id: t, secret: s }\nmqtt: { urll: x }\n'), env: {} })).toThrow(/unknown setting mqtt\.urll/);
    expect(() => loadAgentConfig({ file: file('terminal: { id: t }\n'), env: {} })).toThrow(/setting terminal\.secret/);
    expect(() => loadAgentConfig({ file: file('terminal: { id: t, secret: s }\n'), env: { LOCKER_AGENT_DIAGNOSTICS_PORT: 'eighty' } })).toThrow(/diagnostics\.port .*LOCKER_AGENT_DIAGNOSTICS_PORT/);
    expect(() => loadAgentConfig({ file: file('terminal: { id: t, secret: s }\n'), env: { LOCKER_AGENT_NOPE: '1' } })).toThrow(AgentConfigError);
  });

  it('booleans from the environment as the central reads them: true/1/yes/on and false/0/no/off', () => {
    const f = file('terminal: { id: t, secret: s }\n');
    for (const v of ['true', '1', 'yes', 'ON']) expect(loadAgentConfig({ file: f, env: { LOCKER_AGENT_DIAGNOSTICS_ENABLED: v } }).diagnostics.enabled, v).toBe(true);
    for (const v of ['false', '0', 'no', 'Off']) expect(loadAgentConfig({ file: f, env: { LOCKER_AGENT_DIAGNOSTICS_ENABLED: v } }).diagnostics.enabled, v).toBe(false);
    expect(() => loadAgentConfig({ file: f, env: { LOCKER_AGENT_DIAGNOSTICS_ENABLED: 'maybe' } })).toThrow(/diagnostics\.enabled .*LOCKER_AGENT_DIAGNOSTICS_ENABLED/);
  });
});
