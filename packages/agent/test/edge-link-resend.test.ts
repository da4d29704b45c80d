// The central service's resendFrom (down/eventAcks: "I miss seq N, send again from there") is
// followed at once even when it arrives while an event publish waits for its PUBACK: that publish's
// PUBACK must not carry the drain's cursor past the seq asked for again (before, the events from
// resendFrom went again only after publishTimeoutMs). A real aedes broker whose authorizePublish
// holds one publish's PUBACK; the agent's own EdgeLink and store.
import net from 'node:net';
import { Aedes } from 'aedes';
import { afterEach, describe, expect, it } from 'vitest';
import { edgeTopics } from '@locker/common';
import { bareLink } from './support/link';

const TERMINAL = 'term-resend';

/** The broker on a free port of its own; closed with the test's cleanups. Its mqtt:// URL. */
async function serve(aedes: Aedes, cleanups: (() => Promise<void> | void)[]): Promise<string> {
  const server = net.createServer((s) => aedes.handle(s as never));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanups.push(async () => {
    await new Promise<void>((r) => aedes.close(() => r()));
    await new Promise<void>((r) => server.close(() => r()));
  });
  return `mqtt://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
}

async function waitFor<T>(fn: () => T | undefined | false, what: string, ms: number): Promise<T> {
  const start = Date.now();
  for (;;) {
    const v = fn();
    if (v) return v;
    if (Date.now() - start > ms) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('EdgeLink: resendFrom during a publish in flight', () => {
  const cleanups: (() => Promise<void> | void)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it('the events from resendFrom go again at once, not after publishTimeoutMs', async () => {
    /** the seq of every event publish the broker took, in order of arrival */
    const seqs: number[] = [];
    let holdSeq: number | null = 3;
    let release: (() => void) | null = null;
    const aedes = await Aedes.createBroker({
      authorizePublish: (_client, packet, cb) => {
        if (!packet.topic.endsWith('/up/events')) return cb(null);
        const seq = (JSON.parse(packet.payload.toString()) as { seq: number }).seq;
        seqs.push(seq);
        // the first publish of `holdSeq` waits for its PUBACK until released
        if (seq === holdSeq) {
          holdSeq = null;
          release = () => cb(null);
          return;
        }
        cb(null);
      },
    });
    const url = await serve(aedes, cleanups);
    // publishTimeoutMs far beyond the test's waits: a resend seen here is resendFrom's, not the timeout's
    const { link, store, dispose } = bareLink(url, TERMINAL, { publishTimeoutMs: 60_000 });
    cleanups.push(dispose);
    for (let i = 1; i <= 3; i++) store.append('doorOpened', { bus: 'bus0', board: 0, lock: i, commanded: true }, new Date());
    await link.start();

    // 1 and 2 published, 3 waiting for its PUBACK
    await waitFor(() => seqs.includes(3) && release, 'seq 3 held by the broker', 10_000);
    expect(seqs).toEqual([1, 2, 3]);
    // the central service committed 1 and misses 2: it asks for 2 again while 3 is in flight
    const at = new Date().toISOString();
    await new Promise<void>((resolve, reject) =>
      aedes.publish({ cmd: 'publish', topic: edgeTopics.down(TERMINAL, 'eventAcks'), payload: Buffer.from(JSON.stringify({ v: 1, journalId: store.journalId(), upTo: 1, resendFrom: 2, at })), qos: 1, retain: false, dup: false }, (err) => (err ? reject(err) : resolve())),
    );
    await waitFor(() => store.unsentCount() === 2, 'seq 1 marked sent', 5000);
    release!();
    // 2 and 3 go again, in order, well before publishTimeoutMs
    await waitFor(() => seqs.length >= 5, 'the events from seq 2 published again', 5000);
    expect(seqs.slice(0, 5)).toEqual([1, 2, 3, 2, 3]);
  });
});

describe('EdgeLink: an acknowledgement past what was published', () => {
  const cleanups: (() => Promise<void> | void)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it('marks sent only what this process published: the rest is still published (a central service counting another store, a restored store)', async () => {
    const seqs: number[] = [];
    const aedes = await Aedes.createBroker({
      authorizePublish: (_client, packet, cb) => {
        if (packet.topic.endsWith('/up/events')) seqs.push((JSON.parse(packet.payload.toString()) as { seq: number }).seq);
        cb(null);
      },
    });
    const url = await serve(aedes, cleanups);
    const ack = (upTo: number) =>
      new Promise<void>((resolve, reject) =>
        aedes.publish({ cmd: 'publish', topic: edgeTopics.down(TERMINAL, 'eventAcks'), payload: Buffer.from(JSON.stringify({ v: 1, journalId: store.journalId(), upTo, at: new Date().toISOString() })), qos: 1, retain: false, dup: false }, (err) => (err ? reject(err) : resolve())),
      );
    const { link, store, dispose } = bareLink(url, TERMINAL, { publishTimeoutMs: 60_000 });
    cleanups.push(dispose);
    for (let i = 1; i <= 60; i++) store.append('doorOpened', { bus: 'bus0', board: 0, lock: 1, commanded: true }, new Date());
    await link.start();
    // the window: 32 published, none acknowledged yet
    await waitFor(() => seqs.length >= 32, '32 events published', 10_000);
    await new Promise((r) => setTimeout(r, 200));
    expect(Math.max(...seqs)).toBe(32);
    // a central service acknowledging far past them (upTo 500; the journal holds 60)
    await ack(500);
    await waitFor(() => store.unsentCount() === 28, 'the 32 published marked sent', 5000);
    // 33..60 were never published: still unsent, and the drain publishes them now
    await waitFor(() => seqs.includes(60), 'seq 60 published', 10_000);
    expect([...new Set(seqs)].sort((a, b) => a - b)).toEqual(Array.from({ length: 60 }, (_, i) => i + 1));
    await ack(60);
    await waitFor(() => store.unsentCount() === 0, 'all marked sent', 5000);
  });
});

describe('EdgeLink: subscriptions the broker refuses', () => {
  const cleanups: (() => Promise<void> | void)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it('a connection without them is dropped and tried again (before, no acknowledgement ever came and the journal stopped on a healthy connection)', async () => {
    let refuseAcks = 1;
    let connections = 0;
    const aedes = await Aedes.createBroker({
      authorizeSubscribe: (_client, sub, cb) => {
        // an ACL mistake on an external broker, once: the acknowledgements' topic refused (SUBACK 0x80)
        if (sub.topic.endsWith('/down/eventAcks') && refuseAcks > 0) {
          refuseAcks--;
          return cb(null, null);
        }
        cb(null, sub);
      },
    });
    aedes.on('client', () => connections++);
    // plays the central service: every event acknowledged as it comes
    aedes.on('publish', (packet) => {
      if (!packet.topic.endsWith('/up/events')) return;
      const e = JSON.parse(packet.payload.toString()) as { seq: number; journalId: string };
      aedes.publish({ cmd: 'publish', topic: edgeTopics.down(TERMINAL, 'eventAcks'), payload: Buffer.from(JSON.stringify({ v: 1, journalId: e.journalId, upTo: e.seq, at: new Date().toISOString() })), qos: 1, retain: false, dup: false }, () => undefined);
    });
    const url = await serve(aedes, cleanups);
    const { link, store, dispose } = bareLink(url, TERMINAL);
    cleanups.push(dispose);
    for (let i = 1; i <= 3; i++) store.append('doorOpened', { bus: 'bus0', board: 0, lock: i, commanded: true }, new Date());
    await link.start();
    await waitFor(() => store.unsentCount() === 0, 'every event acknowledged on the second connection', 15_000);
    expect(connections).toBe(2);
  });
});
