// Named prepared statements for the hot path on PostgreSQL. Kysely hands pg every query as an
// unnamed statement, which the server parses and plans again on every call; for the few fixed
// statements of the booking path (registered by shipments/sqlq.ts) that is most of the server's
// work. The pool given to Kysely wraps each client's query(): a registered text is sent with a
// stable name, so pg parses it once per connection and then only binds and executes it.
// Only registered texts are named: the set is small and fixed, so per-connection statement
// caches stay bounded (dynamic queries such as IN lists stay unnamed).
import type pg from 'pg';

const names = new Map<string, string>();

/** Marks a query text (with $1.. placeholders) to be sent as a named prepared statement. */
export function registerPreparedStatement(text: string): void {
  if (!names.has(text)) names.set(text, `locker_${names.size + 1}`);
}

/** The name a registered text is sent under (undefined: not registered, sent unnamed). */
export function preparedName(text: string): string | undefined {
  return names.get(text);
}

const PATCHED = Symbol('locker.prepared');

function patch(client: pg.PoolClient): pg.PoolClient {
  const c = client as pg.PoolClient & { [PATCHED]?: true };
  if (c[PATCHED]) return client;
  const query = client.query.bind(client) as (...a: unknown[]) => unknown;
  (c as { query: unknown }).query = (text: unknown, values?: unknown, cb?: unknown) => {
    const name = typeof text === 'string' ? names.get(text) : undefined;
    if (name && Array.isArray(values) && cb === undefined) return query({ name, text, values });
    return cb === undefined ? (values === undefined ? query(text) : query(text, values)) : query(text, values, cb);
  };
  c[PATCHED] = true;
  return client;
}

/** The pool as Kysely's PostgresDialect sees it: clients whose registered queries are prepared. */
export function withPreparedStatements(pool: pg.Pool): pg.Pool {
  return new Proxy(pool, {
    get(target, prop, receiver) {
      if (prop === 'connect') {
        return async (...args: unknown[]) => {
          if (args.length) return (target.connect as (...a: unknown[]) => unknown)(...args);
          return patch(await target.connect());
        };
      }
      const v = Reflect.get(target, prop, receiver) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}
