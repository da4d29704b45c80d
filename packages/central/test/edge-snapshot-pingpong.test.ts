// Snapshot ping-pong (issue 15, fleet): a terminal that sends its status at once after every code
// message (no debounce) has statuses in flight while the next push goes out. A status naming the
// version before a push that is on its way must not be answered with a snapshot: that snapshot
// raises the version again, so the next status in flight looks old too, and so on without end (84
// snapshots per terminal in 1.5 s after a booking and a cancel, measured with `locker-sim fleet run
// --status-debounce-ms 0`). The terminal here follows the agent's rules (packages/agent/src/codes.ts)
// and answers every message it takes in with a status after a transit delay. Both engines.
import type { MqttClient } from 'mqtt';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { waitFor } from './support/wait';
import { connectScriptedTerminal, terminalStatus, type ScriptedTerminal } from './support/scripted-terminal';
import { PUP_A1 } from './support/fixtures';
import { addUser, booking, ok } from './shipments-helpers';
import { pushOnTheWay, PUSH_IN_FLIGHT_MS } from '../src/edge/sync';

it('pushOnTheWay: a snapshot covers older versions and other epochs, a delta only its base; both only for a while', () => {
  const now = 1_000_000;
  const snap = [{ epoch: 'E', base: null, version: 5, atMs: now - 10, seq: 1 }];
  expect(pushOnTheWay(snap, { epoch: 'E', version: 4 }, now)).toBe(true);
  expect(pushOnTheWay(snap, { epoch: 'X', version: 9 }, now)).toBe(true);
  expect(pushOnTheWay(snap, null, now)).toBe(true);
  expect(pushOnTheWay(snap, { epoch: 'E', version: 5 }, now)).toBe(false);
  expect(pushOnTheWay(snap, { epoch: 'E', version: 4 }, now + PUSH_IN_FLIGHT_MS)).toBe(false);
  const delta = [{ epoch: 'E', base: 5, version: 6, atMs: now, seq: 2 }];
  expect(pushOnTheWay(delta, { epoch: 'E', version: 5 }, now)).toBe(true);
  expect(pushOnTheWay(delta, { epoch: 'E', version: 4 }, now)).toBe(false); // missed an earlier one: a snapshot is due
  expect(pushOnTheWay(undefined, { epoch: 'E', version: 4 }, now)).toBe(false);
});

describeEngines('snapshot ping-pong: statuses sent without debounce', (engine) => {
  let t: TestService;
  let tt: ScriptedTerminal;
  let term: MqttClient;
  let user: string;
  const P = 'locker/v1/t/term-a1';
  const TRANSIT_MS = 150;
  const held = { epoch: null as string | null, version: 0 };
  let heldLockers: { epoch: string; version: number } | null = null;
  let snapshots = 0;
  let lockerLists = 0;
  /** the next snapshot is lost on the way (not taken in) */
  let loseNext = false;

  beforeAll(async () => {
    t = await createTestService(engine, { config: { mqtt: { mode: 'embedded', host: '127.0.0.1', port: 0 }, edge: { pollMs: 50 } }, startWorkers: true });
    user = await addUser(t, PUP_A1);
    tt = await connectScriptedTerminal(t);
    term = tt.term;
    const sendStatus = () => {
      // as the agent: the codes and the locker list held
      const body = JSON.stringify({ ...terminalStatus(held.version, held.epoch), ...(heldLockers ? { lockers: heldLockers } : {}) });
      setTimeout(() => void term.publishAsync(`${P}/up/status`, body, { qos: 1 }).catch(() => undefined), TRANSIT_MS);
    };
    term.on('message', (topic, payload) => {
      if (topic.endsWith('/down/lockers')) {
        const l = JSON.parse(payload.toString());
        lockerLists++;
        if (!heldLockers || heldLockers.epoch !== l.epoch || heldLockers.version < l.version) {
          heldLockers = { epoch: l.epoch, version: l.version };
          sendStatus();
        }
        return;
      }
      if (!topic.endsWith('/down/codes')) return;
      const m = JSON.parse(payload.toString());
      if (m.type === 'snapshot') {
        snapshots++;
        if (loseNext) {
          loseNext = false;
          return;
        }
        if (m.epoch === held.epoch && m.version <= held.version) return; // late or repeated
      } else {
        if (m.epoch !== held.epoch || m.version <= held.version) return;
        if (m.baseVersion !== held.version) {
          void term.publishAsync(`${P}/up/sync`, JSON.stringify({ v: 1, requestId: `r${m.version}`, want: 'snapshot', reason: 'gap', have: { ...held } }), { qos: 1 });
          return;
        }
      }
      held.epoch = m.epoch;
      held.version = m.version;
      sendStatus(); // at once after every change: no debounce
    });
    await term.publishAsync(`${P}/up/status`, JSON.stringify(terminalStatus(0, null)), { qos: 1 });
    await waitFor(() => snapshots >= 1 && held.epoch !== null, 'first snapshot');
    // settled: the central has the terminal's status showing what it pushed last
    await waitFor(async () => {
      const r = await t.ctx.db.kysely.selectFrom('edge_terminals').select(['codes_version', 'last_status']).where('terminal_id', '=', 'term-a1').executeTakeFirstOrThrow();
      return Number(r.codes_version) === held.version && JSON.parse(r.last_status ?? '{}').codes?.version === held.version;
    }, 'terminal in sync');
    await new Promise((r) => setTimeout(r, 2 * TRANSIT_MS));
  });
  afterAll(async () => {
    tt?.close();
    await t?.close();
  });

  it('a booking and a cancel bring two deltas and no snapshot ping-pong; the terminal ends on the current version', async () => {
    const before = snapshots;
    const uid = (await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking() }))).shipmentUid as string;
    await ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: uid }));
    await new Promise((r) => setTimeout(r, 1500));
    // before the fix: 12-14 snapshots in these 1.5 s, and counting. At most one: on PostgreSQL one
    // extra snapshot is seen now and then (not understood yet, issue 15 notes); it is not answered
    // by another (no ping-pong)
    expect(snapshots - before).toBeLessThanOrEqual(1);
    const row = await t.ctx.db.kysely.selectFrom('edge_terminals').select(['epoch', 'codes_version']).where('terminal_id', '=', 'term-a1').executeTakeFirstOrThrow();
    expect(held).toEqual({ epoch: row.epoch, version: Number(row.codes_version) });
  });

  it('a snapshot that was lost (a later push arrived, the snapshot is not held) is sent again at the next status', async () => {
    // settled first: the central has a status showing the codes and the list held
    await waitFor(async () => {
      const r = await t.ctx.db.kysely.selectFrom('edge_terminals').select(['codes_version', 'lockers_version', 'last_status']).where('terminal_id', '=', 'term-a1').executeTakeFirstOrThrow();
      const st = JSON.parse(r.last_status ?? '{}');
      return Number(r.codes_version) === held.version && st.codes?.version === held.version && st.lockers?.version === Number(r.lockers_version);
    }, 'terminal in sync');
    const before = snapshots;
    const listsBefore = lockerLists;
    heldLockers = null; // the terminal lost its list too (a new store): it takes the next one in
    loseNext = true;
    // a status naming another epoch and locker list: a snapshot (lost here) and the locker list after it
    await term.publishAsync(`${P}/up/status`, JSON.stringify({ ...terminalStatus(held.version, 'another-epoch'), lockers: { epoch: 'another-epoch', version: 0 } }), { qos: 1 });
    // the locker list is taken in (heldLockers), and the terminal says so in its status (sendStatus):
    // it shows the list but not the snapshot, so the snapshot is due again at once
    const lostAt = before + 1;
    await waitFor(() => snapshots >= lostAt && lockerLists > listsBefore, 'the lost snapshot and the locker list after it');
    await waitFor(() => snapshots > lostAt, 'the snapshot again', 3000);
  });
});
