// PostgreSQL: the small fixed reads of the tenant API (and of the edge sync) pipelined on a few
// connections of their own, instead of one pooled connection per read.
//
// Through the pool, each read takes a connection, writes its statement, and waits for the answer:
// one write and one read of a socket per read, and each write wakes a sleeping server process.
// On the 2-core test machine a perf profile of GetAccount on PostgreSQL put 80 of its 300 us of
// the service's CPU in writev, half of it waking the processes on the other end. Here every read
// issued during one turn of the event loop goes to the least loaded of `connections` clients in
// pg's pipeline mode, each statement with its own Sync (an error fails only its own statement),
// and a client's statements of that turn leave in one write (the socket is corked until
// setImmediate). The server answers them in order on the same connection.
//
// Only the registered (named, fixed, bounded) texts come here (db/prepared-read.ts); the heavy
// reads (a GetShipments page, an account search) stay on the pool, where they run side by side
// and block nothing behind them. A read whose connection dies before its answer (the server
// restarted, the backend was terminated) is sent once more on a fresh connection: a read changes
// nothing, so sending it twice is safe.
import pg from 'pg';
import { PgStatement, preparedName } from './pg-prepared';

interface Corkable {
  cork(): void;
  uncork(): void;
}

/** the parts of pg's Client this module drives (pg 8.23's pipeline mode) */
type PipeClient = pg.Client & {
  _queryQueue: unknown[];
  _sentQueryQueue: unknown[];
  _queryable: boolean;
  _ending: boolean;
  _pulseQueryQueue(): void;
  connection: { stream: Corkable };
};

export interface PipelineStats {
  /** reads answered (rows or a server error) */
  reads: number;
  /** reads sent again because their connection died first */
  resent: number;
  /** connections opened since the start */
  opened: number;
}

/** the server ended the session with this error (FATAL: the backend was terminated, the server shuts down) */
function sessionEnded(err: Error): boolean {
  const severity = (err as { severity?: string }).severity;
  return severity === 'FATAL' || severity === 'PANIC';
}

/** a connection with reads outstanding and no answer for this long is taken for dead (its socket destroyed: the reads are resent) */
export const STALL_MS = 30_000;

export class PgReadPipelines {
  private readonly clients: (PipeClient | undefined)[];
  /** per client: reads sent and not yet answered (the one the server is running included), and when it last answered */
  private readonly outstanding = new Map<PipeClient, { n: number; progressAt: number }>();
  private watchdog: NodeJS.Timeout | undefined;
  /** the sockets corked during this turn of the event loop, uncorked at setImmediate */
  private readonly corked = new Set<Corkable>();
  private flushScheduled = false;
  /** per client whose connect() failed: the error it failed with (the server's, when it answered) */
  private readonly startupErrors = new WeakMap<PipeClient, Error>();
  private ended = false;
  readonly stats: PipelineStats = { reads: 0, resent: 0, opened: 0 };

  constructor(
    private readonly config: pg.ClientConfig,
    private readonly named: boolean,
    connections: number,
    private readonly stallMs = STALL_MS,
  ) {
    if (!(connections >= 1)) throw new RangeError('PgReadPipelines: at least one connection');
    this.clients = new Array<PipeClient | undefined>(connections).fill(undefined);
  }

  /**
   * A connection that a firewall or NAT dropped without a word answers nothing, and its socket
   * would wait for the kernel's retransmission timeout (about 15 minutes): one that holds reads
   * and has answered none for stallMs is destroyed, so its reads are resent on a fresh one.
   */
  private watch(): void {
    if (this.watchdog) return;
    this.watchdog = setInterval(() => {
      const now = Date.now();
      for (const [c, o] of this.outstanding) if (o.n > 0 && now - o.progressAt > this.stallMs) (c.connection.stream as unknown as { destroy(): void }).destroy();
    }, Math.max(10, Math.min(5_000, this.stallMs / 3)));
    this.watchdog.unref();
  }

  /** The rows of one statement ($1.. placeholders), as arrays with `array`; a registered text by its name. */
  read<R>(text: string, values: readonly unknown[], array = false): Promise<R[]> {
    return new Promise<R[]>((resolve, reject) => this.send(text, values, array, true, resolve as (rows: unknown[]) => void, reject));
  }

  private send(text: string, values: readonly unknown[], array: boolean, again: boolean, resolve: (rows: unknown[]) => void, reject: (err: Error) => void): void {
    if (this.ended) {
      reject(new Error('PostgreSQL read pipelines closed'));
      return;
    }
    const c = this.pick();
    const st = new PgStatement(text, values, this.named ? preparedName(text) : undefined, array ? 'array' : 'object');
    const o = this.outstanding.get(c)!;
    if (o.n++ === 0) o.progressAt = Date.now();
    st.callback = (err, rows) => {
      o.n--;
      o.progressAt = Date.now();
      if (o.n === 0 && !this.clients.includes(c)) this.outstanding.delete(c);
      if (!err) {
        this.stats.reads++;
        resolve(rows as unknown[]);
        return;
      }
      // the server ended the session with this statement's error: no read goes there any more
      if (sessionEnded(err)) this.retire(c);
      // decided once the connection's own events have fired (a socket that closes fails every
      // statement in flight first, and reports its end after)
      setImmediate(() => {
        if (again && !this.ended && (sessionEnded(err) || !this.clients.includes(c))) {
          // the connection died before the answer: once more on a fresh one
          this.stats.resent++;
          try {
            this.send(text, values, array, false, resolve, reject);
          } catch (e) {
            reject(e as Error);
          }
          return;
        }
        this.stats.reads++;
        // a connection the server refused at startup (a FATAL: no such database, too many
        // connections, authentication): its reads fail with that error, not pg's bare "Connection
        // terminated unexpectedly"
        reject(this.startupErrors.get(c) ?? err);
      });
    };
    const stream = c.connection.stream;
    if (!this.corked.has(stream)) {
      stream.cork();
      this.corked.add(stream);
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        setImmediate(this.flush);
      }
    }
    // pg's client.query refuses query objects other than its own in pipeline mode (pg-cursor keeps
    // a portal open across round trips); a PgStatement runs to its Sync like pg's Query, so it is
    // queued as client.query would queue it
    c._queryQueue.push(st);
    c._pulseQueryQueue();
  }

  private readonly flush = (): void => {
    this.flushScheduled = false;
    for (const s of this.corked) s.uncork();
    this.corked.clear();
  };

  /** the client with the fewest reads outstanding, the one the server is running included (a free slot is opened first) */
  private pick(): PipeClient {
    let best: PipeClient | undefined;
    let bestLoad = Infinity;
    for (let i = 0; i < this.clients.length; i++) {
      let c = this.clients[i];
      if (!c || !c._queryable || c._ending) {
        if (c) this.retire(c);
        c = this.open(i);
      }
      const load = this.outstanding.get(c)!.n;
      if (load === 0) return c;
      if (load < bestLoad) {
        best = c;
        bestLoad = load;
      }
    }
    return best!;
  }

  private open(i: number): PipeClient {
    // keepalive: an idle connection that a firewall dropped is found out and replaced
    const c = new pg.Client({ keepAlive: true, keepAliveInitialDelayMillis: 10_000, ...this.config, pipeline: true } as pg.ClientConfig) as PipeClient;
    this.clients[i] = c;
    this.outstanding.set(c, { n: 0, progressAt: Date.now() });
    this.watch();
    this.stats.opened++;
    const drop = () => this.retire(c);
    // errors reach the statements in flight (pg fails them all); the client is replaced on the next read
    c.on('error', drop);
    c.on('end', drop);
    c.connect().catch((err: Error) => {
      this.startupErrors.set(c, err);
      drop();
    });
    return c;
  }

  /**
   * A client no read is sent to any more (its slot opens a new one on the next read). Its socket
   * is destroyed unless it is closing already: pg leaves it open after some client-side errors
   * (an unexpected message, a failed authentication step), with reads waiting on it.
   */
  private retire(c: PipeClient): void {
    const i = this.clients.indexOf(c);
    if (i >= 0) this.clients[i] = undefined;
    const o = this.outstanding.get(c);
    if (o && o.n === 0) this.outstanding.delete(c);
    const stream = c.connection.stream as unknown as { destroyed?: boolean; destroy(): void };
    if (!c._ending && !stream.destroyed) stream.destroy();
  }

  /** Ends every connection after the statements already sent are answered. */
  async end(): Promise<void> {
    this.ended = true;
    if (this.watchdog) clearInterval(this.watchdog);
    this.flush();
    const open = this.clients.filter((c): c is PipeClient => c !== undefined);
    this.clients.fill(undefined);
    await Promise.all(open.map((c) => c.end().catch(() => undefined)));
  }
}
