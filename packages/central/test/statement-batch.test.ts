// StatementBatch (shipments/sqlq.ts), the same contract on both engines: statements queued by
// run() are executed by flush() (on PostgreSQL as one statement of data-modifying CTEs), each
// run() promise gets its own rows (RETURNING) and row count, a failing statement rejects every
// queued one and leaves nothing behind, and run() after flush() executes at once.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { sql } from 'kysely';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { StatementBatch } from '../src/shipments/sqlq';
import { shipmentService } from '../src/shipments/service';

describeEngines('StatementBatch', (engine) => {
  let t: TestService;
  beforeAll(async () => {
    t = await createTestService(engine, { site: null });
    await sql`CREATE TABLE batch_probe (k TEXT PRIMARY KEY, v INTEGER NOT NULL)`.execute(t.ctx.db.kysely);
  });
  afterAll(async () => t?.close());

  const rows = async () => (await sql<{ k: string; v: number }>`SELECT k, v FROM batch_probe ORDER BY k`.execute(t.ctx.db.kysely)).rows.map((r) => `${r.k}=${Number(r.v)}`);
  const tx = () => shipmentService(t.ctx).tx;

  it('runs every queued statement; each caller gets its own rows and count', async () => {
    const got = await tx().run(async (trx) => {
      const b = new StatementBatch(trx, t.ctx.db);
      const p = [
        b.run<{ k: string }>('INSERT INTO batch_probe (k, v) VALUES (?, ?), (?, ?) RETURNING k', ['a', 1, 'b', 2]),
        b.run('INSERT INTO batch_probe (k, v) VALUES (?, ?)', ['c', 3]),
        b.run<{ k: string; v: number }>('INSERT INTO batch_probe (k, v) VALUES (?, ?) ON CONFLICT (k) DO NOTHING RETURNING k, v', ['a', 9]),
      ];
      await Promise.all([...p, b.flush()]);
      const after = await b.run<{ k: string }>('UPDATE batch_probe SET v = v + 10 WHERE k = ? RETURNING k', ['c']); // after flush: at once
      return [...(await Promise.all(p)), after];
    });
    expect(got.map((r) => ({ rows: r.rows.map((x: any) => ({ ...x, ...(x.v !== undefined ? { v: Number(x.v) } : {}) })), n: r.numAffectedRows }))).toEqual([
      { rows: [{ k: 'a' }, { k: 'b' }], n: 2 },
      { rows: [], n: 1 },
      { rows: [], n: 0 }, // the conflicting row was not inserted
      { rows: [{ k: 'c' }], n: 1 },
    ]);
    expect(await rows()).toEqual(['a=1', 'b=2', 'c=13']);
  });

  it('a failing statement rejects every queued one and the job leaves nothing behind', async () => {
    const before = await rows();
    const outcome = await tx()
      .run(async (trx) => {
        const b = new StatementBatch(trx, t.ctx.db);
        const p = [b.run('INSERT INTO batch_probe (k, v) VALUES (?, ?)', ['d', 4]), b.run('INSERT INTO batch_probe (k, v) VALUES (?, ?)', ['a', 5])]; // 'a' exists
        const settled = await Promise.allSettled([...p, b.flush()]);
        expect(settled.every((s) => s.status === 'rejected')).toBe(engine === 'postgres'); // one statement there; SQLite: each on its own
        if (settled.some((s) => s.status === 'rejected')) throw (settled.find((s) => s.status === 'rejected') as PromiseRejectedResult).reason;
        return 'committed';
      })
      .catch((e: Error) => e.message);
    expect(outcome).toMatch(/unique|duplicate/i);
    expect(await rows()).toEqual(before);
  });
});
