// The edge sync's marker poll (every edge.pollMs) reads a marker per pick up point. Read at once,
// at 10,000 points it blocked the event loop for 18-25 ms every second, and bookings' code pushes
// waited behind it. On a SQLite file it now reads from the read-only connection and yields to the
// loop every MARKER_SLICE rows; the markers it returns are the same as a whole read's.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EdgeSync, MARKER_SLICE } from '../src/edge/sync';
import { createTestService, type TestService } from './support/harness';

describe('edge sync marker poll on a SQLite file', () => {
  let t: TestService;
  beforeAll(async () => {
    t = await createTestService('sqlite');
  });
  afterAll(async () => {
    await t?.close();
  });

  it('yields to the event loop while it reads thousands of markers, and returns what a plain read returns', async () => {
    expect(t.ctx.db.committedIterate).toBeTypeOf('function');
    const points = 3 * MARKER_SLICE + 17;
    const rows = Array.from({ length: points }, (_, i) => ({ pup_uid: `marker-pup-${String(i).padStart(5, '0')}`, version: (i % 7) + 1 }));
    for (let i = 0; i < rows.length; i += 500) await t.ctx.db.kysely.insertInto('pup_code_versions').values(rows.slice(i, i + 500)).execute();

    const es = new EdgeSync(t.ctx, { publish: async () => {}, subscribe: async () => {} } as never);
    const readMarkers = () => (es as unknown as { readMarkers(): Promise<Map<string, string>> }).readMarkers();

    // turns of the event loop that ran while the read was in progress
    let turns = 0;
    let reading = true;
    const spin = () => {
      if (!reading) return;
      turns++;
      setImmediate(spin);
    };
    setImmediate(spin);
    const before = turns;
    const markers = await readMarkers();
    reading = false;
    expect(turns - before).toBeGreaterThanOrEqual(3);

    // the same markers as the whole read on the writing connection (PostgreSQL's and :memory:'s path)
    const plain = new EdgeSync({ ...t.ctx, db: { ...t.ctx.db, committedIterate: undefined } }, { publish: async () => {}, subscribe: async () => {} } as never);
    const expected = await (plain as unknown as { readMarkers(): Promise<Map<string, string>> }).readMarkers();
    expect(markers.size).toBeGreaterThanOrEqual(points);
    expect(markers).toEqual(expected);
  });
});
