// An index over the embedded broker's retained messages, so that a SUBSCRIBE whose filters cannot
// match any retained topic costs nothing.
//
// aedes asks its persistence for the retained messages of every filter a client subscribes to, and
// aedes-persistence's in-memory store answers by testing the topic of EVERY retained message
// against the filter. Every terminal retains its `up/status` (and its offline will), so with N
// terminals each SUBSCRIBE costs O(N) topic tests: a connect wave of N terminals, each subscribing
// its 4 `down/` filters, cost O(4 N^2) tests (4 x 10^8 at 10,000; 30 % of the central CPU in a
// 10,000-terminal storm, and the storm never finished), although a terminal's `down/` filters can
// never match a retained message (retained is allowed only on `up/status`).
//
// The index counts, for every retained topic, each of its level prefixes (`a`, `a/b`, `a/b/c` for
// `a/b/c`). A filter's literal prefix is its levels before the first wildcard; when no retained
// topic has that prefix (or, for a filter without wildcards, no retained topic is the filter), no
// retained message can match the filter and the scan is skipped. Otherwise the store scans as
// before. So the answer is always the store's own answer for the filters that may match: the index
// only ever skips filters that match nothing.
import { Readable } from 'node:stream';

export class RetainedIndex {
  /** retained topics held */
  private readonly topics = new Set<string>();
  /** level prefix -> number of retained topics that have it (a topic counts as its own prefix) */
  private readonly prefixes = new Map<string, number>();

  get size(): number {
    return this.topics.size;
  }

  /** a retained message was stored for `topic` (an empty payload deletes it, as in MQTT) */
  store(topic: string, hasPayload: boolean): void {
    if (hasPayload) {
      if (this.topics.has(topic)) return;
      this.topics.add(topic);
      for (const p of levelPrefixes(topic)) this.prefixes.set(p, (this.prefixes.get(p) ?? 0) + 1);
    } else {
      if (!this.topics.delete(topic)) return;
      for (const p of levelPrefixes(topic)) {
        const n = (this.prefixes.get(p) ?? 0) - 1;
        if (n > 0) this.prefixes.set(p, n);
        else this.prefixes.delete(p);
      }
    }
  }

  /** may a retained topic match `filter`? false only when certainly none can */
  mayMatch(filter: string): boolean {
    const levels = filter.split('/');
    const wild = levels.findIndex((l) => l === '+' || l === '#');
    if (wild === -1) return this.topics.has(filter);
    if (wild === 0) return this.topics.size > 0;
    return this.prefixes.has(levels.slice(0, wild).join('/'));
  }
}

function* levelPrefixes(topic: string): Generator<string> {
  let i = topic.indexOf('/');
  while (i !== -1) {
    yield topic.slice(0, i);
    i = topic.indexOf('/', i + 1);
  }
  yield topic;
}

/** the part of aedes' persistence the index wraps */
export interface RetainedPersistence {
  storeRetained(packet: { topic: string; payload: Buffer | string }): Promise<void>;
  createRetainedStreamCombi(patterns: string[]): Readable;
  createRetainedStream(pattern: string): Readable;
}

/**
 * Wraps a started broker's persistence in place (aedes looks its methods up on every call): retained
 * messages are counted into an index, and retained lookups skip the filters the index proves match
 * nothing. Call before any client connects. Returns the index.
 */
export function indexRetained(persistence: RetainedPersistence): RetainedIndex {
  const index = new RetainedIndex();
  const store = persistence.storeRetained.bind(persistence);
  const combi = persistence.createRetainedStreamCombi.bind(persistence);
  const single = persistence.createRetainedStream.bind(persistence);
  persistence.storeRetained = (packet) => {
    index.store(packet.topic, packet.payload.length > 0);
    return store(packet);
  };
  persistence.createRetainedStreamCombi = (patterns) => {
    const may = patterns.filter((p) => index.mayMatch(p));
    return may.length ? combi(may) : Readable.from([]);
  };
  persistence.createRetainedStream = (pattern) => (index.mayMatch(pattern) ? single(pattern) : Readable.from([]));
  return index;
}
