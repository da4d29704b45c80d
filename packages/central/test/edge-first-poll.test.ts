// A restarted central instance must not push to every terminal the store still marks online.
// After a SIGKILL the rows of edge_terminals still say online (no last will reached the store),
// and the edge sync's first poll of the change markers found every pick up point "changed"
// (nothing known before it): one query for each point's online terminals and a push to each of
// them, connected or not. At 10,000 terminals that queue held the one SQLite connection for over a
// minute: the start's own queries, /ready and every login waited behind it (measured: /ready after
// 80 s, no terminal back in sync within 60 s). The first poll now only learns the markers;
// reconnecting terminals are brought up to date by their statuses and the first reconcile.
// Both engines.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { openSameStore, type SameStoreService } from './support/same-store';
import { PUP_A1, PUP_A2, PUP_B1 } from './support/fixtures';
import { addUser, booking, ok } from './shipments-helpers';
import { EdgeSync } from '../src/edge/sync';
import { toDbTime } from '../src/ids';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describeEngines('edge sync: the first poll after a start', (engine) => {
  let t: TestService;
  let other: SameStoreService;
  let sync: EdgeSync;
  const pushed: string[] = [];
  const terminals: { id: string; pup: string }[] = [];
  beforeAll(async () => {
    t = await createTestService(engine);
    const db = t.ctx.db.kysely;
    const now = toDbTime(t.clock.now());
    const pups = [PUP_A1, PUP_A2, PUP_B1];
    for (let i = 0; i < 150; i++) terminals.push({ id: `stale-${String(i).padStart(3, '0')}`, pup: pups[i % 3]! });
    await db.insertInto('terminals').values(terminals.map((x) => ({ id: x.id, pup_uid: x.pup, secret_hash: 'x', name: null, created_at: now, updated_at: now }))).execute();
    // marked online by the instance that was killed
    await db.insertInto('edge_terminals').values(terminals.map((x) => ({ terminal_id: x.id, epoch: `e-${x.id}`, codes_version: 1, online: 1, status_at: now, last_status: null, last_seq: 0, updated_at: now }))).execute();
    other = await openSameStore(t, { config: { edge: { ...t.ctx.config.edge, pollMs: 100 } } as never });
    sync = new EdgeSync(other.ctx, { kind: 'external', publish: async () => {}, subscribe: async () => {} } as never);
    const real = sync.pushChanges.bind(sync);
    sync.pushChanges = async (id: string, at?: number) => {
      pushed.push(id);
      return real(id, at);
    };
  });
  afterAll(async () => {
    await sync?.stop();
    await other?.close();
    await t?.close();
  });

  it('learns the markers without pushing to the terminals marked online', async () => {
    await sync.start();
    await sleep(800); // several polls (100 ms), before the first reconcile (5 s after the start)
    expect(pushed).toEqual([]);
  });

  it('a change after that first poll is pushed to the online terminals of its point, and only to them', async () => {
    const user = await addUser(t, PUP_A1);
    await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking() }));
    const deadline = Date.now() + 5000;
    const atA1 = terminals.filter((x) => x.pup === PUP_A1).map((x) => x.id);
    while (Date.now() < deadline && !atA1.every((id) => pushed.includes(id))) await sleep(50);
    expect([...new Set(pushed)].sort()).toEqual(atA1.sort());
  });
});

describeEngines("a point's online terminals are found by the point's index", (engine) => {
  let t: TestService;
  beforeAll(async () => {
    t = await createTestService(engine);
  });
  afterAll(async () => {
    await t?.close();
  });
  it('terminals(pup_uid) is indexed (migration 410: before, every code push scanned every terminal)', async () => {
    if (engine === 'sqlite') {
      const plan = t.ctx.db.sqlite!.prepare("EXPLAIN QUERY PLAN SELECT e.terminal_id FROM edge_terminals e JOIN terminals t ON t.id = e.terminal_id WHERE e.online = 1 AND t.pup_uid = 'x'").all() as { detail: string }[];
      expect(plan.map((p) => p.detail).join('\n')).toMatch(/USING INDEX terminals_pup/);
    } else {
      const r = await t.ctx.db.pool!.query("SELECT indexdef FROM pg_indexes WHERE indexname = 'terminals_pup' AND schemaname = current_schema()");
      expect(r.rows[0]?.indexdef).toMatch(/\(pup_uid\)/);
    }
  });
});
