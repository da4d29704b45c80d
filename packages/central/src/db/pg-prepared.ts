// Named prepared statements for the hot path on PostgreSQL. Kysely hands pg every query as an
// unnamed statement, which the server parses and plans again on every call; for the few fixed
// statements of the booking path (registered by shipments/sqlq.ts) that is most of the server's
// work. The pool given to Kysely wraps each client's query(): a registered text is sent with a
// stable name, so pg parses it once per connection and then only binds and executes it.
// Only registered texts are named: the set is small and fixed, so per-connection statement
// caches stay bounded (dynamic queries such as IN lists stay unnamed).
import { CompiledQuery, PostgresDriver, type DatabaseConnection, type TransactionSettings } from 'kysely';
import pg from 'pg';

const names = new Map<string, string>();

/** Marks a query text (with $1.. placeholders) to be sent as a named prepared statement. */
export function registerPreparedStatement(text: string): void {
  if (!names.has(text)) names.set(text, `locker_${names.size + 1}`);
}

/**
 * Db.pgRead: the rows of one statement straight from the pool (pool.query), a registered text by
 * its name when `named` (database.pgPreparedStatements), as arrays with `array`. Sent as a
 * PooledRead rather than a pg Query.
 */
export function pooledReader(pool: pg.Pool, named: boolean): <R>(text: string, values: readonly unknown[], array?: boolean) => Promise<R[]> {
  // pool.query with a query object and a callback: the pool takes a client, hands it the object
  // and releases the client when the callback is called
  const query = pool.query.bind(pool) as unknown as (q: PooledRead, values: undefined, cb: (err: Error | null, rows?: unknown[]) => void) => void;
  return <R>(text: string, values: readonly unknown[], array = false): Promise<R[]> =>
    new Promise<R[]>((resolve, reject) => {
      query(new PooledRead(text, values, named ? names.get(text) : undefined, array), undefined, (err, rows) => (err ? reject(err) : resolve(rows as R[])));
    });
}

type Parser = (v: string) => unknown;
/** a registered text's row shape, from the first RowDescription the server sent for it */
interface RowShape {
  names: string[];
  parsers: Parser[];
}
const rowShapes = new Map<string, RowShape>();
const prepareValue = (pg as unknown as { utils: { prepareValue: (v: unknown, seen?: unknown) => unknown } }).utils.prepareValue;

/** what the client hands a query object of the messages the server sent (pg's Submittable interface) */
interface RowMessage {
  fields: (string | null)[];
}
interface DescriptionMessage {
  fields: { name: string; dataTypeID: number; format?: string }[];
}
interface SubmitConnection extends PgConnection {
  describe(m: { type: 'P' | 'S'; name?: string }): void;
  close(m: { type: 'P' | 'S'; name?: string }): void;
  sync(): void;
  submittedNamedStatements: Record<string, string>;
  stream: { cork?: () => void; uncork?: () => void };
}

/**
 * One read as pg's client runs a query object (the Submittable interface pg-cursor uses): Parse
 * (unless the named statement is parsed on this connection), Bind, Execute, Sync, in one write.
 * A registered text's row shape (column names and type parsers) is learnt from the first answer's
 * RowDescription and kept, so later reads of it send no Describe: the server describes nothing and
 * the client builds no field parsers per call (pg's Query describes the portal on every call; its
 * RowDescription handling was 12 of 338 us of a PostgreSQL GetPickUpPoints in a perf profile). A
 * prepared statement's result shape cannot change under it: the server refuses with "cached plan
 * must not change result type" instead. Values go as pg sends them (utils.prepareValue, text format).
 */
export class PooledRead {
  callback?: (err: Error | null, rows?: unknown[]) => void;
  private shape: RowShape | undefined;
  private readonly rows: unknown[] = [];
  private failed = false;
  constructor(
    readonly text: string,
    private readonly values: readonly unknown[],
    readonly name: string | undefined,
    private readonly array: boolean,
  ) {}

  submit(connection: SubmitConnection): null {
    const name = this.name;
    const parsed = name !== undefined && (connection.parsedStatements[name] === this.text || connection.submittedNamedStatements[name] === this.text);
    this.shape = name === undefined ? undefined : rowShapes.get(this.text);
    connection.stream.cork?.();
    try {
      if (!parsed) {
        connection.parse({ text: this.text, ...(name ? { name } : {}) });
        if (name) connection.submittedNamedStatements[name] = this.text;
      }
      try {
        connection.bind({ statement: name, values: this.values as unknown[], valueMapper: prepareValue } as Parameters<PgConnection['bind']>[0]);
      } catch (err) {
        // a value pg cannot send: close what was parsed and end the exchange, as pg's Query does
        connection.close({ type: 'S', name });
        connection.sync();
        this.handleError(err as Error);
        return null;
      }
      if (!this.shape) connection.describe({ type: 'P', name: '' });
      connection.execute({});
      connection.sync();
    } finally {
      connection.stream.uncork?.();
    }
    return null;
  }

  handleRowDescription(msg: DescriptionMessage): void {
    const shape: RowShape = { names: msg.fields.map((f) => f.name), parsers: msg.fields.map((f) => pg.types.getTypeParser(f.dataTypeID, (f.format ?? 'text') as 'text') as Parser) };
    this.shape = shape;
    if (this.name) rowShapes.set(this.text, shape);
  }

  handleDataRow(msg: RowMessage): void {
    const { parsers, names } = this.shape!;
    const f = msg.fields;
    if (this.array) {
      const row = new Array<unknown>(f.length);
      for (let i = 0; i < f.length; i++) row[i] = f[i] === null ? null : parsers[i]!(f[i]!);
      this.rows.push(row);
    } else {
      const row: Record<string, unknown> = {};
      for (let i = 0; i < f.length; i++) row[names[i]!] = f[i] === null ? null : parsers[i]!(f[i]!);
      this.rows.push(row);
    }
  }

  handleCommandComplete(): void {}
  handleEmptyQuery(): void {}
  handlePortalSuspended(): void {}
  handleCopyInResponse(connection: { sendCopyFail(m: string): void }): void {
    connection.sendCopyFail('a read takes no COPY data');
  }
  handleCopyData(): void {}

  /** an error message from the server, or the connection lost: the read ends with it (once) */
  handleError(err: Error): void {
    if (this.failed) return;
    this.failed = true;
    this.callback?.(err);
  }

  handleReadyForQuery(): void {
    if (!this.failed) this.callback?.(null, this.rows);
  }
}

/**
 * The texts LockerPostgresDriver sends to open and end a transaction: the pooled client (patch)
 * holds this BEGIN back until the transaction's first statement. Our own texts, so the client
 * recognises the driver's intent rather than whatever text Kysely happens to send; on a client
 * without the patch they are plain BEGIN, COMMIT and ROLLBACK.
 */
export const BEGIN_WITH_FIRST_STATEMENT = 'BEGIN /* locker: written with the first statement */';
const COMMIT = 'COMMIT';
const ROLLBACK = 'ROLLBACK';

/**
 * Kysely's PostgreSQL driver, opening a transaction with BEGIN_WITH_FIRST_STATEMENT (a transaction
 * with an isolation level or access mode opens as Kysely opens it) and ending it with our COMMIT
 * and ROLLBACK texts, which a held-back BEGIN answers without a word to the server.
 */
export class LockerPostgresDriver extends PostgresDriver {
  override async beginTransaction(connection: DatabaseConnection, settings: TransactionSettings): Promise<void> {
    if (settings.isolationLevel || settings.accessMode) return super.beginTransaction(connection, settings);
    await connection.executeQuery(CompiledQuery.raw(BEGIN_WITH_FIRST_STATEMENT));
  }
  override async commitTransaction(connection: DatabaseConnection): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw(COMMIT));
  }
  override async rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw(ROLLBACK));
  }
}

const PATCHED = Symbol('locker.prepared');
/** the client was asked to BEGIN and has not sent it yet (see patch) */
const BEGIN_PENDING = Symbol('locker.beginPending');

/** what pg answers a statement without rows: Kysely reads command, rowCount and rows */
const done = (command: string) => Promise.resolve({ command, rowCount: null, rows: [], fields: [] });

/** pg's connection as a Query's prepare() sees it (the protocol writers) */
interface PgConnection {
  parse(q: { text: string; name?: string }): void;
  bind(c: { portal?: string; statement?: string; values?: unknown[] }): void;
  execute(c: { portal?: string; rows?: number }): void;
  parsedStatements: Record<string, string>;
}

type QueryCallback = (err: Error | null, res?: unknown) => void;
interface PgQuery {
  prepare(connection: PgConnection): void;
  handleCommandComplete(msg: unknown, connection: PgConnection): void;
}
const BaseQuery = (pg as unknown as { Query: new (config: { text: string; values: unknown[]; name?: string }, values: undefined, cb: QueryCallback) => PgQuery }).Query;

/**
 * A transaction's BEGIN written together with its first statement, in one write and one round
 * trip: BEGIN through the extended protocol (Parse, Bind, Execute) without a Sync, then the
 * statement as pg writes it (ending with the Sync). The server answers BEGIN's CommandComplete
 * first (swallowed here), then the statement's rows and ReadyForQuery as for the statement alone.
 * An error in either ends the query with that error; the server skips to the Sync, and the
 * caller's ROLLBACK follows as it would after a failed statement.
 */
class BeginThenQuery extends BaseQuery {
  private begun = false;
  override prepare(connection: PgConnection): void {
    connection.parse({ text: 'BEGIN' });
    connection.bind({});
    connection.execute({});
    super.prepare(connection);
  }
  override handleCommandComplete(msg: unknown, connection: PgConnection): void {
    if (!this.begun) {
      this.begun = true; // BEGIN's
      return;
    }
    super.handleCommandComplete(msg, connection);
  }
}

/**
 * Each pooled client: a registered text goes by its name (`named`); and a transaction's BEGIN
 * (BEGIN_WITH_FIRST_STATEMENT, from LockerPostgresDriver) is held back and written with the
 * transaction's first statement (BeginThenQuery), which saves a round trip per transaction (a
 * booking is then three: BEGIN with the locker taken, the shipment's rows, COMMIT). A transaction
 * that sends no statement commits or rolls back without a word to the server. A first statement without values
 * (a SAVEPOINT, a multi-statement text) or a named one not yet parsed on this connection goes
 * after a BEGIN of its own, as before.
 */
function patch(client: pg.PoolClient, named: boolean): pg.PoolClient {
  const c = client as pg.PoolClient & { [PATCHED]?: true; [BEGIN_PENDING]?: boolean; connection?: PgConnection };
  if (c[PATCHED]) return client;
  const query = client.query.bind(client) as (...a: unknown[]) => Promise<unknown>;
  const send = (text: unknown, values?: unknown, cb?: unknown): unknown => {
    const name = named && typeof text === 'string' ? names.get(text) : undefined;
    if (name && Array.isArray(values) && cb === undefined) return query({ name, text, values });
    return cb === undefined ? (values === undefined ? query(text) : query(text, values)) : query(text, values, cb);
  };
  (c as { query: unknown }).query = (text: unknown, values?: unknown, cb?: unknown) => {
    if (cb === undefined && typeof text === 'string' && (values === undefined || (Array.isArray(values) && values.length === 0))) {
      if (text === BEGIN_WITH_FIRST_STATEMENT && !c[BEGIN_PENDING]) {
        c[BEGIN_PENDING] = true;
        return done('BEGIN');
      }
      if (c[BEGIN_PENDING] && (text === COMMIT || text === ROLLBACK)) {
        c[BEGIN_PENDING] = false;
        return done(text);
      }
    }
    if (!c[BEGIN_PENDING]) return send(text, values, cb);
    c[BEGIN_PENDING] = false;
    const name = named && typeof text === 'string' ? names.get(text) : undefined;
    const parsed = name === undefined || c.connection?.parsedStatements[name] === text;
    if (typeof text === 'string' && Array.isArray(values) && values.length > 0 && cb === undefined && parsed) {
      return new Promise((resolve, reject) => {
        void query(new BeginThenQuery({ text, values, ...(name ? { name } : {}) }, undefined, (err, res) => (err ? reject(err) : resolve(res))));
      });
    }
    return query(BEGIN_WITH_FIRST_STATEMENT).then(() => send(text, values, cb));
  };
  c[PATCHED] = true;
  return client;
}

/**
 * The pool as Kysely's PostgresDialect sees it: clients whose transactions send BEGIN with their
 * first statement, and (`named`, database.pgPreparedStatements) whose registered queries are prepared.
 */
export function withPreparedStatements(pool: pg.Pool, named = true): pg.Pool {
  return new Proxy(pool, {
    get(target, prop, receiver) {
      if (prop === 'connect') {
        return async (...args: unknown[]) => {
          if (args.length) return (target.connect as (...a: unknown[]) => unknown)(...args);
          return patch(await target.connect(), named);
        };
      }
      const v = Reflect.get(target, prop, receiver) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}
