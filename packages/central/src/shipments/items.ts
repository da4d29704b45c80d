// A shipment as an item of the GetShipments family, written as JSON by the database, and (SQLite)
// kept written in the shipment's row, item_json, so a page reads one stored text per row.
import { type Kysely, sql } from 'kysely';
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
 * as before: addresses are parsed leniently (parseAddress). On SQLite it runs only in the
 * triggers and the sync below, and the page reads the stored text (150 us against 655 us a page).
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

/** itemSql per engine, written once (PostgreSQL writes it in the page's statement) */
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
// code's. PostgreSQL writes the item in the page's statement (its page is bound by PostgreSQL's own
// work: the page floor of docs/benchmarks.md).

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
 */
export async function syncShipmentItems(db: Kysely<any>): Promise<boolean> {
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
