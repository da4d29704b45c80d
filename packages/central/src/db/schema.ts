import type { Generated } from 'kysely';
// Table types for Kysely. Both engines store the same shapes: text uids, ISO-8601 UTC text
// timestamps (sortable as text), booleans as integers 0/1, JSON documents as text.
// Each area adds its tables in its own file (schema-<area>.ts) and extends Database below.
import type { ShipmentTables } from './schema-shipments';
import type { CallbackTables } from './schema-callbacks';
import type { AccountTables } from './schema-accounts';
import type { EdgeTables } from './schema-edge';

export type Bool = 0 | 1;
/** a 0/1 column with a database default */
export type DefBool = Generated<Bool>;

export interface SettingsTable {
  key: string;
  value: string;
}

export interface TenantsTable {
  uid: string;
  client_id: string;
  secret_hash: string;
  name: string;
  main_account_uid: string;
  created_at: string;
  updated_at: string;
}

export interface TenantPupsTable {
  tenant_uid: string;
  pup_uid: string;
}

export interface PupsTable {
  uid: string;
  name: string;
  time_zone: string | null;
  loc_street_name: string | null;
  loc_mailbox: string | null;
  loc_city: string | null;
  loc_country_iso2: string | null;
  loc_latitude: number | null;
  loc_longitude: number | null;
  /** JSON text of an address {streetName, mailbox, city, countryIso2, latitude?, longitude?} */
  delivery_address: string | null;
  parking_address: string | null;
  external_reference: string | null;
  overflow_pup_uid: string | null;
  created_at: string;
  updated_at: string;
}

export interface LockersTable {
  uid: string;
  pup_uid: string;
  name: string;
  width: number;
  height: number;
  length: number;
  size_code: string | null;
  type_code: string;
  /** where the lock sits on the terminal: bus name, board address, lock number (1-based) */
  bus: string;
  board_address: number;
  lock_number: number;
  /** the shipment currently holding the locker, or null when free (at most one: no double booking) */
  booked_shipment_uid: string | null;
  active: DefBool;
  created_at: string;
  updated_at: string;
}

export interface TerminalsTable {
  id: string;
  pup_uid: string;
  secret_hash: string;
  /** keyed fast digest of a high-entropy secret (auth/terminal-secret-digest.ts); null: scrypt only */
  secret_fast: Generated<string | null>;
  name: string | null;
  created_at: string;
  updated_at: string;
}

export interface AccountsTable {
  uid: string;
  user_name: string;
  /** lower-cased user name, unique */
  user_name_key: string;
  email_address: string;
  /** lower-cased e-mail address, globally unique */
  email_key: string;
  /**
   * lower(coalesce(first_name,'') || ' ' || coalesce(last_name,'')), kept by the database (migration
   * 407: a generated column on PostgreSQL, triggers on SQLite): never written by the application
   */
  full_name_key: Generated<string>;
  first_name: string | null;
  last_name: string | null;
  phone_number: string | null;
  main_pup_uid: string | null;
  mail_code: string | null;
  language_code: string | null;
  street_name: string | null;
  street_no: string | null;
  mailbox: string | null;
  city: string | null;
  country_code: string | null;
  can_change_first_name: DefBool;
  can_change_last_name: DefBool;
  can_change_email_address: DefBool;
  can_change_phone_number: DefBool;
  can_change_language_code: DefBool;
  can_change_main_pick_up_point: DefBool;
  can_change_address: DefBool;
  can_remove_automatically: DefBool;
  can_remove_manually: DefBool;
  /** 1 for a tenant's dispatcher main account */
  is_dispatcher: DefBool;
  created_at: string;
  updated_at: string;
}

/** Links an account to pick up points; a tenant manages an account linked to one of its PUPs. */
export interface AccountPupsTable {
  account_uid: string;
  pup_uid: string;
}

export interface FoundationTables {
  settings: SettingsTable;
  tenants: TenantsTable;
  tenant_pups: TenantPupsTable;
  pups: PupsTable;
  lockers: LockersTable;
  terminals: TerminalsTable;
  accounts: AccountsTable;
  account_pups: AccountPupsTable;
}

export interface Database extends FoundationTables, AccountTables, ShipmentTables, CallbackTables, EdgeTables {}
