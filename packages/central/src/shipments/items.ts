// A shipment as an item of the GetShipments family, written as JSON by the database, and kept
// written in the shipment's row, item_json, so a page reads one stored text per row (both engines).
import { createHash } from 'node:crypto';
import { type Kysely, PostgresAdapter, sql } from 'kysely';
import { jsonArraySql, jsonQuoteSql, type Engine } from '../db/json-sql';
import { runPgTransaction } from './tx';

/** The names of an item come from these rows; `booked` names only while the shipment is active. */
export const PAGE_JOINS = 'LEFT JOIN accounts fa ON fa.uid = s.from_user_uid LEFT JOIN accounts ta ON ta.uid = s.to_user_uid LEFT JOIN pups p ON p.uid = s.pup_uid LEFT JOIN lockers l ON l.uid = s.locker_uid';

/**
 * A row of the page with a stored address, as a JSON array (queries.ts PageRow): the booked names
 * only while the shipment is active (toItem reads them only then), so the array of an inactive
 * shipment does not change when a pick up point or a locker is renamed.
 */
const PAGE_COLS =
  's.uid, s.created_at, s.type_code, s.state_start, s.state_code, s.active, s.reference_no, s.reference_case_no, s.description, s.from_user_uid, s.to_user_uid, s.from_address, s.to_address, s.swaps_shipment_uid, s.pup_uid, fa.user_name, ta.user_name, CASE WHEN s.active <> 0 THEN p.name END, CASE WHEN s.active <> 0 THEN l.name END';

/**
 * Each item of the page written as its JSON by the database, exactly as the response serializer
 * writes toItem's object (the ShipmentItem schema's keys in its order, absent optional keys left
 * out, strings quoted as JSON.stringify quotes them: db/json-sql.ts). The item goes into the
 * answer as it is (JsonText): no JSON.parse, no object, no serializer walk per row (GetShipments on
 * SQLite: 375-398 us of CPU per request before, 297-303 us after, in alternating runs). A row with
 * a stored address (our own writes store none) comes as its JSON array instead, mapped by toItem
 * as before: addresses are parsed leniently (parseAddress). On both engines it runs only in the
 * triggers, the syncs and PostgreSQL's refresh below, and the page reads the stored text (SQLite:
 * 150 us against 655 us a page).
 */
function itemSql(engine: Engine): string {
  const q = (v: string) => jsonQuoteSql(engine, v);
  const apiTime = (c: string) => q(engine === 'sqlite' ? `CASE WHEN substr(${c}, -1) = 'Z' THEN substr(${c}, 1, length(${c}) - 1) ELSE ${c} END` : `CASE WHEN right(${c}, 1) = 'Z' THEN left(${c}, -1) ELSE ${c} END`);
  const optional = (key: string, v: string) => `CASE WHEN ${v} IS NULL THEN '' ELSE ',"${key}":' || ${q(v)} END`;
  const user = (side: 'from' | 'to', alias: string) =>
    `CASE WHEN coalesce(s.${side}_user_uid, '') = '' THEN '' ELSE ${optional(`${side}UserName`, `${alias}.user_name`)} || ',"${side}UserUid":' || ${q(`s.${side}_user_uid`)} END`;
  const booked = (v: string) => q(`CASE WHEN s.active <> 0 THEN ${v} END`);
  return (
    `CASE WHEN coalesce(s.from_address, '') <> '' OR coalesce(s.to_address, '') <> '' THEN ${jsonArraySql(engine, PAGE_COLS)} ELSE ` +
    `format('{"shipmentUid":%s,"dateCreated":%s,"typeCode":%s,"stateStart":%s,"stateCode":%s%s%s%s%s%s,"swapsShipmentUid":%s,"bookedPupName":%s,"bookedPupUid":%s,"bookedLockerName":%s}', ` +
    [
      q('s.uid'),
      apiTime('s.created_at'),
      q('s.type_code'),
      apiTime('s.state_start'),
      q('s.state_code'),
      optional('referenceNo', 's.reference_no'),
      optional('referenceCaseNo', 's.reference_case_no'),
      optional('description', 's.description'),
      user('from', 'fa'),
      user('to', 'ta'),
      q('s.swaps_shipment_uid'),
      booked('p.name'),
      booked('s.pup_uid'),
      booked('l.name'),
    ].join(', ') +
    ') END'
  );
}

/** itemSql per engine, written once (the triggers below write it into the rows) */
export const ITEM_SQL: Record<Engine, string> = { sqlite: itemSql('sqlite'), postgres: itemSql('postgres') };

// --- SQLite: the item kept in the row ------------------------------------------------------------
//
// A page of 100 items (GetShipments, the bench's store of 100,000): reading the stored text costs
// 150 us against 655 us for writing each item from its columns and the four joined names (the read
// thread was what bounded the page's throughput). The database keeps item_json right on every
// write path, by triggers: a shipment's insert and every update of a column the item shows, and a
// change to a name it shows (an account's user name, a pick up point's or a locker's name: those
// write the items of the shipments that show it).
// The triggers are derived from ITEM_SQL: syncShipmentItems (run by migration 206 and after every
// migration) writes them anew, and every item with them, whenever their text differs from this
// code's. PostgreSQL keeps it too, with the names' changes written after they commit (below).

/** the item of the shipment with rowid `rowid` */
const itemOf = (rowid: string) => `(SELECT ${ITEM_SQL.sqlite} FROM shipments s ${PAGE_JOINS} WHERE s.rowid = ${rowid})`;
/** writes the item of every shipment `where` selects (an UPDATE of item_json alone fires no trigger) */
const writeItems = (where: string) => `UPDATE shipments SET item_json = ${itemOf('shipments.rowid')} WHERE ${where};`;
/** the columns the item shows */
const ITEM_COLUMNS = 'uid, created_at, type_code, state_start, state_code, active, reference_no, reference_case_no, description, from_user_uid, to_user_uid, from_address, to_address, swaps_shipment_uid, pup_uid, locker_uid';
/**
 * the shipments of any tenant where `column` is one of `values` (the tenant-first indexes serve it;
 * every shipment's tenant is in tenants: a shipment is written only for an authenticated tenant,
 * and a tenant is never deleted, provisioning keeps one whose client id changed)
 */
const ofTenants = (column: string, values: string) => `SELECT rowid FROM shipments WHERE tenant_uid IN (SELECT uid FROM tenants) AND ${column} IN (${values})`;
const touchUsers = (uids: string) => writeItems(`rowid IN (${ofTenants('from_user_uid', uids)} UNION ${ofTenants('to_user_uid', uids)})`);
// A pick up point's or a locker's name shows only on an active shipment (booked): only those are written.
// (+active: the planner would otherwise walk a tenant's active shipments instead of the point's)
const touchPups = (uids: string) => writeItems(`rowid IN (${ofTenants('pup_uid', uids)} AND +active = 1)`);
const touchLockers = (uids: string) => writeItems(`active = 1 AND locker_uid IN (${uids})`);

/** name -> its CREATE TRIGGER text, as sqlite_schema keeps it */
export const SHIPMENT_ITEM_TRIGGERS: Record<string, string> = {
  shipments_item_insert: `CREATE TRIGGER shipments_item_insert AFTER INSERT ON shipments BEGIN ${writeItems('rowid = NEW.rowid')} END`,
  shipments_item_update: `CREATE TRIGGER shipments_item_update AFTER UPDATE OF ${ITEM_COLUMNS} ON shipments BEGIN ${writeItems('rowid = NEW.rowid')} END`,
  accounts_item_insert: `CREATE TRIGGER accounts_item_insert AFTER INSERT ON accounts BEGIN ${touchUsers('NEW.uid')} END`,
  accounts_item_update: `CREATE TRIGGER accounts_item_update AFTER UPDATE OF uid, user_name ON accounts WHEN OLD.uid IS NOT NEW.uid OR OLD.user_name IS NOT NEW.user_name BEGIN ${touchUsers('OLD.uid, NEW.uid')} END`,
  accounts_item_delete: `CREATE TRIGGER accounts_item_delete AFTER DELETE ON accounts BEGIN ${touchUsers('OLD.uid')} END`,
  pups_item_insert: `CREATE TRIGGER pups_item_insert AFTER INSERT ON pups BEGIN ${touchPups('NEW.uid')} END`,
  pups_item_update: `CREATE TRIGGER pups_item_update AFTER UPDATE OF uid, name ON pups WHEN OLD.uid IS NOT NEW.uid OR OLD.name IS NOT NEW.name BEGIN ${touchPups('OLD.uid, NEW.uid')} END`,
  pups_item_delete: `CREATE TRIGGER pups_item_delete AFTER DELETE ON pups BEGIN ${touchPups('OLD.uid')} END`,
  lockers_item_insert: `CREATE TRIGGER lockers_item_insert AFTER INSERT ON lockers BEGIN ${touchLockers('NEW.uid')} END`,
  lockers_item_update: `CREATE TRIGGER lockers_item_update AFTER UPDATE OF uid, name ON lockers WHEN OLD.uid IS NOT NEW.uid OR OLD.name IS NOT NEW.name BEGIN ${touchLockers('OLD.uid, NEW.uid')} END`,
  lockers_item_delete: `CREATE TRIGGER lockers_item_delete AFTER DELETE ON lockers BEGIN ${touchLockers('OLD.uid')} END`,
};

/** the partial index the locker triggers find a locker's active shipments by */
const SHIPMENTS_ACTIVE_LOCKER_INDEX = 'CREATE INDEX IF NOT EXISTS shipments_active_locker ON shipments (locker_uid) WHERE active = 1';

/** how Db.migrate() names a rewrite of every item among the migrations it applied */
export const SHIPMENT_ITEMS_WRITTEN = 'shipment items written anew (shipments/items.ts)';

/** the item triggers a store holds (every name ends in _item_insert, _item_update or _item_delete) */
async function storedTriggers(db: Kysely<any>): Promise<Map<string, string>> {
  const { rows } = await sql<{ name: string; sql: string }>`SELECT name, sql FROM sqlite_schema WHERE type = 'trigger' AND (name GLOB '*_item_insert' OR name GLOB '*_item_update' OR name GLOB '*_item_delete')`.execute(db);
  return new Map(rows.map((r) => [r.name, r.sql]));
}

const inStep = (have: Map<string, string>) => {
  const wanted = Object.entries(SHIPMENT_ITEM_TRIGGERS);
  return have.size === wanted.length && wanted.every(([name, text]) => have.get(name) === text);
};

/**
 * SQLite: the item triggers as this code writes them. When any differs from sqlite_schema's (a
 * new store, or code whose item changed), all are written anew and every shipment's item with
 * them, in one transaction: all shipments rewritten, about 2 s per 100,000 on the EPYC host,
 * holding the write lock. A store in step costs one read and takes no write lock. Inside the
 * caller's transaction (migration 206) it writes them whatever the store holds. Returns whether it wrote them.
 * PostgreSQL: syncPgShipmentItems below.
 */
export async function syncShipmentItems(db: Kysely<any>): Promise<boolean> {
  if (db.getExecutor().adapter instanceof PostgresAdapter) return syncPgShipmentItems(db);
  if (!db.isTransaction) {
    if (inStep(await storedTriggers(db))) return false;
    // all or nothing: triggers written without their items would be taken as in step next time
    return db.transaction().execute((trx) => syncShipmentItems(trx));
  }
  // The first statement writes (an UPDATE takes the write lock even when it matches no row): the
  // lock is taken before anything is read, waiting as busy_timeout says, not by upgrading a read,
  // which SQLite refuses at once when another connection wrote meanwhile (in migration 206 a read
  // of the table's columns comes first: the store is being created or migrated, at its start)
  await sql`UPDATE shipments SET item_json = NULL WHERE 0`.execute(db);
  for (const name of (await storedTriggers(db)).keys()) await sql.raw(`DROP TRIGGER ${name}`).execute(db);
  await sql.raw(SHIPMENTS_ACTIVE_LOCKER_INDEX).execute(db);
  for (const text of Object.values(SHIPMENT_ITEM_TRIGGERS)) await sql.raw(text).execute(db);
  // every item written anew
  await sql.raw(writeItems('1')).execute(db);
  return true;
}

// --- PostgreSQL: the item kept in the row --------------------------------------------------------
//
// The same column, kept by PL/pgSQL triggers: a shipment's item is written in the row before it is
// stored (a BEFORE trigger sets NEW.item_json: no second write of the row). PostgreSQL's own page
// floor (pgbench, 64 connections, prepared, the bench's page of 100 among 100,000): 1,944-2,137
// pages/s written from the columns and four joined names, 8,121-10,534 pages/s read as stored.
//
// A change to a name an item shows is written into the items after the change has committed, by
// refreshShipmentItems: the name's trigger only records which name changed (shipment_item_refresh),
// so a name's change waits for nothing and holds no lock on shipments. Writing the items in the
// name's own transaction deadlocked: a door event locks its shipment (FOR UPDATE), then updates
// it, then its locker; a rename that locked shipments in between waited for that shipment while
// the door event waited for the rename's lock or its locker row.
// The refresh runs in a transaction of its own that takes nothing before an EXCLUSIVE lock on
// shipments: it waits until every transaction that locked or wrote a shipment has ended (one of
// them may have read the old name before the change committed; every shipment statement locks the
// table before its trigger reads a name) and holds nothing another transaction waits for while it
// waits; once it holds the lock no row of shipments is locked by anyone else, so its UPDATE waits
// for nothing. A shipment written after it began reads the names after the change committed
// (each statement of a PL/pgSQL function takes its own snapshot: this holds in READ COMMITTED,
// the service's isolation level; a database whose default is REPEATABLE READ would keep old
// names). Plain reads do not conflict with its lock (EXCLUSIVE admits ACCESS SHARE), but writers
// queue behind it, and a reader may wait for a pooled connection they hold: it waits for its lock
// at most REFRESH_LOCK_TIMEOUT_MS, then leaves the names to the next round. It runs after
// provisioning and RemoveAccount (the ways the service changes a name), and every second on each
// instance (the worker: a name changed by hand, an account made again under a removed uid, a refresh
// that gave up).
// A rename shown on many shipments (a dispatcher main account's user name is on every shipment
// it booked) writes them all under the lock, as on SQLite (1.3-1.6 s per 100,000 there).
// An account's insert (CreateOrGetAccount, often) records its uid only when a shipment already
// names it (an account removed and made again under its uid).

/** the item of the row `s` (a row of shipments in scope as `s`: NEW, or an UPDATE's target) */
const pgItemOfRow = `(SELECT ${ITEM_SQL.postgres} FROM (SELECT 1) AS one ${PAGE_JOINS})`;
const pgOfTenants = (column: string, values: string) => `SELECT uid FROM shipments WHERE tenant_uid IN (SELECT uid FROM tenants) AND ${column} = ANY (${values})`;
type NameTable = 'accounts' | 'pups' | 'lockers';
const NAME_TABLES: NameTable[] = ['accounts', 'pups', 'lockers'];
/** the shipments whose item shows the name of a row of `table` with one of `uids` (a text[]) */
const pgWhereOf: Record<NameTable, (uids: string) => string> = {
  accounts: (uids) => `uid IN (${pgOfTenants('from_user_uid', uids)} UNION ${pgOfTenants('to_user_uid', uids)})`,
  pups: (uids) => `uid IN (${pgOfTenants('pup_uid', uids)} AND active = 1)`,
  lockers: (uids) => `active = 1 AND locker_uid = ANY (${uids})`,
};
const pgNameColumn = { accounts: 'user_name', pups: 'name', lockers: 'name' } as const;

/** the table the name triggers record into (migration 207) */
export const PG_REFRESH_TABLE = 'CREATE TABLE IF NOT EXISTS shipment_item_refresh (kind text NOT NULL, uid text NOT NULL)';

/** name -> the function's CREATE OR REPLACE text */
const PG_ITEM_FUNCTIONS: Record<string, string> = {
  shipment_item_write: `CREATE OR REPLACE FUNCTION shipment_item_write() RETURNS trigger LANGUAGE plpgsql AS $item$
BEGIN
  SELECT ${ITEM_SQL.postgres} INTO NEW.item_json FROM (SELECT NEW.*) AS s ${PAGE_JOINS};
  RETURN NEW;
END $item$`,
  ...Object.fromEntries(
    NAME_TABLES.map((table) => [
      `shipment_items_of_${table}`,
      `CREATE OR REPLACE FUNCTION shipment_items_of_${table}() RETURNS trigger LANGUAGE plpgsql AS $item$
BEGIN
  IF TG_OP = 'INSERT' THEN
    -- a new row's name shows only where a shipment already names its uid
    IF EXISTS (SELECT 1 FROM shipments WHERE ${pgWhereOf[table]('ARRAY[NEW.uid]')}) THEN
      INSERT INTO shipment_item_refresh (kind, uid) VALUES ('${table}', NEW.uid);
    END IF;
  ELSIF TG_OP = 'DELETE' THEN
    INSERT INTO shipment_item_refresh (kind, uid) VALUES ('${table}', OLD.uid);
  ELSE
    INSERT INTO shipment_item_refresh (kind, uid) VALUES ('${table}', OLD.uid), ('${table}', NEW.uid);
  END IF;
  RETURN NULL;
END $item$`,
    ]),
  ),
};

/** name -> [its table, its CREATE TRIGGER text] */
const PG_ITEM_TRIGGERS: Record<string, [string, string]> = {
  shipments_item_write: ['shipments', `CREATE TRIGGER shipments_item_write BEFORE INSERT OR UPDATE OF ${ITEM_COLUMNS} ON shipments FOR EACH ROW EXECUTE FUNCTION shipment_item_write()`],
  ...Object.fromEntries(
    NAME_TABLES.flatMap((table) => {
      const name = pgNameColumn[table];
      const fn = `EXECUTE FUNCTION shipment_items_of_${table}()`;
      return [
        [`${table}_item_insert`, [table, `CREATE TRIGGER ${table}_item_insert AFTER INSERT ON ${table} FOR EACH ROW ${fn}`]],
        [`${table}_item_update`, [table, `CREATE TRIGGER ${table}_item_update AFTER UPDATE OF uid, ${name} ON ${table} FOR EACH ROW WHEN (OLD.uid IS DISTINCT FROM NEW.uid OR OLD.${name} IS DISTINCT FROM NEW.${name}) ${fn}`]],
        [`${table}_item_delete`, [table, `CREATE TRIGGER ${table}_item_delete AFTER DELETE ON ${table} FOR EACH ROW ${fn}`]],
      ];
    }),
  ),
};

const digest = (v: unknown) => createHash('sha256').update(JSON.stringify(v)).digest('hex').slice(0, 32);

/** what a PostgreSQL store keeps as the version of its item code (a comment on shipment_item_write): a digest of every text above */
export const PG_ITEMS_VERSION = digest([PG_ITEM_FUNCTIONS, PG_ITEM_TRIGGERS, SHIPMENTS_ACTIVE_LOCKER_INDEX]);

/** each trigger's version (a comment on the trigger): a digest of its text */
const PG_TRIGGER_VERSIONS: Record<string, string> = Object.fromEntries(Object.entries(PG_ITEM_TRIGGERS).map(([name, [, text]]) => [name, digest(text)]));

/** this schema's item triggers and their version comments, and the functions' version */
async function pgStored(db: Kysely<any>): Promise<{ version: string | null | undefined; triggers: Map<string, string | null> }> {
  const { rows } = await sql<{ v: string | null }>`SELECT obj_description(p.oid, 'pg_proc') AS v FROM pg_proc p JOIN pg_namespace ns ON ns.oid = p.pronamespace WHERE p.proname = 'shipment_item_write' AND ns.nspname = current_schema()`.execute(db);
  const { rows: triggers } = await sql<{ name: string; v: string | null }>`SELECT t.tgname AS name, obj_description(t.oid, 'pg_trigger') AS v FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace ns ON ns.oid = c.relnamespace WHERE ns.nspname = current_schema() AND NOT t.tgisinternal AND t.tgname = ANY (${Object.keys(PG_ITEM_TRIGGERS)}::text[])`.execute(db);
  return { version: rows[0]?.v, triggers: new Map(triggers.map((t) => [t.name, t.v])) };
}

/** whether this schema holds this code's item functions and every item trigger as this code writes it */
async function pgInStep(db: Kysely<any>): Promise<boolean> {
  const { version, triggers } = await pgStored(db);
  return version === PG_ITEMS_VERSION && Object.entries(PG_TRIGGER_VERSIONS).every(([name, v]) => triggers.get(name) === v);
}

/** PostgreSQL errors a lock wait may end in: a deadlock, or a wait past lock_timeout */
const isLockWaitError = (e: unknown) => ['40P01' /* deadlock_detected */, '55P03' /* lock_not_available */].includes((e as { code?: string } | null)?.code ?? '');

/**
 * PostgreSQL: as syncShipmentItems (inside migration 207's transaction: written there). When the
 * schema is not in step (pgInStep), one transaction takes an EXCLUSIVE lock on shipments first
 * (instances starting together wait for each other; no shipment is locked or written meanwhile),
 * looks again, replaces the functions (no lock on a table), creates only the triggers that are
 * missing or not this code's (CREATE TRIGGER locks its table against writers; DROP TRIGGER against
 * readers too), and writes every item and the version. A lock wait that ends in a deadlock with a
 * live transaction (an older instance's, in a rolling deploy), or lasts 30 s, is tried again.
 */
async function syncPgShipmentItems(db: Kysely<any>): Promise<boolean> {
  if (db.isTransaction) return writePgShipmentItems(db);
  if (await pgInStep(db)) return false;
  return runPgTransaction(
    db,
    async (trx) => {
      // LOCAL: this transaction's own (a migration's transaction may hold other migrations)
      await sql`SET LOCAL lock_timeout = '30s'`.execute(trx);
      return writePgShipmentItems(trx);
    },
    { retryable: isLockWaitError, pauseMs: (attempt) => 100 * attempt },
  );
}

/** syncPgShipmentItems' transaction (migration 207's, or its own) */
async function writePgShipmentItems(trx: Kysely<any>): Promise<boolean> {
  await sql`LOCK TABLE shipments IN EXCLUSIVE MODE`.execute(trx);
  if (await pgInStep(trx)) return false;
  await sql.raw(PG_REFRESH_TABLE).execute(trx);
  await sql.raw(SHIPMENTS_ACTIVE_LOCKER_INDEX).execute(trx);
  for (const text of Object.values(PG_ITEM_FUNCTIONS)) await sql.raw(text).execute(trx);
  const { triggers } = await pgStored(trx);
  for (const [name, [table, text]] of Object.entries(PG_ITEM_TRIGGERS)) {
    if (triggers.get(name) === PG_TRIGGER_VERSIONS[name]) continue;
    if (triggers.has(name)) await sql.raw(`DROP TRIGGER ${name} ON ${table}`).execute(trx);
    await sql.raw(text).execute(trx);
    await sql.raw(`COMMENT ON TRIGGER ${name} ON ${table} IS '${PG_TRIGGER_VERSIONS[name]}'`).execute(trx);
  }
  // every item is written below: what was waiting to be refreshed is done. Taken first: a name
  // changed while the UPDATE runs (its snapshot misses it; only a trigger created here locks the
  // name tables) stays recorded for the next refresh
  await sql`DELETE FROM shipment_item_refresh`.execute(trx);
  await sql.raw(`UPDATE shipments s SET item_json = ${pgItemOfRow}`).execute(trx);
  await sql.raw(`COMMENT ON FUNCTION shipment_item_write() IS '${PG_ITEMS_VERSION}'`).execute(trx);
  return true;
}

/**
 * PostgreSQL: writes the items that show a name changed since the last refresh (see above), in a
 * transaction of its own; returns how many recorded names it took (a rename records the old and
 * the new uid's row: 2), or 'busy' when it could not get its lock within lockTimeoutMs
 * (REFRESH_LOCK_TIMEOUT_MS; the names stay recorded). Nothing to do costs one read. SQLite writes
 * them in the name's own statement: 0.
 */
export async function refreshShipmentItems(db: Kysely<any>, lockTimeoutMs = REFRESH_LOCK_TIMEOUT_MS): Promise<number | 'busy'> {
  const timeoutMs = checkRefreshLockTimeout(lockTimeoutMs);
  if (!(db.getExecutor().adapter instanceof PostgresAdapter)) return 0;
  const { rows: any } = await sql`SELECT 1 FROM shipment_item_refresh LIMIT 1`.execute(db);
  if (!any.length) return 0;
  try {
    return await db.transaction().execute(async (trx) => {
      // While it waits, writers of shipments queue behind it: it waits at most this long, and the
      // names stay recorded for the next round (the worker's, a second later)
      await sql.raw(`SET LOCAL lock_timeout = '${timeoutMs}ms'`).execute(trx);
      await sql`LOCK TABLE shipments IN EXCLUSIVE MODE`.execute(trx);
      const { rows } = await sql<{ kind: NameTable; uid: string }>`DELETE FROM shipment_item_refresh RETURNING kind, uid`.execute(trx);
      for (const table of NAME_TABLES) {
        const uids = [...new Set(rows.filter((r) => r.kind === table).map((r) => r.uid))];
        // the uids as one parameter, named by the condition as changed.uids
        if (uids.length) await sql`UPDATE shipments s SET item_json = ${sql.raw(pgItemOfRow)} FROM (SELECT ${uids}::text[] AS uids) AS changed WHERE ${sql.raw(pgWhereOf[table]('changed.uids'))}`.execute(trx);
      }
      return rows.length;
    });
  } catch (err) {
    if (isLockWaitError(err)) return 'busy';
    throw err;
  }
}

/** how long a refresh waits for its lock on shipments before it leaves the names to the next round */
export const REFRESH_LOCK_TIMEOUT_MS = 1000;

/** a refresh's lock timeout as given, a whole number of milliseconds from 1 (PostgreSQL reads 0 as no limit), or a RangeError */
export function checkRefreshLockTimeout(ms: number): number {
  if (!Number.isInteger(ms) || ms < 1 || ms > 2_147_483_647) throw new RangeError(`refresh lock timeout ${ms}: a whole number of milliseconds from 1`);
  return ms;
}

/**
 * refreshShipmentItems after a change that has committed (provisioning, RemoveAccount): a failure
 * or a lock it could not get is only logged, the change stands and the worker writes the items a
 * second later.
 */
export async function refreshShipmentItemsAfter(db: Kysely<any>, log: { warn: (o: object, msg: string) => void }): Promise<void> {
  try {
    if ((await refreshShipmentItems(db)) === 'busy') log.warn({ lockTimeoutMs: REFRESH_LOCK_TIMEOUT_MS }, 'shipment items for changed names left to the refresh worker (shipments busy)');
  } catch (err) {
    log.warn({ err: (err as Error).message, code: (err as { code?: string }).code }, 'shipment items for changed names left to the refresh worker');
  }
}

/** PostgreSQL: each item trigger's name and table, and the functions' names (migration 207's down()) */
export const PG_ITEM_TRIGGER_TABLES: [string, string][] = Object.entries(PG_ITEM_TRIGGERS).map(([name, [table]]) => [name, table]);
export const PG_ITEM_FUNCTION_NAMES = Object.keys(PG_ITEM_FUNCTIONS);
