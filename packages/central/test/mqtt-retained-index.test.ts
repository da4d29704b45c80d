// The retained-message index of the embedded broker (src/mqtt/retained-index.ts): a SUBSCRIBE whose
// filters cannot match any retained topic skips aedes-persistence's scan of every retained message
// (O(N) per filter with N terminals retaining their status: the 10,000-terminal storm never
// finished). The index may only skip filters that match nothing: the answers with and without it
// are the same, for any set of retained topics and any filter.
import { Readable } from 'node:stream';
import { Aedes } from 'aedes';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import type { Kysely } from 'kysely';
import { EmbeddedBroker } from '../src/mqtt/embedded';
import { indexRetained, RetainedIndex, type RetainedPersistence } from '../src/mqtt/retained-index';
import { createLogger } from '../src/logger';
import type { Database } from '../src/db/schema';

async function topicsOf(stream: Readable): Promise<string[]> {
  const out: string[] = [];
  for await (const p of stream) out.push((p as { topic: string }).topic);
  return out.sort();
}

async function freshPersistence(): Promise<RetainedPersistence> {
  const broker = await Aedes.createBroker();
  const p = (broker as unknown as { persistence: RetainedPersistence }).persistence;
  await new Promise<void>((r) => broker.close(() => r()));
  return p;
}

const level = fc.constantFrom('locker', 'v1', 't', 'T1', 'T2', 'up', 'down', 'status', 'codes', '', '$SYS', 'x');
const topicArb = fc.array(level, { minLength: 1, maxLength: 6 }).map((l) => l.join('/'));
const filterArb = fc
  .tuple(fc.array(fc.oneof(level, fc.constant('+')), { minLength: 0, maxLength: 6 }), fc.boolean())
  .map(([l, hash]) => (hash ? [...l, '#'] : l).join('/'))
  .filter((f) => f.length > 0);

describe('retained index', () => {
  it('the indexed store answers every filter exactly as the plain store (property, with deletions)', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.tuple(topicArb, fc.boolean()), { maxLength: 30 }), fc.array(filterArb, { minLength: 1, maxLength: 4 }), async (ops, filters) => {
        const plain = await freshPersistence();
        const indexed = await freshPersistence();
        indexRetained(indexed);
        for (const [topic, keep] of ops) {
          const packet = { cmd: 'publish', qos: 1, retain: true, topic, payload: Buffer.from(keep ? 'x' : '') };
          await plain.storeRetained(packet);
          await indexed.storeRetained(packet);
        }
        expect(await topicsOf(indexed.createRetainedStreamCombi(filters))).toEqual(await topicsOf(plain.createRetainedStreamCombi(filters)));
        for (const f of filters) expect(await topicsOf(indexed.createRetainedStream(f))).toEqual(await topicsOf(plain.createRetainedStream(f)));
      }),
      { numRuns: 300 },
    );
  });

  it("a terminal's down/ filters skip the store's scan; the central's status filter still scans and finds every status", async () => {
    const p = await freshPersistence();
    const scanned: string[][] = [];
    const combi = p.createRetainedStreamCombi.bind(p);
    p.createRetainedStreamCombi = (patterns) => {
      scanned.push(patterns);
      return combi(patterns);
    };
    indexRetained(p);
    for (let i = 0; i < 1000; i++) await p.storeRetained({ topic: `locker/v1/t/T${i}/up/status`, payload: Buffer.from('{}') });
    const down = ['locker/v1/t/T7/down/codes', 'locker/v1/t/T7/down/commands', 'locker/v1/t/T7/down/#', 'locker/v1/t/T7/down/+'];
    expect(await topicsOf(p.createRetainedStreamCombi(down))).toEqual([]);
    expect(scanned).toEqual([]); // nothing scanned for the terminal
    expect(await topicsOf(p.createRetainedStreamCombi(['locker/v1/t/+/up/status']))).toHaveLength(1000);
    expect(scanned).toEqual([['locker/v1/t/+/up/status']]);
    // a terminal's own status is found by a filter without wildcards, and not once deleted
    expect(await topicsOf(p.createRetainedStreamCombi(['locker/v1/t/T7/up/status']))).toEqual(['locker/v1/t/T7/up/status']);
    await p.storeRetained({ topic: 'locker/v1/t/T7/up/status', payload: Buffer.alloc(0) });
    expect(await topicsOf(p.createRetainedStreamCombi(['locker/v1/t/T7/up/status']))).toEqual([]);
  });

  it('counts shared prefixes: deleting one of two topics under a prefix keeps the other findable', () => {
    const ix = new RetainedIndex();
    ix.store('a/b/c', true);
    ix.store('a/b/d', true);
    ix.store('a/b/c', true); // stored again: still one topic
    ix.store('a/b/c', false);
    expect(ix.size).toBe(1);
    expect(ix.mayMatch('a/b/+')).toBe(true);
    expect(ix.mayMatch('a/b/c')).toBe(false);
    ix.store('a/b/d', false);
    expect(ix.mayMatch('a/#')).toBe(false);
    expect(ix.mayMatch('#')).toBe(false);
  });
});

describe('embedded broker: retained messages go through the index', () => {
  let broker: EmbeddedBroker | null = null;
  afterEach(async () => {
    await broker?.stop();
    broker = null;
  });

  it('retained statuses are counted and deleted in the running broker; a down/ filter is proved empty', async () => {
    broker = new EmbeddedBroker({ host: '127.0.0.1', port: 0, db: null as unknown as Kysely<Database>, log: createLogger({ level: 'silent' }), storedBeforeAck: [] });
    await broker.start();
    for (let i = 0; i < 3; i++) await broker.publish(`locker/v1/t/T${i}/up/status`, '{"v":1}', { qos: 1, retain: true });
    await broker.publish('locker/v1/t/T0/up/status', '', { qos: 1, retain: true });
    expect(broker.retained?.size).toBe(2);
    expect(broker.retained?.mayMatch('locker/v1/t/T1/down/#')).toBe(false);
    expect(broker.retained?.mayMatch('locker/v1/t/+/up/status')).toBe(true);
  });
});
