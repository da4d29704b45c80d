// Failed-code throttling at the terminal with a controlled clock (src/throttle.ts, docs/agent.md
// "access"): an accepted code does not reset the failures, consecutive lock-outs escalate, and a
// terminal-wide budget spans every reader; and the offline cache's age limit (access.maxOfflineHours).
// The agent runs without buses or MQTT: the store is real, the lock pulse and the link are stubbed.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { hashCode, type CodeEntry } from '@locker/common';
import { Agent, type CredentialOutcome } from '../src/agent';
import { AgentConfigSchema, type AgentConfigInput } from '../src/config';
import { AgentStore } from '../src/store';

const code = (id: string, value: string, type: 'Qr' | 'Code' = 'Code'): CodeEntry => ({
  id,
  shipmentUid: `ship-${id}`,
  usage: 'PickUp',
  type,
  hash: hashCode(value),
  locker: { uid: `locker-${id}`, bus: 'bus0', board: 0, lock: 1 },
});

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

function rig(access: AgentConfigInput['access'] = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'agent-throttle-'));
  dirs.push(dir);
  let t = Date.parse('2026-01-01T00:00:00Z');
  const config = AgentConfigSchema.parse({
    terminal: { id: 'term-t', secret: 'terminal-secret-t' },
    mqtt: { url: 'mqtt://127.0.0.1:1' },
    store: { path: path.join(dir, 'agent.db') },
    access: { maxFailures: 5, failureWindowSeconds: 60, lockoutSeconds: 60, ...access },
  });
  const agent = new Agent({ config, log: pino({ level: 'silent' }), now: () => new Date(t) });
  const a = agent as any;
  const store = new AgentStore(config.store.path);
  store.open();
  a.store = store;
  a.log = pino({ level: 'silent' });
  const link = { kick() {}, connected: false };
  a.link = link;
  a.running = true;
  a.unlock = async () => ({ ok: true, alreadyOpen: false });
  store.replaceCodes('e1', 1, [code('valid', '111111')]);
  const present = (value: string, reader = 'keypad'): Promise<CredentialOutcome> => agent.presentCredential({ source: 'keypad', value, reader });
  return {
    agent,
    link,
    now: () => t,
    store,
    present,
    advance: (s: number) => {
      t += s * 1000;
    },
  };
}

const reasons = async (r: ReturnType<typeof rig>, values: string[], reader = 'keypad') => {
  const out: string[] = [];
  for (const v of values) {
    const o = await r.present(v, reader);
    out.push(o.accepted ? 'OK' : o.reason);
  }
  return out;
};

describe('terminal access throttle', () => {
  it('an accepted code does not reset the failures: interleaving guesses with a valid code still locks out', async () => {
    const r = rig();
    expect(await reasons(r, ['000001', '000002', '000003', '000004', '111111'])).toEqual(['UNKNOWN_CODE', 'UNKNOWN_CODE', 'UNKNOWN_CODE', 'UNKNOWN_CODE', 'OK']);
    r.advance(1);
    expect(await reasons(r, ['000005', '111111'])).toEqual(['UNKNOWN_CODE', 'THROTTLED']);
    r.advance(60);
    expect(await reasons(r, ['111111'])).toEqual(['OK']);
  });

  it('failures age out of the window', async () => {
    const r = rig();
    expect(await reasons(r, ['000001', '000002', '000003', '000004'])).toEqual(Array(4).fill('UNKNOWN_CODE'));
    r.advance(61);
    expect(await reasons(r, ['000005', '000006', '000007', '000008', '111111'])).toEqual([...Array(4).fill('UNKNOWN_CODE'), 'OK']);
  });

  it('consecutive lock-outs double (capped) and reset after a quiet period', async () => {
    const r = rig({ maxLockoutSeconds: 200, escalationResetSeconds: 600 });
    const lockOut = async () => expect((await reasons(r, Array.from({ length: 5 }, (_, i) => `99999${i}`))).at(-1)).toBe('UNKNOWN_CODE');
    const lockedFor = async () => {
      // find when the valid code opens again, second by second
      for (let s = 1; s <= 1000; s++) {
        r.advance(1);
        const o = await r.present('111111');
        if (o.accepted) return s;
      }
      return -1;
    };
    await lockOut();
    expect(await lockedFor()).toBe(60);
    await lockOut();
    expect(await lockedFor()).toBe(120);
    await lockOut();
    expect(await lockedFor()).toBe(200); // 240 capped at maxLockoutSeconds
    r.advance(600); // quiet period
    await lockOut();
    expect(await lockedFor()).toBe(60);
  });

  it('a terminal-wide budget spans the readers (default maxFailures * 3)', async () => {
    const r = rig({ maxFailures: 5 });
    // 4 failures on each of three readers and 3 on a fourth: no reader reaches 5, the terminal reaches 15
    for (const reader of ['keypad', 'qr1', 'qr2']) expect(await reasons(r, ['1', '2', '3', '4'], reader)).toEqual(Array(4).fill('UNKNOWN_CODE'));
    expect(await reasons(r, ['1', '2', '3'], 'qr3')).toEqual(Array(3).fill('UNKNOWN_CODE'));
    // the 15th failure locks every reader, including one that never failed
    expect(await reasons(r, ['111111'], 'fresh')).toEqual(['THROTTLED']);
  });
});

describe('offline cache age', () => {
  it('codes are refused (CODES_STALE) after access.maxOfflineHours without a broker connection; a connection lifts it', async () => {
    const r = rig({ maxOfflineHours: 24 });
    r.store.setMeta('codes.syncedAt', String(r.now())); // the link went down now
    r.advance(24 * 3600 - 1);
    expect(await reasons(r, ['111111'])).toEqual(['OK']);
    r.advance(2);
    expect(await reasons(r, ['111111', '000000'])).toEqual(['CODES_STALE', 'CODES_STALE']);
    r.link.connected = true;
    expect(await reasons(r, ['111111'])).toEqual(['OK']);
  });

  it('maxOfflineHours: null never refuses for age', async () => {
    const r = rig({ maxOfflineHours: null });
    r.store.setMeta('codes.syncedAt', String(r.now()));
    r.advance(30 * 24 * 3600);
    expect(await reasons(r, ['111111'])).toEqual(['OK']);
  });
});
