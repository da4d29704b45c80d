// Kysely's PostgreSQL introspector lists every column of every table in the whole database and
// calls pg_get_serial_sequence() for each. The Migrator uses it only to ask "does my migration
// table exist?", and on a database where other schemas change at the same time (several test
// runs, or other applications) that scan fails now and then with "column ... of relation ...
// does not exist" (a relation dropped between the catalog snapshot and the function call). This
// introspector answers from pg_class alone, for the schemas on the search path: cheap, and no
// per-column lookups that can race.
import { PostgresDialect, sql, type DatabaseIntrospector, type DatabaseMetadata, type Driver, type Kysely, type PostgresDialectConfig, type SchemaMetadata, type TableMetadata } from 'kysely';
import { LockerPostgresDriver } from './pg-prepared';

export class SearchPathIntrospector implements DatabaseIntrospector {
  constructor(private readonly db: Kysely<any>) {}

  async getSchemas(): Promise<SchemaMetadata[]> {
    const r = await sql<{ name: string }>`SELECT nspname AS name FROM pg_catalog.pg_namespace`.execute(this.db);
    return r.rows;
  }

  async getTables(): Promise<TableMetadata[]> {
    const r = await sql<{ name: string; schema: string; kind: string }>`
      SELECT c.relname AS name, n.nspname AS schema, c.relkind AS kind
      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
      WHERE c.relkind IN ('r', 'v', 'p') AND n.nspname = ANY (current_schemas(false))`.execute(this.db);
    return r.rows.map((t) => ({ name: t.name, schema: t.schema, isView: t.kind === 'v', columns: [] }));
  }

  async getMetadata(): Promise<DatabaseMetadata> {
    return { tables: await this.getTables() };
  }
}

/** PostgresDialect with the search-path introspector and LockerPostgresDriver (db/pg-prepared.ts). */
export class LockerPostgresDialect extends PostgresDialect {
  constructor(private readonly config: PostgresDialectConfig) {
    super(config);
  }
  override createDriver(): Driver {
    return new LockerPostgresDriver(this.config);
  }
  override createIntrospector(db: Kysely<any>): DatabaseIntrospector {
    return new SearchPathIntrospector(db);
  }
}
