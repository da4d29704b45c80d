// More than one connection accepted per turn of the event loop on one listening socket.
//
// Since libuv 1.45 (Node 20; libuv PR #3696 "unix: don't accept() connections in a loop") a
// listening socket accepts one connection per turn of the event loop. A central service busy with
// a reconnecting fleet turns its loop 100-200 times a second, so a wave of 10,000 terminals waits
// in the kernel's accept queue (full at net.core.somaxconn, further SYNs dropped and retransmitted
// after 1, 3, 7 ... s) for over a minute while the service has time to spare; terminals whose
// 10 s CONNACK timeout runs out there retry, and each retry costs a connection again (measured:
// the accept queue full at 4,096 for the first 40 s of a 10,000-terminal storm, connections
// growing by 120-170 a second).
//
// Node 20 has no SO_REUSEPORT for net.Server (`reusePort` came in Node 22.12), so the same socket
// is given more file descriptors instead: the listening handle goes to a short-lived helper process
// over IPC (SCM_RIGHTS) and comes back `count - 1` times, each a new descriptor of the same socket.
// A net.Server on each is registered with epoll separately, and every turn of the loop accepts up
// to one connection per descriptor. They share one accept queue, so nothing is reordered or lost
// between them; closing them all closes the socket.
import { spawn } from 'node:child_process';
import net from 'node:net';

/** The helper: sends the handle it got back `n` times, then exits (a 'message' listener keeps the IPC channel referenced while the sends wait for their acknowledgements). */
const HELPER = `process.on('message', (m, h) => {
  let left = m.n;
  if (!h || left < 1) process.exit(0);
  for (let i = 0; i < m.n; i++) process.send('dup', h, () => { if (--left === 0) { h.close(); process.disconnect(); } });
});`;

/** how long duplicateListener waits for the helper process to exit after it is done with it */
const HELPER_EXIT_WAIT_MS = 2_000;

/** Default of mqtt.acceptors. */
export const ACCEPTORS = 32;

export interface DuplicateOptions {
  /** descriptors in all, the server's own included (1: none added) */
  count: number;
  /**
   * the accept queue asked for: every listen() on a descriptor sets the socket's backlog again
   * (Node's default 511 would shrink the queue the first listen asked for)
   */
  backlog: number;
  onConnection: (socket: net.Socket) => void;
  /** give up after this long (default 10 s): the server goes on with the descriptors it has */
  timeoutMs?: number;
}

/**
 * Adds `count - 1` servers on new descriptors of `server`'s listening socket, each emitting its
 * connections to onConnection. Returns the added servers (close them with the original). Where it
 * cannot (not a TCP server, Windows, the helper failed) it returns what it got, possibly none:
 * the original server keeps working alone.
 */
export async function duplicateListener(server: net.Server, o: DuplicateOptions): Promise<net.Server[]> {
  const want = Math.max(0, Math.floor(o.count) - 1);
  const handle = (server as unknown as { _handle?: unknown })._handle;
  if (want === 0 || !handle || process.platform === 'win32') return [];
  const child = spawn(process.execPath, ['-e', HELPER], { stdio: ['ignore', 'ignore', 'ignore', 'ipc'], env: {} });
  const added: net.Server[] = [];
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no answer from the helper within ${o.timeoutMs ?? 10_000} ms`)), o.timeoutMs ?? 10_000);
      const finish = (err?: Error) => {
        clearTimeout(timer);
        child.removeAllListeners('message');
        if (err) reject(err);
        else resolve();
      };
      child.on('error', finish);
      let received = 0;
      /** descriptors listening or given up on: the wait ends when every one is either */
      let settled = 0;
      const settle = () => {
        if (++settled === want) finish();
      };
      child.on('exit', () => {
        if (received < want) finish(new Error(`the helper exited after ${received} of ${want} descriptors`));
      });
      child.on('message', (_m, h) => {
        if (!h) return;
        received++;
        const s = net.createServer(o.onConnection);
        added.push(s);
        // a descriptor that cannot listen is left out (the others and the original go on), at once:
        // the start does not wait for the timeout
        s.once('error', () => {
          added.splice(added.indexOf(s), 1);
          settle();
        });
        // the backlog as a positional argument: Node ignores options.backlog when listening on a handle
        s.listen(h as never, o.backlog, settle);
      });
      child.send({ n: want }, handle as never);
    });
  } catch {
    // whatever came back is used; the server works with one descriptor in any case
  } finally {
    // the helper holds its own descriptors of the socket until it is gone: wait for it (bounded),
    // so that once the servers are closed no process keeps the port listening
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      child.kill();
      await Promise.race([exited, new Promise<void>((resolve) => setTimeout(resolve, HELPER_EXIT_WAIT_MS).unref())]);
    }
  }
  return added;
}
