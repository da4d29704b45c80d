// The crash of a 10,000-terminal reconnect storm: `RangeError: Maximum call stack size exceeded`
// in qlobber's _match, called from mqemitter. With aedes' default concurrency (100), messages
// published while 100 deliveries are pending (QoS 1 deliveries to terminals whose sockets do not
// drain) wait in mqemitter's queue; when one delivery completes, mqemitter works through the queue
// by recursion, one level per queued message whose subscribers answer synchronously (the central
// service's own handlers, $SYS connect/disconnect messages). Some 2,500 of them overflow the stack,
// thrown out of whatever completed the delivery: an uncaught exception, the process exits.
// The embedded broker runs aedes without that bound (AEDES_CONCURRENCY = 0): nothing queues.
import type { Aedes, AedesPublishPacket } from 'aedes';
import { afterEach, describe, expect, it } from 'vitest';
import { AEDES_CONCURRENCY, EmbeddedBroker } from '../src/mqtt/embedded';
import { createLogger } from '../src/logger';
import { topics } from '../src/mqtt/topics';
import type { Kysely } from 'kysely';
import type { Database } from '../src/db/schema';

const FLEET = 10_000;

describe('embedded broker: a long run of queued messages never overflows the stack', () => {
  let broker: EmbeddedBroker | null = null;
  afterEach(async () => {
    await broker?.stop();
    broker = null;
  });

  it(`100 deliveries pending (sockets not draining) while ${FLEET} terminal statuses and $SYS messages arrive; the deliveries complete: every message handled, nothing thrown`, async () => {
    broker = new EmbeddedBroker({ host: '127.0.0.1', port: 0, db: null as unknown as Kysely<Database>, log: createLogger({ level: 'silent' }), storedBeforeAck: [] });
    await broker.start();
    const aedes = (broker as unknown as { broker: Aedes }).broker;
    // 100 deliveries that complete later, as a QoS 1 delivery to a terminal waits for its socket's
    // 'drain' (aedes lib/client.js waitForDrain, up to drainTimeout)
    const held: (() => void)[] = [];
    await new Promise<void>((r) => aedes.subscribe(topics.down('term-slow', 'codes'), (_p: AedesPublishPacket, cb: () => void) => void held.push(cb), () => r()));
    for (let i = 0; i < 100; i++) void broker.publish(topics.down('term-slow', 'codes'), '{}', { qos: 0 });
    expect(held).toHaveLength(100);
    // the central service's status handler answers synchronously
    let statuses = 0;
    await broker.subscribe(`${topics.prefix('+')}up/status`, () => void statuses++);
    // a connect wave: a retained status of every terminal and a $SYS message per connect (no subscriber)
    let published = 0;
    for (let i = 0; i < FLEET; i++) {
      aedes.publish({ cmd: 'publish', topic: topics.up(`term-${i}`, 'status'), payload: Buffer.from('{"v":1}'), qos: 0, retain: false, dup: false }, () => void published++);
      aedes.publish({ cmd: 'publish', topic: `$SYS/locker-central/new/clients`, payload: Buffer.from(`term-${i}`), qos: 0, retain: false, dup: false }, () => void published++);
    }
    // with aedes' default bound (100) all of them wait in mqemitter's queue now; without, none
    const queued = (aedes as unknown as { mq: { length: number } }).mq.length;
    expect(queued).toBe(AEDES_CONCURRENCY > 0 ? 2 * FLEET : 0);
    expect(() => {
      for (const cb of held.splice(0)) cb();
    }).not.toThrow();
    await new Promise((r) => setTimeout(r, 100));
    expect(published).toBe(2 * FLEET);
    expect(statuses).toBe(FLEET);
  });
});
