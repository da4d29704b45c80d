// Account operations for the tenant API (/v1/Account/...). Accounts are global (one row per
// person, e-mail globally unique via accounts.email_key); a tenant manages an account linked
// (account_pups) to a pick up point it manages. One Kysely code path for SQLite and PostgreSQL.
// Logs carry uids, tenant client ids and changed field NAMES only, never values.
import { type Kysely, type Selectable, type Transaction } from 'kysely';
import type { AccountsTable, Database } from '../db/schema';
import type { AppContext, TenantPrincipal } from '../context';
import type { Logger } from '../logger';
import { ApiError, invalidRequest } from '../errors';
import { fromBool, toBool } from '../db/database';
import { newUid, toDbTime } from '../ids';
import { canManageAccount } from './access';
import { preparedReader, sqlitePage, SQLITE_LIMIT_OFFSET, threadedReader, type ReadAll } from '../db/prepared-read';
import { threadAnswer } from '../db/read-pool';
import { AccountFailure } from './route';
import { freeMailCode, splitMailCode } from './mail-code';
import { emailKey, isUid, normCountry, normEmail, normLanguage, normPhone, normText, normUserName, parsePhone } from './validate';
import { queryWords } from './search';
import { refreshShipmentItemsAfter } from '../shipments/items';

type Q = Kysely<Database> | Transaction<Database>;
export type AccountRow = Selectable<AccountsTable>;

// ---------------------------------------------------------------------------------------------
// Field mapping

export const FLAG_COLUMNS = {
  canChangeFirstName: 'can_change_first_name',
  canChangeLastName: 'can_change_last_name',
  canChangeEmailAddress: 'can_change_email_address',
  canChangePhoneNumber: 'can_change_phone_number',
  canChangeLanguageCode: 'can_change_language_code',
  canChangeMainPickUpPoint: 'can_change_main_pick_up_point',
  canChangeAddress: 'can_change_address',
  canRemoveAutomatically: 'can_remove_automatically',
  canRemoveManually: 'can_remove_manually',
} as const;
export type FlagName = keyof typeof FLAG_COLUMNS;
export const FLAG_NAMES = Object.keys(FLAG_COLUMNS) as FlagName[];
export type MutationFlags = Record<FlagName, boolean>;
export type MutationFlagsInput = Partial<Record<FlagName, boolean | null | undefined>>;

export function flagsOf(row: AccountRow): MutationFlags {
  const out = {} as MutationFlags;
  for (const f of FLAG_NAMES) out[f] = fromBool(row[FLAG_COLUMNS[f]]);
  return out;
}

/**
 * Merges the non-null flags of `input` over `current`. The nine flags are independent
 * (locker-api.md lists nine booleans), canChangeFirstName and canChangeLastName included: each
 * is stored in its own column.
 */
export function mergeFlags(current: MutationFlags, input: MutationFlagsInput | null | undefined): MutationFlags {
  const merged = { ...current };
  for (const f of FLAG_NAMES) {
    const v = input?.[f];
    if (v !== null && v !== undefined) merged[f] = v;
  }
  return merged;
}

function flagColumns(f: MutationFlags) {
  const out: Record<string, 0 | 1> = {};
  for (const n of FLAG_NAMES) out[FLAG_COLUMNS[n]] = toBool(f[n]);
  return out as Pick<AccountRow, (typeof FLAG_COLUMNS)[FlagName]>;
}

/** The Account fields of the API document. street = streetName and streetNo joined by a space. */
export interface AccountFields {
  userUid: string | null;
  userName: string | null;
  firstName: string | null;
  lastName: string | null;
  emailAddress: string | null;
  phoneNumber: string | null;
  mainPupUid: string | null;
  mainPupName: string | null;
  mailCode: string | null;
  languageCode: string | null;
  street: string | null;
  mailbox: string | null;
  city: string | null;
  countryCode: string | null;
}

export const NULL_ACCOUNT: AccountFields = {
  userUid: null, userName: null, firstName: null, lastName: null, emailAddress: null, phoneNumber: null, mainPupUid: null,
  mainPupName: null, mailCode: null, languageCode: null, street: null, mailbox: null, city: null, countryCode: null,
};

export function joinStreet(name: string | null, no: string | null): string | null {
  if (name == null && no == null) return null;
  return [name ?? '', no ?? ''].filter((s) => s !== '').join(' ');
}

/**
 * The Account fields of a row. `pupVisible` false hides the main PUP (uid and name null): a tenant
 * sees only the pick up points it manages, also when it manages the account through a shared PUP
 * while the main PUP is another tenant's.
 */
/** The columns accountFields reads: the reads that answer with account fields select these, not every column. */
export type AccountFieldsRow = Pick<AccountRow, 'uid' | 'user_name' | 'first_name' | 'last_name' | 'email_address' | 'phone_number' | 'main_pup_uid' | 'mail_code' | 'language_code' | 'street_name' | 'street_no' | 'mailbox' | 'city' | 'country_code'>;
/** AccountFieldsRow's columns of `accounts as a` (fewer columns to describe and convert per row: on PostgreSQL the row description is parsed on every call) */
const FIELD_COLUMNS = 'a.uid, a.user_name, a.first_name, a.last_name, a.email_address, a.phone_number, a.main_pup_uid, a.mail_code, a.language_code, a.street_name, a.street_no, a.mailbox, a.city, a.country_code';

export function accountFields(row: AccountFieldsRow, pupName: string | null, pupVisible = true): AccountFields {
  return {
    userUid: row.uid,
    userName: row.user_name,
    firstName: row.first_name,
    lastName: row.last_name,
    emailAddress: row.email_address,
    phoneNumber: row.phone_number,
    mainPupUid: pupVisible ? row.main_pup_uid : null,
    mainPupName: pupVisible ? pupName : null,
    mailCode: row.mail_code,
    languageCode: row.language_code,
    street: joinStreet(row.street_name, row.street_no),
    mailbox: row.mailbox,
    city: row.city,
    countryCode: row.country_code,
  };
}

/** The fields CreateAccount / CreateOrGetAccount / SetAccountDetails answer with. */
export function shortFields(a: AccountFields) {
  return {
    userUid: a.userUid, userName: a.userName, firstName: a.firstName, lastName: a.lastName, emailAddress: a.emailAddress, phoneNumber: a.phoneNumber,
    mainPupUid: a.mainPupUid, mainPupName: a.mainPupName, languageCode: a.languageCode, mailCode: a.mailCode,
  };
}

// ---------------------------------------------------------------------------------------------
// Request normalisation

export interface DetailsInput {
  emailAddress?: string | null;
  phoneNumber?: string | null;
  languageCode?: string | null;
  firstName?: string | null;
  lastName?: string | null;
  streetName?: string | null;
  streetNo?: string | null;
  mailbox?: string | null;
  city?: string | null;
  countryCode?: string | null;
}

export interface NormalizedDetails {
  emailAddress?: string;
  /** null clears (sent as an empty string) */
  phoneNumber?: string | null;
  languageCode?: string | null;
  name?: { first: string; last: string };
  /** complete for SetAccountDetails; on create only the fields given */
  address?: Partial<{ streetName: string; streetNo: string; mailbox: string; city: string; countryCode: string }>;
}

const given = (v: string | null | undefined): v is string => v !== null && v !== undefined;

/**
 * Validates the detail fields shared by SetAccountDetails and the create calls. Null or absent
 * means "not set". Name group: firstName and lastName together. Address group (SetAccountDetails
 * only, `wholeAddress`): streetName, streetNo, mailbox, city and countryCode together; the create
 * calls take each of them on its own (locker-api.md lists them as individually optional there).
 * streetNo and mailbox may be empty strings.
 */
export function normalizeDetails(b: DetailsInput, opts: { wholeAddress: boolean } = { wholeAddress: true }): NormalizedDetails {
  const out: NormalizedDetails = {};
  if (given(b.emailAddress)) out.emailAddress = normEmail(b.emailAddress);
  if (given(b.phoneNumber)) out.phoneNumber = b.phoneNumber.trim() === '' ? null : normPhone(b.phoneNumber);
  if (given(b.languageCode)) out.languageCode = b.languageCode.trim() === '' ? null : normLanguage(b.languageCode);
  if (given(b.firstName) || given(b.lastName)) {
    if (!given(b.firstName) || !given(b.lastName)) {
      throw invalidRequest(`${given(b.firstName) ? 'lastName' : 'firstName'}: firstName and lastName must be set together`);
    }
    out.name = { first: normText(b.firstName, 'firstName'), last: normText(b.lastName, 'lastName') };
  }
  const addrKeys = ['streetName', 'streetNo', 'mailbox', 'city', 'countryCode'] as const;
  if (addrKeys.some((k) => given(b[k]))) {
    const missing = addrKeys.filter((k) => !given(b[k]));
    if (missing.length && opts.wholeAddress) {
      throw invalidRequest(`${missing.join(', ')}: when any address field is set, streetName, streetNo, mailbox, city and countryCode are all required`);
    }
    out.address = {};
    if (given(b.streetName)) out.address.streetName = normText(b.streetName, 'streetName', 200);
    if (given(b.streetNo)) out.address.streetNo = normText(b.streetNo, 'streetNo', 20, true);
    if (given(b.mailbox)) out.address.mailbox = normText(b.mailbox, 'mailbox', 50, true);
    if (given(b.city)) out.address.city = normText(b.city, 'city', 100);
    if (given(b.countryCode)) out.address.countryCode = normCountry(b.countryCode);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Errors

export const invalidUserUid = (detail = 'no such account') => new ApiError('InvalidUserUid', `userUid: ${detail}`, 400);
export const invalidPupUid = (detail: string) => new ApiError('InvalidPupUid', `pickUpPointUid: ${detail}`, 400);

export function isUniqueViolation(e: unknown): boolean {
  const err = e as { code?: string; message?: string } | null;
  if (!err) return false;
  return err.code === '23505' || err.code === 'SQLITE_CONSTRAINT_UNIQUE' || err.code === 'SQLITE_CONSTRAINT_PRIMARYKEY';
}

// ---------------------------------------------------------------------------------------------
// The service

export interface CreateInput extends DetailsInput {
  emailAddress: string;
  firstName: string;
  lastName: string;
  pickUpPointUid?: string | null;
  userName?: string | null;
  mutationConfig?: MutationFlagsInput | null;
}

/** GetAccount's lookup texts (accountForRead), by engine and column: constants, prepared once */
const ACCOUNT_FOR_READ = Object.fromEntries(
  (['sqlite', 'postgres'] as const).map((engine) => {
    const agg = engine === 'postgres' ? 'json_agg' : 'json_group_array';
    const text = (column: string) =>
      `select ${FIELD_COLUMNS}, (select ${agg}(ap.pup_uid) from account_pups ap where ap.account_uid = a.uid) as links, ` +
      `(select ${agg}(t.uid) from tenants t where t.main_account_uid = a.uid) as owners, ` +
      `(select p.name from pups p where p.uid = a.main_pup_uid) as pup_name from accounts a where a.${column} = ?`;
    return [engine, { uid: text('uid'), user_name_key: text('user_name_key'), email_key: text('email_key') }];
  }),
) as Record<'sqlite' | 'postgres', Record<'uid' | 'user_name_key' | 'email_key', string>>;

/** GetAccounts: the page's rows by their uids (one array parameter) */
const PAGE_ROWS_PG = `select ${FIELD_COLUMNS}, p.name as pup_name from accounts as a left join pups as p on p.uid = a.main_pup_uid where a.uid = any(?::text[])`;
/** GetAccounts' tenant right, part 1 (params: the tenant's uid twice): see getAccounts */
const NOT_OTHERS_MAIN = '(a.uid not in (select mt.main_account_uid from tenants as mt where mt.uid <> ?) or a.uid in (select mt2.main_account_uid from tenants as mt2 where mt2.uid = ?))';
/** part 2 (param: the tenant's uid): linked to a PUP of the tenant */
const LINKED_TO_TENANT = 'exists (select ap.account_uid from account_pups as ap inner join tenant_pups as tp on tp.pup_uid = ap.pup_uid where ap.account_uid = a.uid and tp.tenant_uid = ?)';
/**
 * SQLite: the first page of GetAccounts' plain listing (no filter), its rows in one statement; the
 * tenant's right as in getAccounts' `where` (params: the tenant's uid three times).
 */
const PLAIN_LISTING_SQLITE =
  `select ${FIELD_COLUMNS}, p.name as pup_name from accounts as a indexed by accounts_search left join pups as p on p.uid = a.main_pup_uid ` +
  `where ${NOT_OTHERS_MAIN} and ${LINKED_TO_TENANT} order by a.user_name_key asc, a.uid asc`;
const PAGE_ROWS_SQLITE = `select ${FIELD_COLUMNS}, p.name as pup_name from accounts as a left join pups as p on p.uid = a.main_pup_uid where a.uid in (select value from json_each(?))`;

/** a search criterion as given, trimmed ('' when absent) */
function trimmed(v: string | null | undefined): string {
  return (v ?? '').trim();
}

/** the SQL condition "column c contains the parameter" on the engine */
function containsSql(engine: 'sqlite' | 'postgres', c: string): string {
  return engine === 'postgres' ? `strpos(${c}, ?) > 0` : `instr(${c}, ?) > 0`;
}

/** an account's uid list as read: SQLite answers JSON text ('[]' when none), PostgreSQL a parsed array (null when none) */
function uidList(v: string | string[] | null): string[] {
  return v == null ? [] : typeof v === 'string' ? (JSON.parse(v) as string[]) : v;
}

/** GetAccount's answer for an account the tenant manages (its main PUP's name only when the tenant sees that PUP) */
function fullAccount(tenant: TenantPrincipal, row: AccountFieldsRow & { pup_name: string | null }) {
  const visible = AccountService.seesPup(tenant, row.main_pup_uid);
  return { isExisting: true, canManageUser: true, ...accountFields(row, visible ? row.pup_name : null, visible) };
}

export class AccountService {
  private readonly log: Logger;
  /** fixed reads prepared once (db/prepared-read.ts): GetAccount's lookups */
  private readonly read: ReadAll;
  /** a search page's rows (GetAccounts with filters): by a read thread where the store has them (SQLite), off the event loop */
  private readonly searchRead: ReadAll;
  /**
   * the main connection's reader (SQLite; on PostgreSQL as `read`): a count or an OFFSET walk over
   * a tenant's accounts the read threads did not take (they were running searches) is read here,
   * not sent back to them among the quick reads, which would wait behind it
   */
  private readonly mainRead: ReadAll;
  constructor(private readonly ctx: AppContext) {
    this.log = ctx.log.child({ ns: 'central.accounts' });
    this.read = preparedReader(ctx.db, { threads: true });
    this.mainRead = preparedReader(ctx.db);
    this.searchRead = threadedReader(ctx.db);
  }

  /**
   * GetAccount's lookup in one statement (one round trip on PostgreSQL): the account whose uid,
   * user_name_key or email_key is the value, with what canManageAccount (accounts/access.ts) and
   * the main PUP's name need: its linked PUPs and the tenants it is the main account of.
   */
  private async accountForRead(column: 'uid' | 'user_name_key' | 'email_key', value: string): Promise<(AccountFieldsRow & { links: string[]; owners: string[]; pup_name: string | null }) | undefined> {
    const row = (await this.read<AccountFieldsRow & { links: string | string[] | null; owners: string | string[] | null; pup_name: string | null }>(ACCOUNT_FOR_READ[this.ctx.db.engine][column], [value]))[0];
    if (!row) return undefined;
    const r = row as AccountFieldsRow & { links: string[]; owners: string[]; pup_name: string | null };
    r.links = uidList(row.links);
    r.owners = uidList(row.owners);
    return r;
  }

  /** canManageAccount (accounts/access.ts) on what accountForRead read */
  private static canManageRead(tenant: TenantPrincipal, row: { uid: string; links: string[]; owners: string[] }): boolean {
    if (tenant.pupUids.size === 0) return false;
    if (!row.links.some((l) => tenant.pupUids.has(l))) return false;
    return row.owners.length === 0 || row.owners.some((o) => o === tenant.uid);
  }

  private get db() {
    return this.ctx.db.kysely;
  }

  private now() {
    return toDbTime(this.ctx.clock.now());
  }

  async byUid(q: Q, uid: string): Promise<AccountRow | undefined> {
    return q.selectFrom('accounts').selectAll().where('uid', '=', uid).executeTakeFirst();
  }

  async byUserName(q: Q, userName: string): Promise<AccountRow | undefined> {
    return q.selectFrom('accounts').selectAll().where('user_name_key', '=', userName.trim().toLowerCase()).executeTakeFirst();
  }

  async byEmail(q: Q, email: string): Promise<AccountRow | undefined> {
    return q.selectFrom('accounts').selectAll().where('email_key', '=', emailKey(email)).executeTakeFirst();
  }

  async pupName(q: Q, pupUid: string | null): Promise<string | null> {
    if (!pupUid) return null;
    const r = await q.selectFrom('pups').select('name').where('uid', '=', pupUid).executeTakeFirst();
    return r?.name ?? null;
  }

  /** Whether the tenant may see the account's main PUP (one it manages). */
  static seesPup(tenant: TenantPrincipal, pupUid: string | null): boolean {
    return pupUid !== null && tenant.pupUids.has(pupUid);
  }

  async fields(q: Q, row: AccountRow, tenant: TenantPrincipal): Promise<AccountFields> {
    const visible = AccountService.seesPup(tenant, row.main_pup_uid);
    return accountFields(row, visible ? await this.pupName(q, row.main_pup_uid) : null, visible);
  }

  /** A free mail code (checked before insert; the unique index catches the rare race). */
  async freeMailCode(q: Q): Promise<string> {
    return freeMailCode(q);
  }

  /** Runs fn in a transaction, once more when a unique index refused a concurrent duplicate. */
  private async tx<T>(fn: (trx: Transaction<Database>) => Promise<T>, onDuplicate: () => ApiError): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.db.transaction().execute(fn);
      } catch (e) {
        if (!isUniqueViolation(e)) throw e;
        if (attempt >= 2) throw onDuplicate();
      }
    }
  }

  /** Loads an account the tenant must manage: InvalidUserUid when absent, AccessDenied (with data) when not manageable. */
  async manageable(q: Q, tenant: TenantPrincipal, userUid: unknown, deniedData: (uid: string) => Record<string, unknown>): Promise<AccountRow> {
    if (userUid === null || userUid === undefined || userUid === '') throw invalidUserUid('required');
    if (!isUid(userUid)) throw invalidUserUid('not a valid user uid');
    const row = await this.byUid(q, userUid);
    if (!row) throw invalidUserUid();
    if (!(await canManageAccount(q, tenant, row.uid))) {
      throw new AccountFailure('AccessDenied', 'the account is managed by another service provider', deniedData(row.uid));
    }
    return row;
  }

  /** A pick up point the tenant manages, or InvalidPupUid. */
  assertPup(tenant: TenantPrincipal, pupUid: unknown, field = 'pickUpPointUid'): string {
    if (pupUid === null || pupUid === undefined || pupUid === '') throw new ApiError('InvalidPupUid', `${field}: required`, 400);
    if (typeof pupUid !== 'string' || !isUid(pupUid)) throw new ApiError('InvalidPupUid', `${field}: not a valid pick up point uid`, 400);
    if (!tenant.pupUids.has(pupUid)) throw new ApiError('InvalidPupUid', `${field}: unknown pick up point or not one you manage`, 400);
    return pupUid;
  }

  // --- GetAccount ---------------------------------------------------------------------------

  async getAccount(tenant: TenantPrincipal, b: { userUid?: string | null; userName?: string | null; emailAddress?: string | null }) {
    // Search order: userUid, userName, emailAddress; the first given criterion that finds an account
    // wins. For an account the caller cannot manage, only the e-mail address may reveal that it
    // exists (locker-api.md): found by userUid or userName it counts as not found, and the search
    // goes on with the next criterion. Each lookup is one fixed prepared statement (accountForRead).
    if (b.userUid && b.userUid.trim()) {
      const row = await this.accountForRead('uid', b.userUid.trim());
      if (row && AccountService.canManageRead(tenant, row)) return fullAccount(tenant, row);
    }
    if (b.userName && b.userName.trim()) {
      const row = await this.accountForRead('user_name_key', b.userName.trim().toLowerCase());
      if (row && AccountService.canManageRead(tenant, row)) return fullAccount(tenant, row);
    }
    if (b.emailAddress && b.emailAddress.trim()) {
      const row = await this.accountForRead('email_key', emailKey(b.emailAddress));
      if (row) {
        if (AccountService.canManageRead(tenant, row)) return fullAccount(tenant, row);
        return { isExisting: true, canManageUser: false, ...NULL_ACCOUNT, userUid: row.uid };
      }
    }
    return { isExisting: false, canManageUser: false, ...NULL_ACCOUNT };
  }

  // --- GetAccounts --------------------------------------------------------------------------

  /** the number a count text answers (`named`: see ReadAll) */
  private async countOf(text: string, params: readonly unknown[], named: boolean, threads = false): Promise<number> {
    // SQLite with read threads (`threads`; PostgreSQL has no readPool): a count over a tenant's accounts can take
    // milliseconds, so it runs as a search does (SqliteReadPool.all slow), not among the quick
    // reads a thread answers in one batch (those would wait for it); but not behind the searches
    // either: with every thread running one, on the main connection at once, as before
    const threaded = threads ? await threadAnswer(this.ctx.db.readPool?.all<{ n: number }>(text, params, 'now')) : undefined;
    return Number((threaded ?? (await this.mainRead<{ n: number | string }>(text, params, named)))[0]!.n);
  }

  async getAccounts(
    tenant: TenantPrincipal,
    b: {
      pageNo: number; pageSize: number; userName?: string | null; emailAddress?: string | null; fullName?: string | null; pupUid?: string | null;
      phoneNumber?: string | null; mailCode?: string | null; includeEmail?: boolean | null; includeFullName?: boolean | null; includeMainPup?: boolean | null;
      includeAddress?: boolean | null; includeLanguage?: boolean | null; includeMailCode?: boolean | null; includePhone?: boolean | null;
    },
  ) {
    const inc = {
      email: b.includeEmail ?? true,
      fullName: b.includeFullName ?? true,
      mainPup: b.includeMainPup ?? true,
      address: b.includeAddress ?? false,
      language: b.includeLanguage ?? false,
      mailCode: b.includeMailCode ?? false,
      phone: b.includePhone ?? false,
    };
    if (b.pupUid && b.pupUid.trim() && !tenant.pupUids.has(b.pupUid.trim())) {
      throw new ApiError('InvalidPupUid', 'pupUid: unknown pick up point or not one you manage', 400);
    }
    if (tenant.pupUids.size === 0) return { items: [], total: 0, inc };
    // Bounded in cost (issue 12, item 4; docs/benchmarks.md "Worst allowed searches"): bounded
    // inputs and linear work per row (accounts/search.ts); the fullName words are matched against
    // the stored lower-cased full_name_key (migration 407); the tenant's accounts are decided once
    // per row with two index lookups, another tenant's main account with a set built once per query.
    const engine = this.ctx.db.engine;

    // The statement texts are fixed per shape of request (which filters are given, how many
    // fullName words): built once and prepared (db/prepared-read.ts), not a query tree per call.
    // the filters first: SQLite tests the terms in this order, and the cheap ones rule out most rows
    const where: string[] = [];
    const params: unknown[] = [];
    if (trimmed(b.userName)) {
      where.push(containsSql(engine, 'a.user_name_key'));
      params.push(trimmed(b.userName).toLowerCase());
    }
    if (trimmed(b.emailAddress)) {
      where.push(containsSql(engine, 'a.email_key'));
      params.push(trimmed(b.emailAddress).toLowerCase());
    }
    // full_name_key = lower(coalesce(first_name, '') || ' ' || coalesce(last_name, '')), kept by the database
    for (const word of queryWords(b.fullName)) {
      where.push(containsSql(engine, 'a.full_name_key'));
      params.push(word);
    }
    if (trimmed(b.phoneNumber)) {
      let p = trimmed(b.phoneNumber).replace(/[\s\-.()/]/g, '');
      if (p.startsWith('00')) p = '+' + p.slice(2);
      // phone numbers are stored normalized (+ and digits): no lower() needed
      if (p) {
        where.push(containsSql(engine, "coalesce(a.phone_number, '')"));
        params.push(p.toLowerCase());
      }
    }
    if (trimmed(b.mailCode)) {
      where.push('a.mail_code = ?');
      params.push(trimmed(b.mailCode).toUpperCase());
    }
    if (trimmed(b.pupUid)) {
      where.push('exists (select ap2.account_uid from account_pups as ap2 where ap2.account_uid = a.uid and ap2.pup_uid = ?)');
      params.push(trimmed(b.pupUid));
    }
    // accounts/access.ts notOthersMainAccount in the form a search wants: not the main account of
    // another tenant, unless it is the caller's main account too. The two tenant lists are read once
    // per query (SQLite: a set and a bloom filter; PostgreSQL: hashed subplans), not once per row
    // (tenants has no index on main_account_uid). main_account_uid is NOT NULL, so NOT IN is exact.
    where.push(NOT_OTHERS_MAIN);
    // linked to any PUP of the tenant: a join with tenant_pups, not an IN list of all its PUPs
    where.push(LINKED_TO_TENANT);
    const named = params.length === 0;
    params.push(tenant.uid, tenant.uid, tenant.uid);
    const from = `from accounts as a where ${where.join(' and ')}`;
    // the plain listing (no filter: named above) is the common call: its texts are named prepared
    // statements on PostgreSQL; a search's many combinations of filters are sent unnamed
    // (db/prepared-read.ts)
    const countText = `select count(*) as n ${from}`;

    const offset = (b.pageNo - 1) * b.pageSize;
    let total: number;
    let uids: string[];
    let fetchedRows: (AccountFieldsRow & { pup_name: string | null })[] | null = null;
    let searched: { total: number; rows: unknown[] } | undefined;
    if (engine === 'postgres') {
      // One statement, one round trip: the matches are scanned once (hash semi-join with the
      // tenant's links), the total counted over all of them, only the page's uids sorted out of
      // them (top-N), and the page's rows joined to them (the fetch below, on SQLite a statement of
      // its own: there a statement costs no round trip)
      const page = await this.read<AccountFieldsRow & { pup_name: string | null; page_total: number | string }>(
        `with pg as (select a.uid, count(*) over() as page_total ${from} order by a.user_name_key, a.uid limit ? offset ?) ` +
          `select ${FIELD_COLUMNS}, p.name as pup_name, pg.page_total from pg inner join accounts as a on a.uid = pg.uid left join pups as p on p.uid = a.main_pup_uid order by a.user_name_key, a.uid`,
        [...params, b.pageSize, offset],
        named,
      );
      if (page.length > 0) {
        total = Number(page[0]!.page_total);
        uids = page.map((r) => r.uid);
        fetchedRows = page;
      } else {
        // past the last page (or nothing found): the window gave no row to read the total from
        total = await this.countOf(countText, params, named);
        uids = [];
      }
    } else if (offset === 0 && named) {
      // SQLite, the first page of the plain listing (no filter): one statement for the page's
      // rows, walking accounts_search in the answer's order (INDEXED BY: the planner would
      // otherwise take the user-name index and read every table row to decide the tenant's
      // right; on accounts_search that is decided on the index, and a row's table entry and PUP
      // are read only for a match). sqlitePage writes the LIMIT into the text (a power of two
      // above the page: the read tells the total when it ends before it); a page that is not
      // full holds every match, so the count is needed only after a full one. Against the page's
      // uids first and their rows by a second statement (below): docs/benchmarks.md.
      const page = await sqlitePage<AccountFieldsRow & { pup_name: string | null }>(this.ctx.db, PLAIN_LISTING_SQLITE, params, 0, b.pageSize);
      fetchedRows = page.rows;
      uids = page.rows.map((r) => r.uid);
      total = page.total ?? (uids.length < b.pageSize ? uids.length : await this.countOf(countText, params, named, true));
    } else if (
      (searched = await threadAnswer(
        // the plain listing's later page does not wait behind searches (named: wait false)
        this.ctx.db.readPool?.search({ count: countText, asc: `select a.uid ${from} order by a.user_name_key asc, a.uid asc`, desc: `select a.uid ${from} order by a.user_name_key desc, a.uid desc`, params, offset, size: b.pageSize }, !named),
      ))
    ) {
      // SQLite with read threads (db/read-pool.ts): a search's page of uids and its total (or a
      // later page of the plain listing, whose count and OFFSET walk cost as much, but which reads
      // on the main connection rather than wait behind searches), read as below but by a read
      // thread, off the event loop (a search costs milliseconds), in one snapshot; the page's rows
      // by threadedReader (below). A search the pool cannot serve (or refused) is read
      // below on the main connection. read-worker.mjs search() reads as the two branches below
      // do: change them together.
      total = searched.total;
      uids = searched.rows as string[];
    } else if (offset === 0) {
      // SQLite, the first page of a search: the page's uids first, walking the narrow covering
      // index accounts_search in the answer's order (or the index the planner prefers for the
      // filters given, e.g. a mail code's); the rows of the page by a second statement. A page
      // that is not full holds every match, so the count is needed only after a full one.
      // sqlitePage writes the LIMIT into the text (see there). Not for later pages: the rows
      // before the page would be read and dropped in JavaScript, which costs more than SQLite's
      // OFFSET on a tenant with many accounts.
      const page = await sqlitePage<{ uid: string }>(this.ctx.db, `select a.uid ${from} order by a.user_name_key asc, a.uid asc`, params, 0, b.pageSize, false, false);
      uids = page.rows.map((r) => r.uid);
      total = page.total ?? (uids.length < b.pageSize ? uids.length : await this.countOf(countText, params, named));
    } else {
      // SQLite: the count, then the page's uids, both walking the narrow covering index
      // accounts_search in the answer's order (no sort, no table row but the page's). A page in
      // the second half of the result is read from the end (descending, skipping the rows after
      // it), so no page walks more than half the matches. One statement for both (a window, or
      // every match's uid) measured slower: the window buffers and sorts every match, and
      // returning every uid costs more than the second walk.
      total = await this.countOf(countText, params, named);
      uids = [];
      if (offset < total) {
        const size = Math.min(b.pageSize, total - offset);
        const fromEnd = total - offset - size;
        const reverse = fromEnd < offset;
        const dir = reverse ? 'desc' : 'asc';
        const page = await this.mainRead<{ uid: string }>(`select a.uid ${from} order by a.user_name_key ${dir}, a.uid ${dir} ${SQLITE_LIMIT_OFFSET}`, [...params, size, reverse ? fromEnd : offset], named);
        uids = page.map((r) => r.uid);
        if (reverse) uids.reverse();
      }
    }
    const byUid = new Map<string, AccountFieldsRow & { pup_name: string | null }>();
    if (fetchedRows) for (const r of fetchedRows) byUid.set(r.uid, r);
    else if (uids.length > 0) {
      // the page's rows by one statement whatever the page's length: the uids as one array parameter
      const fetched = await (named ? this.read : this.searchRead)<AccountFieldsRow & { pup_name: string | null }>(
        engine === 'postgres'
          ? PAGE_ROWS_PG
          : PAGE_ROWS_SQLITE,
        [engine === 'postgres' ? uids : JSON.stringify(uids)],
      );
      for (const r of fetched) byUid.set(r.uid, r);
    }
    // an account removed between the page query and this fetch is left out, as if removed before
    const rows = uids.flatMap((u) => byUid.get(u) ?? []);
    const items = rows.map((r) => {
      const f = accountFields(r, r.pup_name ?? null, AccountService.seesPup(tenant, r.main_pup_uid));
      const item: Record<string, unknown> = { userUid: f.userUid, userName: f.userName, canManage: true };
      if (inc.email) item.emailAddress = f.emailAddress;
      if (inc.fullName) Object.assign(item, { firstName: f.firstName, lastName: f.lastName });
      if (inc.mainPup) Object.assign(item, { mainPupUid: f.mainPupUid, mainPupName: f.mainPupName });
      if (inc.address) Object.assign(item, { street: f.street, mailbox: f.mailbox, city: f.city, countryCode: f.countryCode });
      if (inc.language) item.languageCode = f.languageCode;
      if (inc.mailCode) item.mailCode = f.mailCode;
      if (inc.phone) item.phoneNumber = f.phoneNumber;
      return item as { userUid: string; userName: string; canManage: boolean } & Partial<AccountFields>;
    });
    return { items, total, inc };
  }

  // --- GetAccountPickUpPoint ----------------------------------------------------------------

  async getAccountPickUpPoint(tenant: TenantPrincipal, userUid: unknown) {
    // A read: every account has its mail code from creation (API, provisioning, migration 102).
    const row = await this.manageable(this.db, tenant, userUid, (uid) => ({ userUid: uid }));
    // Only a main PUP the caller manages is described; another tenant's PUP stays hidden (null).
    const pup = AccountService.seesPup(tenant, row.main_pup_uid) ? await this.db.selectFrom('pups').selectAll().where('uid', '=', row.main_pup_uid!).executeTakeFirst() : undefined;
    const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : v != null && v !== '' && Number.isFinite(Number(v)) ? Number(v) : null);
    const str = (v: unknown) => (typeof v === 'string' ? v : '');
    let delivery: Record<string, unknown> | null = null;
    if (pup?.delivery_address) {
      try {
        delivery = JSON.parse(pup.delivery_address) as Record<string, unknown>;
      } catch {
        delivery = null;
      }
    }
    return {
      userUid: row.uid,
      mailCode: row.mail_code,
      ...splitMailCode(row.mail_code),
      pupUid: pup?.uid ?? null,
      name: pup?.name ?? null,
      timeZone: pup?.time_zone ?? null,
      deliveryAddress: delivery
        ? { streetName: str(delivery.streetName), mailbox: str(delivery.mailbox), city: str(delivery.city), countryIso2: str(delivery.countryIso2), latitude: num(delivery.latitude), longitude: num(delivery.longitude) }
        : null,
      locationAddress: pup
        ? { streetName: pup.loc_street_name ?? '', mailbox: pup.loc_mailbox ?? '', city: pup.loc_city ?? '', countryIso2: pup.loc_country_iso2 ?? '', latitude: num(pup.loc_latitude), longitude: num(pup.loc_longitude) }
        : null,
    };
  }

  // --- Mutation configuration ---------------------------------------------------------------

  async getMutationConfig(tenant: TenantPrincipal, userUid: unknown) {
    const row = await this.manageable(this.db, tenant, userUid, (uid) => ({ userUid: uid }));
    return { userUid: row.uid, ...flagsOf(row) };
  }

  async setMutationConfig(tenant: TenantPrincipal, b: { userUid?: string | null } & MutationFlagsInput) {
    const result = await this.db.transaction().execute(async (trx) => {
      const row = await this.manageable(trx, tenant, b.userUid, (uid) => ({ userUid: uid }));
      const merged = mergeFlags(flagsOf(row), b);
      await trx.updateTable('accounts').set({ ...flagColumns(merged), updated_at: this.now() }).where('uid', '=', row.uid).execute();
      return { userUid: row.uid, ...merged };
    });
    this.log.info({ userUid: result.userUid, tenant: tenant.clientId }, 'account mutation configuration set');
    return result;
  }

  // --- SetAccountDetails --------------------------------------------------------------------

  async setDetails(tenant: TenantPrincipal, b: DetailsInput & { userUid?: string | null }) {
    const denied = (uid: string) => ({ userUid: uid, canManageUser: false, ...shortFieldsNoUser() });
    // An unknown or unmanageable account is reported before field validation.
    await this.manageable(this.db, tenant, b.userUid, denied);
    const d = normalizeDetails(b);
    const changed: string[] = [];
    const row = await this.tx(
      async (trx) => {
        const cur = await this.manageable(trx, tenant, b.userUid, denied);
        const set: Partial<AccountRow> = {};
        if (d.emailAddress !== undefined && emailKey(d.emailAddress) !== cur.email_key) {
          const other = await this.byEmail(trx, d.emailAddress);
          if (other && other.uid !== cur.uid) throw new ApiError('EmailAlreadyRegistered', 'emailAddress: registered for another account', 400);
          Object.assign(set, { email_address: d.emailAddress, email_key: emailKey(d.emailAddress) });
          changed.push('emailAddress');
        } else if (d.emailAddress !== undefined && d.emailAddress !== cur.email_address) {
          set.email_address = d.emailAddress; // same address, other capitalisation
          changed.push('emailAddress');
        }
        if (d.phoneNumber !== undefined) {
          set.phone_number = d.phoneNumber;
          changed.push('phoneNumber');
        }
        if (d.languageCode !== undefined) {
          set.language_code = d.languageCode;
          changed.push('languageCode');
        }
        if (d.name) {
          Object.assign(set, { first_name: d.name.first, last_name: d.name.last });
          changed.push('firstName', 'lastName');
        }
        if (d.address) {
          const a = d.address;
          Object.assign(set, { street_name: a.streetName, street_no: a.streetNo, mailbox: a.mailbox, city: a.city, country_code: a.countryCode });
          changed.push('address');
        }
        if (Object.keys(set).length) await trx.updateTable('accounts').set({ ...set, updated_at: this.now() }).where('uid', '=', cur.uid).execute();
        return (await this.byUid(trx, cur.uid))!;
      },
      () => new ApiError('EmailAlreadyRegistered', 'emailAddress: registered for another account', 400),
    );
    this.log.info({ userUid: row.uid, tenant: tenant.clientId, fields: changed }, 'account details set');
    const f = await this.fields(this.db, row, tenant);
    const s = shortFields(f);
    return {
      userUid: s.userUid, canManageUser: true, firstName: s.firstName, lastName: s.lastName, emailAddress: s.emailAddress, phoneNumber: s.phoneNumber,
      mainPupUid: s.mainPupUid, mainPupName: s.mainPupName, languageCode: s.languageCode, mailCode: s.mailCode,
    };
  }

  // --- SetAccountPickUpPoint ----------------------------------------------------------------

  async setPickUpPoint(tenant: TenantPrincipal, b: { userUid?: string | null; pickUpPointUid?: string | null }) {
    const denied = (uid: string) => ({ userUid: uid, pupUid: null, pickUpPointChanged: false });
    await this.manageable(this.db, tenant, b.userUid, denied);
    const pupUid = this.assertPup(tenant, b.pickUpPointUid);
    const res = await this.tx(
      async (trx) => {
        const cur = await this.manageable(trx, tenant, b.userUid, denied);
        const old = cur.main_pup_uid;
        const changed = old !== pupUid;
        const link = await trx.selectFrom('account_pups').select('pup_uid').where('account_uid', '=', cur.uid).where('pup_uid', '=', pupUid).executeTakeFirst();
        if (!link) await trx.insertInto('account_pups').values({ account_uid: cur.uid, pup_uid: pupUid }).execute();
        if (changed) {
          await trx.updateTable('accounts').set({ main_pup_uid: pupUid, updated_at: this.now() }).where('uid', '=', cur.uid).execute();
          // The link to the previous main PUP goes with it, but only when the caller manages that
          // PUP and no other tenant does: another tenant's link (also through a shared PUP) is
          // never removed. The new link keeps the account manageable.
          if (old && tenant.pupUids.has(old)) {
            const shared = await trx.selectFrom('tenant_pups').select('tenant_uid').where('pup_uid', '=', old).where('tenant_uid', '<>', tenant.uid).executeTakeFirst();
            if (!shared) await trx.deleteFrom('account_pups').where('account_uid', '=', cur.uid).where('pup_uid', '=', old).execute();
          }
        }
        return { userUid: cur.uid, pupUid, pickUpPointChanged: changed };
      },
      () => new ApiError('InternalError', 'concurrent change of the pick up point; retry', 500),
    );
    this.log.info({ userUid: res.userUid, tenant: tenant.clientId, pupUid, changed: res.pickUpPointChanged }, 'account pick up point set');
    return res;
  }

  // --- RemoveAccount ------------------------------------------------------------------------

  async remove(tenant: TenantPrincipal, userUid: unknown) {
    await this.db.transaction().execute(async (trx) => {
      const row = await this.manageable(trx, tenant, userUid, () => ({}));
      const isMain = await trx.selectFrom('tenants').select('uid').where('main_account_uid', '=', row.uid).executeTakeFirst();
      if (isMain || fromBool(row.is_dispatcher)) throw new ApiError('AccessDenied', 'userUid: a dispatcher main account cannot be removed', 400);
      // A parcel in progress for the account would lose its sender or receiver.
      const busy = await trx
        .selectFrom('shipments')
        .select('uid')
        .where('active', '=', 1)
        .where((eb) => eb.or([eb('from_user_uid', '=', row.uid), eb('to_user_uid', '=', row.uid)]))
        .executeTakeFirst();
      if (busy) throw new ApiError('AccountInUse', 'userUid: the account has active shipments; cancel or complete them first', 400);
      await trx.deleteFrom('account_pups').where('account_uid', '=', row.uid).execute();
      await trx.deleteFrom('accounts').where('uid', '=', row.uid).execute();
    });
    // PostgreSQL: the items of its past shipments no longer show its name (shipments/items.ts)
    await refreshShipmentItemsAfter(this.db, this.log);
    this.log.info({ userUid, tenant: tenant.clientId }, 'account removed');
  }

  // --- CreateAccount / CreateOrGetAccount ---------------------------------------------------

  private normalizeCreate(tenant: TenantPrincipal, b: CreateInput) {
    const d = normalizeDetails(b, { wholeAddress: false });
    const emailAddress = d.emailAddress!;
    const userName = given(b.userName) && b.userName.trim() ? normUserName(b.userName) : emailAddress;
    const pupUid = this.assertPup(tenant, b.pickUpPointUid);
    return { d, emailAddress, userName, pupUid, hasUserName: given(b.userName) && b.userName.trim() !== '' };
  }

  private async insert(trx: Transaction<Database>, n: ReturnType<AccountService['normalizeCreate']>, flags: MutationFlags): Promise<AccountRow> {
    const uid = newUid();
    const now = this.now();
    const a = n.d.address;
    await trx
      .insertInto('accounts')
      .values({
        uid,
        user_name: n.userName,
        user_name_key: n.userName.toLowerCase(),
        email_address: n.emailAddress,
        email_key: emailKey(n.emailAddress),
        first_name: n.d.name!.first,
        last_name: n.d.name!.last,
        phone_number: n.d.phoneNumber ?? null,
        main_pup_uid: n.pupUid,
        mail_code: await this.freeMailCode(trx),
        language_code: n.d.languageCode ?? null,
        street_name: a?.streetName ?? null,
        street_no: a?.streetNo ?? null,
        mailbox: a?.mailbox ?? null,
        city: a?.city ?? null,
        country_code: a?.countryCode ?? null,
        ...flagColumns(flags),
        created_at: now,
        updated_at: now,
      })
      .execute();
    await trx.insertInto('account_pups').values({ account_uid: uid, pup_uid: n.pupUid }).execute();
    return (await this.byUid(trx, uid))!;
  }

  private deniedCreate(uid: string, withExisting: boolean) {
    return { ...shortFieldsNoUser(), userName: null, userUid: uid, canManageUser: false, ...(withExisting ? { isExisting: true } : {}) };
  }

  private async created(row: AccountRow, tenant: TenantPrincipal) {
    return { ...shortFields(await this.fields(this.db, row, tenant)), canManageUser: true };
  }

  async create(tenant: TenantPrincipal, b: CreateInput) {
    const n = this.normalizeCreate(tenant, b);
    const flags = b.mutationConfig ? mergeFlags(DEFAULT_FLAGS, b.mutationConfig) : DEFAULT_FLAGS;
    const row = await this.tx(
      async (trx) => {
        for (const [existing, what] of [
          [await this.byEmail(trx, n.emailAddress), 'emailAddress'],
          [await this.byUserName(trx, n.userName), 'userName'],
        ] as const) {
          if (!existing) continue;
          if (!(await canManageAccount(trx, tenant, existing.uid))) {
            throw new AccountFailure('AccessDenied', 'an account with this e-mail address or username exists and is managed by another service provider', this.deniedCreate(existing.uid, false));
          }
          throw new ApiError(
            'EmailAlreadyRegistered',
            // (read committed: the username lookup may find an account created concurrently with this e-mail address)
            what === 'emailAddress' || existing.email_key === emailKey(n.emailAddress)
              ? 'emailAddress: registered for another account (find it with GetAccount or use CreateOrGetAccount)'
              : 'userName: an account with this username already exists with another e-mail address',
            400,
          );
        }
        return this.insert(trx, n, flags);
      },
      () => new ApiError('EmailAlreadyRegistered', 'emailAddress: registered for another account', 400),
    );
    this.log.info({ userUid: row.uid, tenant: tenant.clientId, pupUid: n.pupUid }, 'account created');
    return this.created(row, tenant);
  }

  async createOrGet(tenant: TenantPrincipal, b: CreateInput) {
    const n = this.normalizeCreate(tenant, b);
    type Out = { row: AccountRow; isExisting: boolean; touched: boolean };
    const out = await this.tx(
      async (trx): Promise<Out> => {
        const byEmail = await this.byEmail(trx, n.emailAddress);
        const byUser = n.hasUserName ? await this.byUserName(trx, n.userName) : undefined;
        const deny = (uid: string) =>
          new AccountFailure('AccessDenied', 'the account exists and is managed by another service provider', this.deniedCreate(uid, true));
        const applyFlags = async (row: AccountRow): Promise<AccountRow> => {
          if (!b.mutationConfig) return row;
          const merged = mergeFlags(flagsOf(row), b.mutationConfig);
          await trx.updateTable('accounts').set({ ...flagColumns(merged), updated_at: this.now() }).where('uid', '=', row.uid).execute();
          return (await this.byUid(trx, row.uid))!;
        };

        if (byUser) {
          if (!(await canManageAccount(trx, tenant, byUser.uid))) throw deny(byUser.uid);
          if (byUser.email_key === emailKey(n.emailAddress)) return { row: byUser, isExisting: true, touched: false };
          // The account exists by username with another e-mail address: update it to the given one.
          if (byEmail) throw new ApiError('EmailAlreadyRegistered', 'emailAddress: registered for another account than the given userName', 400);
          if (!fromBool(byUser.can_change_email_address)) {
            throw new ApiError('EmailAlreadyRegistered', "emailAddress: the account of the given userName has another e-mail address and it may not be changed (canChangeEmailAddress is false)", 400);
          }
          await trx.updateTable('accounts').set({ email_address: n.emailAddress, email_key: emailKey(n.emailAddress), updated_at: this.now() }).where('uid', '=', byUser.uid).execute();
          const r = await applyFlags((await this.byUid(trx, byUser.uid))!);
          return { row: r, isExisting: true, touched: true };
        }
        if (byEmail) {
          if (!(await canManageAccount(trx, tenant, byEmail.uid))) throw deny(byEmail.uid);
          if (n.hasUserName) throw new ApiError('EmailAlreadyRegistered', 'emailAddress: registered for an account with another username', 400);
          return { row: byEmail, isExisting: true, touched: false };
        }
        const taken = n.hasUserName ? undefined : await this.byUserName(trx, n.userName);
        if (taken) {
          if (!(await canManageAccount(trx, tenant, taken.uid))) throw deny(taken.uid);
          // A concurrent call committed this very account between the two lookups (PostgreSQL
          // READ COMMITTED: each statement sees the latest commits): it is the one we look for.
          if (taken.email_key === emailKey(n.emailAddress)) return { row: taken, isExisting: true, touched: false };
          throw new ApiError('EmailAlreadyRegistered', 'userName: an account with this username already exists with another e-mail address', 400);
        }
        const flags = b.mutationConfig ? mergeFlags(DEFAULT_FLAGS, b.mutationConfig) : DEFAULT_FLAGS;
        return { row: await this.insert(trx, n, flags), isExisting: false, touched: true };
      },
      () => new ApiError('EmailAlreadyRegistered', 'emailAddress: registered for another account', 400),
    );
    if (!out.isExisting) this.log.info({ userUid: out.row.uid, tenant: tenant.clientId, pupUid: n.pupUid }, 'account created');
    else if (out.touched) this.log.info({ userUid: out.row.uid, tenant: tenant.clientId, fields: ['emailAddress'] }, 'account e-mail address updated');
    const data = { ...(await this.created(out.row, tenant)), isExisting: out.isExisting };
    return data;
  }
}

/** Defaults of a new account (migration 001): everything changeable, manual removal allowed, the
 * automatic cleanup may remove it (canRemoveAutomatically false). */
export const DEFAULT_FLAGS: MutationFlags = {
  canChangeFirstName: true,
  canChangeLastName: true,
  canChangeEmailAddress: true,
  canChangePhoneNumber: true,
  canChangeLanguageCode: true,
  canChangeMainPickUpPoint: true,
  canChangeAddress: true,
  canRemoveAutomatically: false,
  canRemoveManually: true,
};

function shortFieldsNoUser() {
  return { firstName: null, lastName: null, emailAddress: null, phoneNumber: null, mainPupUid: null, mainPupName: null, languageCode: null, mailCode: null };
}

export { parsePhone };
