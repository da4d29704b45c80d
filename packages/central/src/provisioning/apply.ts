// Applies a provisioning file idempotently in one transaction: the same file twice changes
// nothing; a changed file updates what changed. Provisioning adds and updates; it never deletes
// (a locker taken out of service is removed by an operator on purpose, not by a missing line).
import fs from 'node:fs';
import { parse as parseYaml } from 'yaml';
import type { Kysely, Transaction } from 'kysely';
import type { Database } from '../db/schema';
import type { Clock } from '../clock';
import { newUid, toDbTime } from '../ids';
import { hashSecret, isHash, verifySecret } from '../auth/secrets';
import { terminalSecretDigest, type DigestKey } from '../auth/terminal-secret-digest';
import { ProvisioningFile, type ProvisioningInput } from './schema';
import { findNul } from '../nul';
import { freeMailCode } from '../accounts/mail-code';
import { refreshShipmentItemsAfter } from '../shipments/items';

export class ProvisioningError extends Error {
  constructor(
    readonly code: 'PROVISIONING_INVALID' | 'PROVISIONING_UNREADABLE' | 'PROVISIONING_CONFLICT',
    message: string,
  ) {
    super(message);
  }
}

export interface ProvisioningReport {
  created: number;
  updated: number;
  unchanged: number;
  changes: string[];
}

export function readProvisioningFile(file: string): unknown {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    throw new ProvisioningError('PROVISIONING_UNREADABLE', `cannot read ${file}: ${(e as Error).message}`);
  }
  try {
    return /\.ya?ml$/i.test(file) ? parseYaml(text) : JSON.parse(text);
  } catch (e) {
    throw new ProvisioningError('PROVISIONING_UNREADABLE', `${file} is not valid ${/\.ya?ml$/i.test(file) ? 'YAML' : 'JSON'}: ${(e as Error).message}`);
  }
}

export function parseProvisioning(input: unknown): ProvisioningFile {
  // PostgreSQL text cannot hold U+0000: refuse it up front, naming the field, on both engines
  const nul = findNul(input);
  if (nul) throw new ProvisioningError('PROVISIONING_INVALID', `invalid provisioning file: ${nul}: must not contain the NUL character (U+0000)`);
  const res = ProvisioningFile.safeParse(input);
  if (!res.success) {
    const msgs = res.error.issues.slice(0, 10).map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`);
    throw new ProvisioningError('PROVISIONING_INVALID', `invalid provisioning file: ${msgs.join('; ')}`);
  }
  return res.data;
}

type Row = Record<string, unknown>;

function diff(existing: Row, wanted: Row): string[] {
  return Object.keys(wanted).filter((k) => {
    const a = existing[k];
    const b = wanted[k];
    if (typeof a === 'number' && typeof b === 'number') return Math.abs(a - b) > 1e-9;
    return (a ?? null) !== (b ?? null);
  });
}

const addrJson = (a: unknown) => (a == null ? null : JSON.stringify(a));

/** Hooks other areas register to apply their part of a tenant (e.g. the callback settings). */
export type TenantHook = (trx: Transaction<Database>, tenantUid: string, tenant: ProvisioningFile['tenants'][number], now: string) => Promise<boolean>;
const tenantHooks: TenantHook[] = [];
export function registerTenantProvisioningHook(h: TenantHook): void {
  if (!tenantHooks.includes(h)) tenantHooks.push(h);
}

export interface ProvisioningOptions {
  /**
   * the key of the fast digests of high-entropy terminal secrets (terminalDigestKey of
   * mqtt.terminalSecretPepper): a terminal whose plain secret is high-entropy gets its digest next
   * to the scrypt hash. Absent: none is written (its logins use scrypt and store one later).
   */
  terminalDigestKey?: DigestKey | null;
  /** where a failed refresh of shipment items after the change is told (it is left to the service's worker) */
  log?: { warn: (o: object, msg: string) => void };
}

export async function applyProvisioning(db: Kysely<Database>, input: ProvisioningInput | ProvisioningFile, clock: Clock, opts: ProvisioningOptions = {}): Promise<ProvisioningReport> {
  const file = parseProvisioning(input);
  const now = toDbTime(clock.now());
  const report: ProvisioningReport = { created: 0, updated: 0, unchanged: 0, changes: [] };
  const note = (kind: 'created' | 'updated' | 'unchanged', what: string) => {
    report[kind]++;
    if (kind !== 'unchanged') report.changes.push(`${kind} ${what}`);
  };

  await db.transaction().execute(async (trx) => {
    // Every PUP a tenant, terminal or overflow refers to must exist, in the file or already stored.
    const filePups = new Set(file.pickupPoints.map((p) => p.uid));
    const refs = [
      ...file.pickupPoints.flatMap((p) => (p.overflowPupUid ? [p.overflowPupUid] : [])),
      ...file.tenants.flatMap((t) => t.pickupPoints),
      ...file.terminals.map((t) => t.pupUid),
    ].filter((u) => !filePups.has(u));
    if (refs.length) {
      const found = await trx.selectFrom('pups').select('uid').where('uid', 'in', refs).execute();
      const known = new Set(found.map((r) => r.uid));
      const missing = [...new Set(refs.filter((u) => !known.has(u)))];
      if (missing.length) throw new ProvisioningError('PROVISIONING_INVALID', `unknown pick up point(s) referenced: ${missing.join(', ')}`);
    }

    for (const p of file.pickupPoints) {
      const wanted = {
        name: p.name,
        time_zone: p.timeZone ?? null,
        loc_street_name: p.locationAddress.streetName,
        loc_mailbox: p.locationAddress.mailbox,
        loc_city: p.locationAddress.city,
        loc_country_iso2: p.locationAddress.countryIso2,
        loc_latitude: p.locationAddress.latitude ?? null,
        loc_longitude: p.locationAddress.longitude ?? null,
        delivery_address: addrJson(p.deliveryAddress ?? p.locationAddress),
        parking_address: addrJson(p.parkingAddress ?? null),
        external_reference: p.externalReference ?? null,
        overflow_pup_uid: p.overflowPupUid ?? null,
      };
      const existing = await trx.selectFrom('pups').selectAll().where('uid', '=', p.uid).executeTakeFirst();
      if (!existing) {
        await trx.insertInto('pups').values({ uid: p.uid, ...wanted, created_at: now, updated_at: now }).execute();
        note('created', `pick up point ${p.uid}`);
      } else if (diff(existing, wanted).length) {
        await trx.updateTable('pups').set({ ...wanted, updated_at: now }).where('uid', '=', p.uid).execute();
        note('updated', `pick up point ${p.uid} (${diff(existing, wanted).join(', ')})`);
      } else note('unchanged', `pick up point ${p.uid}`);

      const stored = await trx.selectFrom('lockers').selectAll().where('pup_uid', '=', p.uid).execute();
      for (const l of p.lockers) {
        const w = {
          name: l.name,
          width: l.dimension.width,
          height: l.dimension.height,
          length: l.dimension.length,
          size_code: l.sizeCode ?? null,
          type_code: l.typeCode,
          bus: l.bus,
          board_address: l.boardAddress,
          lock_number: l.lockNumber,
          active: (l.inService ? 1 : 0) as 0 | 1,
        };
        const ex = (l.uid ? stored.find((s) => s.uid === l.uid) : undefined) ?? stored.find((s) => s.name === l.name);
        if (!ex) {
          if (l.uid) {
            const elsewhere = await trx.selectFrom('lockers').select('pup_uid').where('uid', '=', l.uid).executeTakeFirst();
            if (elsewhere) throw new ProvisioningError('PROVISIONING_CONFLICT', `locker ${l.uid} belongs to pick up point ${elsewhere.pup_uid}, not ${p.uid}`);
          }
          await trx.insertInto('lockers').values({ uid: l.uid ?? newUid(), pup_uid: p.uid, ...w, booked_shipment_uid: null, created_at: now, updated_at: now }).execute();
          note('created', `locker ${p.uid}/${l.name}`);
        } else if (diff(ex, w).length) {
          await trx.updateTable('lockers').set({ ...w, updated_at: now }).where('uid', '=', ex.uid).execute();
          note('updated', `locker ${p.uid}/${l.name} (${diff(ex, w).join(', ')})`);
        } else note('unchanged', `locker ${p.uid}/${l.name}`);
      }
    }

    for (const t of file.tenants) {
      const existing = await trx.selectFrom('tenants').selectAll().where('client_id', '=', t.clientId).executeTakeFirst();
      const tenantUid = existing?.uid ?? newUid();

      // The Dispatcher Main Account: an ordinary account, matched by e-mail address.
      const a = t.mainAccount;
      const emailKey = a.email.toLowerCase();
      let acct = await trx.selectFrom('accounts').selectAll().where('email_key', '=', emailKey).executeTakeFirst();
      const acctWanted = {
        user_name: a.userName ?? a.email,
        user_name_key: (a.userName ?? a.email).toLowerCase(),
        email_address: a.email,
        email_key: emailKey,
        first_name: a.firstName,
        last_name: a.lastName,
        phone_number: a.phoneNumber ?? null,
        language_code: a.languageCode ?? null,
        main_pup_uid: t.pickupPoints[0] ?? null,
        is_dispatcher: 1 as const,
      };
      if (!acct) {
        const auid = a.uid ?? newUid();
        // Like every account, it gets its mail code when it is made (accounts/mail-code.ts).
        await trx.insertInto('accounts').values({ uid: auid, ...acctWanted, mail_code: await freeMailCode(trx), created_at: now, updated_at: now }).execute();
        acct = await trx.selectFrom('accounts').selectAll().where('uid', '=', auid).executeTakeFirstOrThrow();
        note('created', `dispatcher account of ${t.clientId}`);
      } else if (diff(acct, acctWanted).length) {
        await trx.updateTable('accounts').set({ ...acctWanted, updated_at: now }).where('uid', '=', acct.uid).execute();
        note('updated', `dispatcher account of ${t.clientId}`);
      } else note('unchanged', `dispatcher account of ${t.clientId}`);
      if (!acct.mail_code) {
        // An account from before migration 102 that the migration could not reach (none as a rule).
        await trx.updateTable('accounts').set({ mail_code: await freeMailCode(trx), updated_at: now }).where('uid', '=', acct.uid).execute();
      }

      const secretHash = isHash(t.clientSecret)
        ? t.clientSecret
        : existing && verifySecret(t.clientSecret, existing.secret_hash)
          ? existing.secret_hash
          : hashSecret(t.clientSecret);
      const tw = { client_id: t.clientId, secret_hash: secretHash, name: t.name, main_account_uid: acct.uid };
      if (!existing) {
        await trx.insertInto('tenants').values({ uid: tenantUid, ...tw, created_at: now, updated_at: now }).execute();
        note('created', `tenant ${t.clientId}`);
      } else if (diff(existing, tw).length) {
        await trx.updateTable('tenants').set({ ...tw, updated_at: now }).where('uid', '=', tenantUid).execute();
        note('updated', `tenant ${t.clientId} (${diff(existing, tw).map((k) => (k === 'secret_hash' ? 'secret' : k)).join(', ')})`);
      } else note('unchanged', `tenant ${t.clientId}`);

      const links = await trx.selectFrom('tenant_pups').select('pup_uid').where('tenant_uid', '=', tenantUid).execute();
      const have = new Set(links.map((l) => l.pup_uid));
      const want = new Set(t.pickupPoints);
      const add = [...want].filter((u) => !have.has(u));
      const drop = [...have].filter((u) => !want.has(u));
      if (add.length) await trx.insertInto('tenant_pups').values(add.map((pup_uid) => ({ tenant_uid: tenantUid, pup_uid }))).execute();
      if (drop.length) await trx.deleteFrom('tenant_pups').where('tenant_uid', '=', tenantUid).where('pup_uid', 'in', drop).execute();
      if (existing && (add.length || drop.length)) note('updated', `pick up points of tenant ${t.clientId}`);

      // The dispatcher account is linked to every PUP of its tenant.
      const acctLinks = new Set((await trx.selectFrom('account_pups').select('pup_uid').where('account_uid', '=', acct.uid).execute()).map((r) => r.pup_uid));
      const addA = t.pickupPoints.filter((u) => !acctLinks.has(u));
      if (addA.length) await trx.insertInto('account_pups').values(addA.map((pup_uid) => ({ account_uid: acct!.uid, pup_uid }))).execute();

      for (const hook of tenantHooks) if (await hook(trx, tenantUid, t, now)) note('updated', `callback of tenant ${t.clientId}`);
    }

    for (const term of file.terminals) {
      const existing = await trx.selectFrom('terminals').selectAll().where('id', '=', term.id).executeTakeFirst();
      const secretHash = isHash(term.secret)
        ? term.secret
        : existing && verifySecret(term.secret, existing.secret_hash)
          ? existing.secret_hash
          : hashSecret(term.secret);
      // the fast digest (auth/terminal-secret-digest.ts) is bound to the scrypt hash: made from the
      // plain secret with the configured key; kept when the hash stays and there is nothing to make
      // it from (a hashed secret in the file, no key configured); dropped when the hash changes
      const made = !isHash(term.secret) && opts.terminalDigestKey ? terminalSecretDigest(opts.terminalDigestKey, term.id, secretHash, term.secret) : null;
      const keep = existing && existing.secret_hash === secretHash && (isHash(term.secret) || !opts.terminalDigestKey) ? existing.secret_fast : null;
      const w = { pup_uid: term.pupUid, secret_hash: secretHash, secret_fast: made ?? keep ?? null, name: term.name ?? null };
      if (!existing) {
        await trx.insertInto('terminals').values({ id: term.id, ...w, created_at: now, updated_at: now }).execute();
        note('created', `terminal ${term.id}`);
      } else if (diff(existing, w).length) {
        await trx.updateTable('terminals').set({ ...w, updated_at: now }).where('id', '=', term.id).execute();
        note('updated', `terminal ${term.id}`);
      } else note('unchanged', `terminal ${term.id}`);
    }
  });
  // PostgreSQL: the items of the shipments that show a renamed point, locker or user (shipments/items.ts)
  await refreshShipmentItemsAfter(db, opts.log ?? { warn: () => undefined });
  return report;
}
