// A tenant's callback registration: where ShipmentStatusUpdate messages go and how they are
// authenticated. The rules of product.md (ConfigureCallback) are in decideCallbackChange, a pure
// function; the stores below apply its outcome. The key is a shared secret the tenant verifies
// with, so it is kept in the clear (it must be usable for signing) and never logged.
import crypto from 'node:crypto';
import type { Kysely, Transaction } from 'kysely';
import type { Database } from '../db/schema';
import { ProvisioningError } from '../provisioning/apply';
import type { TargetPolicy } from '../net/address';
import { allowedAddresses, ResolveError, TargetRefusedError, type Resolver } from '../net/resolve';

export const AUTH_TYPES = ['None', 'HMAC', 'ApiKey'] as const;
export type AuthType = (typeof AUTH_TYPES)[number];

export interface CallbackRegistration {
  url: string | null;
  authType: AuthType;
  authKey: string | null;
}

/** printable ASCII without spaces, 16..256 characters (it travels in a header in ApiKey mode) */
export const AUTH_KEY_RE = /^[\x21-\x7e]{16,256}$/;

/** A fresh key: 256 random bits as 64 lower-case hex characters. */
export function generateAuthKey(): string {
  return crypto.randomBytes(32).toString('hex');
}

/** Control characters (C0, DEL, C1) and whitespace of any kind, which the URL parser would silently drop or encode. */
const CONTROL_OR_SPACE = /[\u0000-\u0020\u007f-\u009f]|\s/u;

/** Why a URL is not acceptable as a callback target by its form, or null when it is (the address rules: callbackTargetProblem). */
export function callbackUrlProblem(url: string): string | null {
  if (url.length > 2048) return 'must be at most 2048 characters';
  if (CONTROL_OR_SPACE.test(url)) return 'must not contain control characters or whitespace';
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return 'must be an absolute http or https URL';
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') return 'must be an absolute http or https URL';
  if (!u.hostname) return 'must name a host';
  if (u.username || u.password) return 'must not contain user name or password (use authType ApiKey or HMAC)';
  if (u.hash) return 'must not contain a fragment (#...)';
  return null;
}

/** How long ConfigureCallback (and one delivery attempt) may spend resolving the callback host. */
export const CALLBACK_RESOLVE_TIMEOUT_MS = 5_000;

/**
 * Why a URL is not acceptable as a callback target, or null when it is: its form
 * (callbackUrlProblem), then its host: an IP literal in any spelling (the URL parser has
 * normalized 127.1, 2130706433, 0x7f000001 ...), a cloud metadata name, or every address the name
 * resolves to must be allowed by the policy (net/address.ts). A host that does not resolve (in
 * `timeoutMs`) is a problem too. The delivery worker checks again on every connection.
 */
export async function callbackTargetProblem(url: string, policy: TargetPolicy, resolver: Resolver, timeoutMs = CALLBACK_RESOLVE_TIMEOUT_MS): Promise<string | null> {
  const form = callbackUrlProblem(url);
  if (form) return form;
  const host = new URL(url).hostname;
  try {
    await allowedAddresses(host, policy, resolver, timeoutMs);
    return null;
  } catch (err) {
    if (err instanceof TargetRefusedError) return `must point to a public internet address (${err.message})`;
    if (err instanceof ResolveError) return `must name a host that resolves (${err.message})`;
    throw err;
  }
}

/** Only the origin of a callback URL may be logged (the path or query may carry tenant tokens). */
export function loggableOrigin(url: string | null): string | null {
  if (!url) return null;
  try {
    return new URL(url).origin;
  } catch {
    return null;
  }
}

export interface ConfigureRequest {
  url: string | null;
  authType?: AuthType | null;
  resetKey?: boolean | null;
  authKey?: string | null;
}

export interface ConfigureOutcome {
  next: CallbackRegistration;
  changed: boolean;
  /** the key, when it changed (a new one was made or the given one replaced the old one) */
  newKey: string | null;
}

/**
 * product.md: the first call with a url enables callbacks and generates a key; a call with only a
 * new url keeps the key; a new authType or resetKey makes a new key unless one is given.
 * Decisions where it is silent: authType omitted keeps the current one (HMAC the first time);
 * url null disables delivery but keeps authType and key, so enabling again keeps the key; a given
 * authKey always becomes the key.
 */
export function decideCallbackChange(current: CallbackRegistration | null, req: ConfigureRequest, makeKey: () => string = generateAuthKey): ConfigureOutcome {
  const url = req.url;
  const authType: AuthType = req.authType ?? current?.authType ?? 'HMAC';
  let key = current?.authKey ?? null;
  if (req.authKey != null) key = req.authKey;
  else if (req.resetKey === true || (current != null && authType !== current.authType) || (key == null && url != null)) key = makeKey();
  const next: CallbackRegistration = { url, authType, authKey: key };
  if (current == null && url == null && key == null) return { next, changed: false, newKey: null };
  const changed = current == null || current.url !== next.url || current.authType !== next.authType || current.authKey !== next.authKey;
  const keyChanged = key != null && key !== (current?.authKey ?? null);
  return { next, changed, newKey: keyChanged ? key : null };
}

type Q = Kysely<Database> | Transaction<Database>;

/** `forUpdate` (PostgreSQL only) locks the row until the transaction ends: concurrent changes queue up. */
export async function loadCallbackRegistration(db: Q, tenantUid: string, forUpdate = false): Promise<CallbackRegistration | null> {
  let q = db.selectFrom('callback_configs').select(['url', 'auth_type', 'auth_key']).where('tenant_uid', '=', tenantUid);
  if (forUpdate) q = q.forUpdate();
  const row = await q.executeTakeFirst();
  if (!row) return null;
  const authType = (AUTH_TYPES as readonly string[]).includes(row.auth_type) ? (row.auth_type as AuthType) : 'HMAC';
  return { url: row.url, authType, authKey: row.auth_key };
}

export async function storeCallbackRegistration(db: Q, tenantUid: string, reg: CallbackRegistration, now: string, exists: boolean): Promise<void> {
  const values = { url: reg.url, auth_type: reg.authType, auth_key: reg.authKey, updated_at: now };
  if (exists) await db.updateTable('callback_configs').set(values).where('tenant_uid', '=', tenantUid).execute();
  else await db.insertInto('callback_configs').values({ tenant_uid: tenantUid, ...values, created_at: now }).execute();
}

/** Applies ConfigureCallback for a tenant in one transaction; returns the outcome. */
export async function configureCallback(db: Kysely<Database>, tenantUid: string, req: ConfigureRequest, now: string, engine: 'sqlite' | 'postgres' = 'sqlite'): Promise<ConfigureOutcome> {
  const run = () =>
    db.transaction().execute(async (trx) => {
      const current = await loadCallbackRegistration(trx, tenantUid, engine === 'postgres');
      const out = decideCallbackChange(current, req);
      if (out.changed) await storeCallbackRegistration(trx, tenantUid, out.next, now, current != null);
      return out;
    });
  try {
    return await run();
  } catch (err) {
    // Two first calls of one tenant at the same time: the loser's insert hits the primary key.
    // Decide again on what the winner stored.
    if (!isUniqueViolation(err)) throw err;
    return run();
  }
}

function isUniqueViolation(err: unknown): boolean {
  const e = err as { code?: string; message?: string };
  return e?.code === '23505' || e?.code === 'SQLITE_CONSTRAINT_PRIMARYKEY' || e?.code === 'SQLITE_CONSTRAINT_UNIQUE';
}

export interface ProvisionedCallback {
  url: string | null;
  authType: AuthType;
  authKey?: string;
}

/**
 * The provisioning file's `callback: {url, authType, authKey}` of a tenant, applied idempotently:
 * url and authType as written; the key as written when given, otherwise the stored key is kept
 * (one is generated when there is none yet; the tenant obtains it with ConfigureCallback
 * resetKey=true). Returns true when something changed.
 */
export async function applyProvisionedCallback(trx: Q, tenantUid: string, cb: ProvisionedCallback | undefined, now: string): Promise<boolean> {
  if (!cb) return false;
  if (cb.url != null) {
    const problem = callbackUrlProblem(cb.url);
    if (problem) throw new ProvisioningError('PROVISIONING_INVALID', `callback url of tenant ${tenantUid} ${problem}`);
  }
  const current = await loadCallbackRegistration(trx, tenantUid);
  const key = cb.authKey ?? current?.authKey ?? (cb.url != null ? generateAuthKey() : null);
  const next: CallbackRegistration = { url: cb.url, authType: cb.authType, authKey: key };
  if (current && current.url === next.url && current.authType === next.authType && current.authKey === next.authKey) return false;
  if (!current && next.url == null && cb.authKey == null) return false;
  await storeCallbackRegistration(trx, tenantUid, next, now, current != null);
  return true;
}
