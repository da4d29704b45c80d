// A store of its own (SQLite in a temp folder, or a PostgreSQL schema of its own), migrated only up
// to a given migration: for tests of what a migration does to the data already there.
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { Migrator, type MigrationResultSet } from 'kysely';
import { openDatabase, type Db } from '../../src/db/database';
import { migrations } from '../../src/db/migrations';
import { pgUrl } from './harness';

export interface MigrationStore {
  db: Db;
  /** applies every migration named up to `upTo` (inclusive, by name order) not applied yet */
  migrate(upTo: string): Promise<MigrationResultSet>;
  close(): Promise<void>;
}

export async function migrationStore(engine: 'sqlite' | 'postgres'): Promise<MigrationStore> {
  const schema = engine === 'postgres' ? `m_${crypto.randomBytes(6).toString('hex')}` : undefined;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-migration-'));
  const db = await openDatabase({ url: engine === 'postgres' ? pgUrl()! : path.join(dir, 'm.db'), pgSchema: schema });
  const provider = (upTo: string) => ({ getMigrations: async () => Object.fromEntries(Object.entries(migrations).filter(([name]) => name <= upTo)) });
  return {
    db,
    migrate: (upTo) => new Migrator({ db: db.kysely, provider: provider(upTo), allowUnorderedMigrations: true, ...(schema ? { migrationTableSchema: schema } : {}) }).migrateToLatest(),
    async close() {
      await db.close();
      fs.rmSync(dir, { recursive: true, force: true });
      if (schema) {
        const c = new pg.Client({ connectionString: pgUrl()! });
        await c.connect();
        await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
        await c.end();
      }
    },
  };
}
