// A shipment as an item of the GetShipments family, written as JSON by the database, and (SQLite)
// kept written in the shipment's row, item_json, so a page reads one stored text per row.
import { createHash } from 'node:crypto';
import { type Kysely, PostgresAdapter, sql } from 'kysely';
import { jsonArraySql, jsonQuoteSql, type Engine } from '../db/json-sql';

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
 * triggers and the syncs below, and the page reads the stored text (SQLite: 150 us against 655 us a page).
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
// code's. PostgreSQL keeps it the same way (below).

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
// stored (a BEFORE trigger sets NEW.item_json: no second write of the row), and a change to a name
// an item shows writes the items that show it. PostgreSQL's own page floor (pgbench, 64
// connections, prepared, the bench's page of 100 among 100,000): 1,944-2,137 pages/s written from
// the columns and four joined names, 8,121-10,534 pages/s read as stored.
//
// Two transactions at once: a shipment written with a name while the name changes. A shipment's
// trigger reads the names in its own statement's snapshot, and the name's trigger writes the items
// it sees in its own, so neither would see the other's uncommitted row and the item could keep the
// old name. The name's trigger therefore first takes a SHARE ROW EXCLUSIVE lock on shipments (it
// conflicts with every writer of shipments and with itself): it waits until every transaction that
// wrote a shipment has ended, then writes the items in a snapshot taken after them, and a shipment
// written after the lock waits until the name's transaction has ended, then reads the new name
// (each statement of a PL/pgSQL function takes its own snapshot). Names change only by
// provisioning and account removal, rarely; an account's insert (CreateOrGetAccount, often) takes
// the lock only when a shipment already shows its uid (an account removed and made again under it).

/** the item of the row `s` (a row of shipments in scope as `s`: NEW, or an UPDATE's target) */
const pgItemOfRow = `(SELECT ${ITEM_SQL.postgres} FROM (SELECT 1) AS one ${PAGE_JOINS})`;
const pgOfTenants = (column: string, values: string) => `SELECT uid FROM shipments WHERE tenant_uid IN (SELECT uid FROM tenants) AND ${column} = ANY (${values})`;
const pgWhereOf: Record<'accounts' | 'pups' | 'lockers', (uids: string) => string> = {
  accounts: (uids) => `uid IN (${pgOfTenants('from_user_uid', uids)} UNION ${pgOfTenants('to_user_uid', uids)})`,
  pups: (uids) => `uid IN (${pgOfTenants('pup_uid', uids)} AND active = 1)`,
  lockers: (uids) => `active = 1 AND locker_uid = ANY (${uids})`,
};
const pgNameColumn = { accounts: 'user_name', pups: 'name', lockers: 'name' } as const;

/** name -> the function's CREATE OR REPLACE text */
const PG_ITEM_FUNCTIONS: Record<string, string> = {
  shipment_item_write: `CREATE OR REPLACE FUNCTION shipment_item_write() RETURNS trigger LANGUAGE plpgsql AS $item$
BEGIN
  SELECT ${ITEM_SQL.postgres} INTO NEW.item_json FROM (SELECT NEW.*) AS s ${PAGE_JOINS};
  RETURN NEW;
END $item$`,
  ...Object.fromEntries(
    (['accounts', 'pups', 'lockers'] as const).map((table) => [
      `shipment_items_of_${table}`,
      `CREATE OR REPLACE FUNCTION shipment_items_of_${table}() RETURNS trigger LANGUAGE plpgsql AS $item$
DECLARE uids text[];
BEGIN
  IF TG_OP = 'INSERT' THEN
    uids := ARRAY[NEW.uid];
    -- a new row's name shows only where a shipment already names its uid
    IF NOT EXISTS (SELECT 1 FROM shipments WHERE ${pgWhereOf[table]('uids')}) THEN RETURN NULL; END IF;
  ELSIF TG_OP = 'DELETE' THEN uids := ARRAY[OLD.uid];
  ELSE uids := ARRAY[OLD.uid, NEW.uid];
  END IF;
  LOCK TABLE shipments IN SHARE ROW EXCLUSIVE MODE;
  UPDATE shipments s SET item_json = ${pgItemOfRow} WHERE ${pgWhereOf[table]('uids')};
  RETURN NULL;
END $item$`,
    ]),
  ),
};

/** name -> [its table, its CREATE TRIGGER text] */
const PG_ITEM_TRIGGERS: Record<string, [string, string]> = {
  shipments_item_write: ['shipments', `CREATE TRIGGER shipments_item_write BEFORE INSERT OR UPDATE OF ${ITEM_COLUMNS} ON shipments FOR EACH ROW EXECUTE FUNCTION shipment_item_write()`],
  ...Object.fromEntries(
    (['accounts', 'pups', 'lockers'] as const).flatMap((table) => {
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

/** what a PostgreSQL store keeps as the version of its item code: a digest of every text above */
export const PG_ITEMS_VERSION = createHash('sha256')
  .update(JSON.stringify([PG_ITEM_FUNCTIONS, PG_ITEM_TRIGGERS, SHIPMENTS_ACTIVE_LOCKER_INDEX]))
  .digest('hex')
  .slice(0, 32);

/** the version comment on shipment_item_write in this schema, or undefined (no function) */
async function pgStoredVersion(db: Kysely<any>): Promise<string | null | undefined> {
  const { rows } = await sql<{ v: string | null }>`SELECT obj_description(p.oid, 'pg_proc') AS v FROM pg_proc p WHERE p.proname = 'shipment_item_write' AND p.pronamespace = current_schema()::regnamespace`.execute(db);
  return rows.length ? rows[0]!.v : undefined;
}

/**
 * PostgreSQL: as syncShipmentItems. The store's version (a comment on the item function) is read
 * first; when it is not this code's, one transaction takes a SHARE ROW EXCLUSIVE lock on
 * shipments (instances starting together wait for each other, and no shipment is written
 * meanwhile), reads the version again, writes functions, triggers and every item, and the version.
 */
async function syncPgShipmentItems(db: Kysely<any>): Promise<boolean> {
  if (!db.isTransaction) {
    if ((await pgStoredVersion(db)) === PG_ITEMS_VERSION) return false;
    return db.transaction().execute((trx) => syncPgShipmentItems(trx));
  }
  await sql`LOCK TABLE shipments IN SHARE ROW EXCLUSIVE MODE`.execute(db);
  if ((await pgStoredVersion(db)) === PG_ITEMS_VERSION) return false;
  for (const [name, [table]] of Object.entries(PG_ITEM_TRIGGERS)) await sql.raw(`DROP TRIGGER IF EXISTS ${name} ON ${table}`).execute(db);
  await sql.raw(SHIPMENTS_ACTIVE_LOCKER_INDEX).execute(db);
  for (const text of Object.values(PG_ITEM_FUNCTIONS)) await sql.raw(text).execute(db);
  for (const [, text] of Object.values(PG_ITEM_TRIGGERS)) await sql.raw(text).execute(db);
  await sql.raw(`UPDATE shipments s SET item_json = ${pgItemOfRow}`).execute(db);
  await sql.raw(`COMMENT ON FUNCTION shipment_item_write() IS '${PG_ITEMS_VERSION}'`).execute(db);
  return true;
}

/** PostgreSQL: each item trigger's name and table, and the functions' names (migration 207's down()) */
export const PG_ITEM_TRIGGER_TABLES: [string, string][] = Object.entries(PG_ITEM_TRIGGERS).map(([name, [table]]) => [name, table]);
export const PG_ITEM_FUNCTION_NAMES = Object.keys(PG_ITEM_FUNCTIONS);
