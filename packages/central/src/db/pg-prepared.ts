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

/** the name a registered text goes by (registerPreparedStatement), or undefined */
export function preparedName(text: string): string | undefined {
  return names.get(text);
}

/**
 * Db.pgRead: the rows of one statement straight from the pool (pool.query), a registered text by
 * its name when `named` (database.pgPreparedStatements), as arrays with `array`. Sent as a
 * PgStatement rather than a pg Query.
 */
export function pooledReader(pool: pg.Pool, named: boolean): <R>(text: string, values: readonly unknown[], array?: boolean) => Promise<R[]> {
  // pool.query with a query object and a callback: the pool takes a client, hands it the object
  // and releases the client when the callback is called
  const query = pool.query.bind(pool) as unknown as (q: PgStatement, values: undefined, cb: (err: Error | null, rows?: unknown) => void) => void;
  return <R>(text: string, values: readonly unknown[], array = false): Promise<R[]> =>
    new Promise<R[]>((resolve, reject) => {
      query(new PgStatement(text, values, named ? names.get(text) : undefined, array ? 'array' : 'object'), undefined, (err, rows) => (err ? reject(err) : resolve(rows as R[])));
    });
}

type Parser = (v: string) => unknown;
/** a registered statement's row shape on one connection, from the first description the server sent */
interface RowShape {
  names: string[];
  parsers: Parser[];
}
/** the shape of a statement that returns no rows (the server answered its Describe with NoData) */
const NO_ROWS: RowShape = { names: [], parsers: [] };
/**
 * Per connection (the server's promise that a prepared statement's result shape cannot change is
 * per connection: another connection may have parsed the same text after a migration), per text.
 */
const rowShapes = new WeakMap<object, Map<string, RowShape>>();
const prepareValue = (pg as unknown as { utils: { prepareValue: (v: unknown, seen?: unknown) => unknown } }).utils.prepareValue;
/** a CommandComplete tag: command, then (INSERT) an oid and the rows, or the rows (as pg reads it) */
const COMMAND_TAG = /^([A-Za-z]+)(?: (\d+))?(?: (\d+))?/;

/** what the client hands a query object of the messages the server sent (pg's Submittable interface) */
interface RowMessage {
  fields: (string | null)[];
}
interface DescriptionMessage {
  fields: { name: string; dataTypeID: number; format?: string }[];
}
interface SubmitConnection extends PgConnection {
  describe(m: { type: 'P' | 'S'; name?: string }): void;
  sync(): void;
  submittedNamedStatements: Record<string, string>;
  stream: { cork?: () => void; uncork?: () => void };
}

/**
 * How a PgStatement answers: its rows as arrays or as objects (Db.pgRead), or as pg answers a
 * query, `{ command, rowCount, rows }` with object rows (what Kysely's PostgreSQL driver reads).
 */
type AnswerMode = 'array' | 'object' | 'result';

/**
 * One statement as pg's client runs a query object (the Submittable interface pg-cursor uses):
 * Parse (unless the named statement is parsed on this connection), Bind, Execute, Sync, in one
 * write; with `begin`, a BEGIN through the extended protocol first (Parse, Bind, Execute, no Sync),
 * whose CommandComplete is passed over (see patch). A registered statement's row shape (column
 * names and type parsers, or none) is learnt from its first answer's description on a connection
 * and kept for that connection, so later runs of it there send no Describe: the server describes
 * nothing and the client builds no field parsers per call. pg's Query describes the portal on
 * every call; its RowDescription handling was 12 of 338 us of a PostgreSQL GetPickUpPoints in a
 * perf profile, and an in-process read of 12 columns cost 49-74 us of Node CPU with it against
 * 36-46 us. The shape is per connection because that is what the server promises: a statement
 * prepared on a connection cannot change its result shape there ("cached plan must not change
 * result type"), while another connection may parse the same text after a migration added a
 * column. A row that does not match its shape, or a value its parser refuses, ends the statement
 * with an error at ReadyForQuery (as pg's Query does), never thrown into the socket's reader.
 * Values go as pg sends them (utils.prepareValue, text format), prepared before anything is
 * written; rows are parsed with pg's type parsers.
 */
export class PgStatement {
  callback?: (err: Error | null, answer?: unknown) => void;
  private shape: RowShape | undefined;
  /** the connection's shapes (submit) */
  private shapes: Map<string, RowShape> | undefined;
  /** a row that could not be read: the statement ends with this error at ReadyForQuery, as pg's Query does */
  private rowError: Error | undefined;
  private described = false;
  private readonly rows: unknown[] = [];
  private failed = false;
  private beginDone: boolean;
  private command: string | null = null;
  private rowCount: number | null = null;
  constructor(
    readonly text: string,
    private readonly values: readonly unknown[],
    readonly name: string | undefined,
    private readonly mode: AnswerMode,
    begin = false,
    private readonly commit = false,
  ) {
    this.beginDone = !begin;
  }
  /** with `commit`: the statement's own CommandComplete has come (the next one is COMMIT's) */
  private statementDone = false;
  /** with `commit`: the tag COMMIT answered (ROLLBACK when the transaction had failed before) */
  private commitTag: string | undefined;

  submit(connection: SubmitConnection): Error | null {
    const name = this.name;
    // the values as pg sends them (text format), before anything is written: a value that cannot
    // be sent (a cyclic object) ends the statement with nothing on the wire (the client reports
    // the returned error and moves on)
    let values: unknown[];
    try {
      values = this.values.map((v) => prepareValue(v));
    } catch (err) {
      return err as Error;
    }
    const parsed = name !== undefined && (connection.parsedStatements[name] === this.text || connection.submittedNamedStatements[name] === this.text);
    let shapes = rowShapes.get(connection);
    if (!shapes) rowShapes.set(connection, (shapes = new Map()));
    this.shapes = shapes;
    this.shape = name === undefined ? undefined : shapes.get(this.text);
    connection.stream.cork?.();
    try {
      if (!this.beginDone) {
        connection.parse({ text: 'BEGIN' });
        connection.bind({});
        connection.execute({});
      }
      if (!parsed) {
        connection.parse({ text: this.text, ...(name ? { name } : {}) });
        if (name) connection.submittedNamedStatements[name] = this.text;
      }
      connection.bind({ statement: name, values });
      if (!this.shape) {
        connection.describe({ type: 'P', name: '' });
        this.described = true;
      }
      connection.execute({});
      if (this.commit) {
        connection.parse({ text: 'COMMIT' });
        connection.bind({});
        connection.execute({});
      }
      connection.sync();
    } finally {
      connection.stream.uncork?.();
    }
    return null;
  }

  handleRowDescription(msg: DescriptionMessage): void {
    this.shape = { names: msg.fields.map((f) => f.name), parsers: msg.fields.map((f) => pg.types.getTypeParser(f.dataTypeID, (f.format ?? 'text') as 'text') as Parser) };
  }

  handleDataRow(msg: RowMessage): void {
    if (this.rowError) return;
    const f = msg.fields;
    const shape = this.shape;
    if (!shape || shape.parsers.length !== f.length) {
      this.rowError = new Error(`${this.name ?? 'a statement'}: a row of ${f.length} columns where ${shape?.parsers.length ?? 'none'} were described`);
      return;
    }
    const { parsers, names } = shape;
    try {
      if (this.mode === 'array') {
        const row = new Array<unknown>(f.length);
        for (let i = 0; i < f.length; i++) row[i] = f[i] === null ? null : parsers[i]!(f[i]!);
        this.rows.push(row);
      } else {
        const row: Record<string, unknown> = {};
        for (let i = 0; i < f.length; i++) row[names[i]!] = f[i] === null ? null : parsers[i]!(f[i]!);
        this.rows.push(row);
      }
    } catch (err) {
      // a value its type parser refuses: reported at ReadyForQuery, never thrown into the socket's reader
      this.rowError = err as Error;
    }
  }

  handleCommandComplete(msg: { text?: string }): void {
    if (!this.beginDone) {
      this.beginDone = true; // BEGIN's
      return;
    }
    if (this.statementDone) {
      this.commitTag = msg.text; // COMMIT's
      return;
    }
    this.statementDone = this.commit;
    const m = COMMAND_TAG.exec(msg.text ?? '');
    if (m) {
      this.command = m[1]!;
      this.rowCount = m[3] ? Number(m[3]) : m[2] ? Number(m[2]) : null;
    }
  }
  handleEmptyQuery(): void {}
  handlePortalSuspended(): void {}
  handleCopyInResponse(connection: { sendCopyFail(m: string): void }): void {
    connection.sendCopyFail('a statement of ours takes no COPY data');
  }
  handleCopyData(): void {}

  /** an error message from the server, or the connection lost: the statement ends with it (once) */
  handleError(err: Error): void {
    if (this.failed) return;
    this.failed = true;
    this.callback?.(err);
  }

  handleReadyForQuery(): void {
    if (this.failed) return;
    // with `commit`: a COMMIT the server answered ROLLBACK (the transaction had failed before) is a failure
    if (this.commit && this.commitTag !== 'COMMIT') {
      this.handleError(new CommitRefused(this.commitTag));
      return;
    }
    if (this.rowError) {
      this.shapes?.delete(this.text); // described again next time
      // with `commit` the server has committed: only the statement's answer is lost (readError)
      if (!this.commit) {
        this.handleError(this.rowError);
        return;
      }
    }
    // described and answered: a registered text's shape on this connection is known from now on (no rows: NoData)
    else if (this.described && this.name !== undefined) this.shapes?.set(this.text, this.shape ?? NO_ROWS);
    this.callback?.(
      null,
      this.mode === 'result' ? { command: this.command, rowCount: this.rowCount, rows: this.rows, fields: [], ...(this.rowError ? { readError: this.rowError } : {}) } : this.rows,
    );
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

/**
 * The last parameter of a statement to be written with its transaction's COMMIT (sqlq.ts
 * rawQueryAtCommit): the pooled client (patch) answers Kysely at once with no rows and holds the
 * statement back; COMMIT then writes it, and COMMIT, in one round trip (with the transaction's
 * held-back BEGIN too when it is the transaction's only statement). Its answer, or its error, comes
 * through `promise` then. Another statement on the transaction first writes it on its own (no
 * COMMIT); a ROLLBACK drops it (never written) and `promise` fails.
 */
export class AtCommit {
  readonly promise: Promise<unknown>;
  resolve!: (v: unknown) => void;
  reject!: (e: unknown) => void;
  constructor() {
    this.promise = new Promise((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
    this.promise.catch(() => {}); // observed by whoever awaits it; a rollback's is nobody's concern
  }
}

/**
 * The server answered a COMMIT with ROLLBACK (no error): the transaction had failed before, and
 * whoever sent the COMMIT had not seen it (an error swallowed). Nothing of it was committed.
 */
export class CommitRefused extends Error {
  readonly code = 'COMMIT_ROLLED_BACK';
  constructor(tag: string | undefined) {
    super(`COMMIT was answered ${tag ?? 'with no tag'}: the transaction had failed, nothing of it was committed`);
  }
}

/** A statement held back for COMMIT (AtCommit) was dropped by a ROLLBACK or a new checkout of its client. */
export class AtCommitDropped extends Error {
  readonly code = 'AT_COMMIT_DROPPED';
  constructor(why: string) {
    super(`a statement held back for COMMIT was not written: ${why}`);
  }
}

const PATCHED = Symbol('locker.prepared');
/** the statement held back for COMMIT on this client (AtCommit) */
const HELD = Symbol('locker.held');
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

/**
 * Each pooled client: a registered text goes by its name (`named`), as a PgStatement (no Describe
 * once its shape is known); and a transaction's BEGIN (BEGIN_WITH_FIRST_STATEMENT, from
 * LockerPostgresDriver) is held back and written with the transaction's first statement (a
 * PgStatement with `begin`), which saves a round trip per transaction. A statement held for
 * COMMIT (AtCommit) is written with the COMMIT, which saves another: a booking is two round trips,
 * BEGIN with the locker taken, then the shipment's rows with COMMIT. A transaction that sends no
 * statement commits or rolls back without a word to the server. A first statement without values
 * (a SAVEPOINT, a multi-statement text) or a named one not yet parsed on this connection goes
 * after a BEGIN of its own, as before.
 */
function patch(client: pg.PoolClient, named: boolean): pg.PoolClient {
  const c = client as pg.PoolClient & { [PATCHED]?: true; [BEGIN_PENDING]?: boolean; [HELD]?: { text: string; values: unknown[]; at: AtCommit }; connection?: PgConnection };
  if (c[PATCHED]) {
    // a statement held back by a transaction that ended without COMMIT nor ROLLBACK (its connection was released mid-way)
    const held = c[HELD];
    c[HELD] = undefined;
    held?.at.reject(new AtCommitDropped('its client was released'));
    return client;
  }
  const query = client.query.bind(client) as (...a: unknown[]) => Promise<unknown>;
  /** a PgStatement on this client, answered as pg answers a query (Kysely reads command, rowCount and rows) */
  const statement = (text: string, values: unknown[], name: string | undefined, begin: boolean, commit = false) =>
    new Promise((resolve, reject) => {
      void query(new PgStatement(text, values, name, 'result', begin, commit), undefined, (err: Error | null, res: unknown) => (err ? reject(err) : resolve(res)));
    });
  const send = (text: unknown, values?: unknown, cb?: unknown): unknown => {
    const name = named && typeof text === 'string' ? names.get(text) : undefined;
    if (name && Array.isArray(values) && cb === undefined) return statement(text as string, values, name, false);
    return cb === undefined ? (values === undefined ? query(text) : query(text, values)) : query(text, values, cb);
  };
  (c as { query: unknown }).query = (text: unknown, values?: unknown, cb?: unknown): unknown => {
    const held = c[HELD];
    if (held) {
      c[HELD] = undefined;
      if (cb === undefined && text === COMMIT) {
        // the held statement, then COMMIT, in one write (with the BEGIN first when it is still held
        // back, unless the statement is a named one not yet parsed here: pg would take BEGIN's
        // ParseComplete for its own, and a Parse of it that failed would leave it marked parsed)
        const name = named ? names.get(held.text) : undefined;
        let begun: Promise<unknown> | undefined;
        if (c[BEGIN_PENDING] === true && name !== undefined && c.connection?.parsedStatements[name] !== held.text) begun = query(BEGIN_WITH_FIRST_STATEMENT);
        const begin = c[BEGIN_PENDING] === true && begun === undefined;
        c[BEGIN_PENDING] = false;
        return (begun ?? Promise.resolve()).then(() => statement(held.text, held.values, name, begin, true)).then(
          (res) => {
            const readError = (res as { readError?: Error }).readError;
            // committed; a row the client could not read loses only the statement's answer
            if (readError) held.at.reject(readError);
            else held.at.resolve(res);
            return { command: 'COMMIT', rowCount: null, rows: [], fields: [] };
          },
          (err: unknown) => {
            held.at.reject(err);
            throw err;
          },
        );
      }
      if (cb === undefined && text === ROLLBACK) held.at.reject(new AtCommitDropped('the transaction rolled back'));
      // a callback query (pool.query, never a Kysely transaction's): the client went back to the
      // pool with the statement still held (its transaction never ended); it is not written
      else if (cb !== undefined) held.at.reject(new AtCommitDropped('its client was released'));
      else {
        // any other statement (another held one too): the held one goes first, on its own
        const again = c.query as unknown as (t: unknown, v?: unknown, cb?: unknown) => unknown;
        return (again(held.text, held.values) as Promise<unknown>).then(
          (res) => {
            held.at.resolve(res);
            return again(text, values, cb);
          },
          (err: unknown) => {
            held.at.reject(err);
            throw err;
          },
        );
      }
    }
    if (cb === undefined && typeof text === 'string' && Array.isArray(values) && values[values.length - 1] instanceof AtCommit) {
      // held back for COMMIT; Kysely gets an empty answer now (rawQueryAtCommit reads the real one from the AtCommit)
      c[HELD] = { text, values: values.slice(0, -1), at: values[values.length - 1] as AtCommit };
      return done('SELECT');
    }
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
    if (!c[BEGIN_PENDING]) {
      // a COMMIT the server answers ROLLBACK (the transaction had failed, an error swallowed): a failure
      if (cb === undefined && text === COMMIT)
        return (query(text) as Promise<{ command?: string }>).then((r) => {
          if (r.command !== 'COMMIT') throw new CommitRefused(r.command);
          return r;
        });
      return send(text, values, cb);
    }
    c[BEGIN_PENDING] = false;
    const name = named && typeof text === 'string' ? names.get(text) : undefined;
    const parsed = name === undefined || c.connection?.parsedStatements[name] === text;
    if (typeof text === 'string' && Array.isArray(values) && values.length > 0 && cb === undefined && parsed) return statement(text, values, name, true);
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
