// More than one connection accepted per turn of the event loop (mqtt/acceptors.ts). libuv accepts
// one connection per listening descriptor per turn; a reconnecting fleet waited in the kernel's
// accept queue while the service had time to spare. These tests count the connections accepted in
// one turn of the loop, the socket's accept queue, and that stopping the broker frees the port.
import { execFileSync } from 'node:child_process';
import net from 'node:net';
import mqtt from 'mqtt';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { duplicateListener } from '../src/mqtt/acceptors';
import { EmbeddedBroker } from '../src/mqtt/embedded';
import { createLogger } from '../src/logger';
import { createTestService, type TestService } from './support/harness';

const CLIENTS = 40;

function listen(backlog: number, onConnection: (s: net.Socket) => void): Promise<net.Server> {
  return new Promise((resolve) => {
    const s = net.createServer(onConnection);
    s.listen({ port: 0, host: '127.0.0.1', backlog }, () => resolve(s));
  });
}

/**
 * Opens CLIENTS connections while the event loop is blocked (their handshakes complete in the
 * kernel meanwhile), then counts the connections accepted before the loop's next check phase: the
 * accepts of one turn.
 */
async function acceptedInOneTurn(port: number, accepted: () => number): Promise<{ firstTurn: number; sockets: net.Socket[] }> {
  const sockets: net.Socket[] = [];
  for (let i = 0; i < CLIENTS; i++) sockets.push(net.connect(port, '127.0.0.1').on('error', () => undefined));
  // net.connect to an IP address issues its connect() in a nextTick; the count starts in a check
  // phase (setImmediate), after blocking the loop there, and ends in the next one: exactly one poll
  // phase (where connections are accepted) lies between
  const firstTurn = await new Promise<number>((resolve) =>
    setImmediate(() => {
      const until = Date.now() + 300;
      while (Date.now() < until) {
        /* the loop is blocked: the kernel completes the handshakes and queues the connections */
      }
      const before = accepted();
      setImmediate(() => resolve(accepted() - before));
    }),
  );
  return { firstTurn, sockets };
}

async function eventually(pred: () => boolean, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The accept queue the kernel gives the listening socket (ss's Send-Q of a LISTEN socket); null without ss. */
function listenBacklog(port: number): number | null {
  try {
    const out = execFileSync('ss', ['-Hltn', `sport = :${port}`], { encoding: 'utf8' }).trim();
    return out ? Number(out.split(/\s+/)[2]) : null;
  } catch {
    return null;
  }
}

const refused = (port: number) =>
  new Promise<boolean>((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.once('connect', () => (s.destroy(), resolve(false)));
    s.once('error', (e: NodeJS.ErrnoException) => resolve(e.code === 'ECONNREFUSED'));
  });

describe.skipIf(process.platform === 'win32')('duplicateListener: more accepts per turn of the event loop', () => {
  it('one descriptor accepts one connection per turn; eight accept eight, and every connection gets in once', async () => {
    let n1 = 0;
    const one = await listen(1000, (s) => (n1++, s.destroy()));
    const r1 = await acceptedInOneTurn((one.address() as net.AddressInfo).port, () => n1);
    expect(r1.firstTurn).toBe(1); // what libuv does alone: the reason for the module
    await eventually(() => n1 === CLIENTS);
    one.close();

    let n8 = 0;
    const seen = new Set<string>();
    const onConn = (s: net.Socket) => {
      n8++;
      seen.add(`${s.remotePort}`);
      s.destroy();
    };
    const main = await listen(1000, onConn);
    const extra = await duplicateListener(main, { count: 8, backlog: 1000, onConnection: onConn });
    expect(extra).toHaveLength(7);
    const port = (main.address() as net.AddressInfo).port;
    const r8 = await acceptedInOneTurn(port, () => n8);
    expect(r8.firstTurn).toBe(8);
    await eventually(() => n8 === CLIENTS);
    expect(seen.size).toBe(CLIENTS); // each connection accepted by exactly one descriptor
    for (const s of [main, ...extra]) s.close();
    for (const s of [...r1.sockets, ...r8.sockets]) s.destroy();
  });

  it('keeps the accept queue the first listen asked for (a descriptor listening with the default would cut it to 511)', async () => {
    const main = await listen(1000, (s) => s.destroy());
    const port = (main.address() as net.AddressInfo).port;
    const before = listenBacklog(port);
    const extra = await duplicateListener(main, { count: 4, backlog: 1000, onConnection: (s) => s.destroy() });
    expect(extra).toHaveLength(3);
    const after = listenBacklog(port);
    for (const s of [main, ...extra]) s.close();
    if (before === null) return; // no ss on this machine
    expect(before).toBe(Math.min(1000, before));
    expect(after).toBe(before);
    expect(after).toBeGreaterThan(511);
  });

  it('the socket listens until every descriptor is closed', async () => {
    const main = await listen(100, (s) => s.destroy());
    const port = (main.address() as net.AddressInfo).port;
    const extra = await duplicateListener(main, { count: 3, backlog: 100, onConnection: (s) => s.destroy() });
    main.close();
    expect(await refused(port)).toBe(false);
    for (const s of extra) s.close();
    expect(await refused(port)).toBe(true);
  });

  it('a descriptor that fails to listen is left out at once: the others serve, the start does not wait for the timeout', async () => {
    const main = await listen(100, (s) => s.destroy());
    const port = (main.address() as net.AddressInfo).port;
    // the fault: the second descriptor that comes back fails to listen (closed, an error emitted)
    const real = net.Server.prototype.listen;
    let handles = 0;
    const spy = vi.spyOn(net.Server.prototype, 'listen').mockImplementation(function (this: net.Server, ...args: unknown[]) {
      const h = args[0] as { close?: () => void; fd?: number } | undefined;
      if (h && typeof h === 'object' && 'fd' in h && ++handles === 2) {
        h.close?.();
        process.nextTick(() => this.emit('error', Object.assign(new Error('listen EBADF (injected)'), { code: 'EBADF' })));
        return this;
      }
      return (real as (...a: unknown[]) => net.Server).apply(this, args);
    });
    const t0 = Date.now();
    let extra: net.Server[];
    try {
      extra = await duplicateListener(main, { count: 4, backlog: 100, onConnection: (s) => s.destroy(), timeoutMs: 60_000 });
    } finally {
      spy.mockRestore();
    }
    expect(Date.now() - t0).toBeLessThan(30_000);
    expect(extra).toHaveLength(2);
    expect(extra.every((s) => s.listening)).toBe(true);
    main.close();
    expect(await refused(port)).toBe(false); // the two that listen keep the socket
    for (const s of extra) s.close();
    expect(await refused(port)).toBe(true);
  }, 45_000);

  it('count 1 adds nothing and starts no helper', async () => {
    const main = await listen(100, (s) => s.destroy());
    expect(await duplicateListener(main, { count: 1, backlog: 100, onConnection: () => undefined })).toEqual([]);
    main.close();
  });
});

describe.skipIf(process.platform === 'win32')('embedded broker with mqtt.acceptors', () => {
  let t: TestService;
  beforeAll(async () => {
    t = await createTestService('sqlite');
  });
  afterAll(async () => {
    await t.close();
  });

  it('serves MQTT on every descriptor, and stop() frees the port', async () => {
    const broker = new EmbeddedBroker({ host: '127.0.0.1', port: 0, db: t.ctx.db.kysely, log: createLogger({ level: 'silent' }), acceptors: 4, storedBeforeAck: [] });
    await broker.start();
    const url = broker.address()!;
    const port = Number(new URL(url).port);
    // anonymous clients are refused (CONNACK 4/5) by whichever descriptor accepted them: each gets
    // an MQTT answer, not a dead socket
    const answers = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        new Promise<number | string>((resolve) => {
          const c = mqtt.connect(url, { clientId: `nobody-${i}`, reconnectPeriod: 0, connectTimeout: 5000 });
          c.once('error', (e: Error & { code?: number | string }) => (c.end(true), resolve(e.code ?? e.message)));
          c.once('connect', () => (c.end(true), resolve('connected')));
        }),
      ),
    );
    expect(answers.every((a) => typeof a === 'number' && a > 0)).toBe(true);
    await broker.stop();
    expect(await refused(port)).toBe(true);
  });
});
