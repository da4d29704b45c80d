// Account suggestion uploads: per tenant, the newest accepted upload is the active list; earlier
// uploads expire (their rows are deleted, only their counts stay). Suggestions live in their own
// table and are never accounts. Counts (docs/accounts.md):
//   totalCount    data rows in the file (blank rows skipped)
//   importedCount valid rows whose e-mail address was not in the previous active upload
//   existedCount  valid rows whose e-mail address was in the previous active upload (refreshed)
//   removedCount  suggestions of the previous active upload whose e-mail address is not in this one
//   errorCount    rejected rows (one errorLogs entry each, the response lists the first
//                 suggestions.maxErrorLogs of them)
// totalCount = importedCount + existedCount + errorCount.
import { sql } from 'kysely';
import type { AppContext, TenantPrincipal } from '../../context';
import type { Logger } from '../../logger';
import { ApiError } from '../../errors';
import { newUid, toDbTime } from '../../ids';
import { emailKey } from '../validate';
import { detectType, readRowsOffThread, SuggestionFileError, validateRows, type RowError, type SuggestionRow } from './parse';
import { contains, queryWords } from '../search';

export interface UploadResult {
  reference: string;
  totalCount: number;
  importedCount: number;
  existedCount: number;
  removedCount: number;
  errorCount: number;
  dateTime: string;
  errorLogs: RowError[];
}

/** A stored suggestion as GetAccountSuggestions lists it: the parsed row, with its PUP's name. */
export interface SuggestionItem extends Omit<SuggestionRow, 'rowNo'> {
  pupName: string | null;
}

const INSERT_CHUNK = 400;

export class SuggestionService {
  private readonly log: Logger;
  constructor(private readonly ctx: AppContext) {
    this.log = ctx.log.child({ ns: 'central.accounts.suggestions' });
  }

  async upload(tenant: TenantPrincipal, input: { reference: string | null; fileName: string; bytes: Uint8Array }): Promise<UploadResult> {
    const db = this.ctx.db.kysely;
    let parsed: ReturnType<typeof validateRows>;
    let type: ReturnType<typeof detectType>;
    const pups = tenant.pupUids.size ? await db.selectFrom('pups').select(['uid', 'name', 'external_reference']).where('uid', 'in', [...tenant.pupUids]).execute() : [];
    // PickUpPoint cells may hold the pick up point's uid, name or external reference (any case).
    const resolve = (v: string): string | null => {
      const k = v.trim().toLowerCase();
      const hit = pups.find((p) => p.uid.toLowerCase() === k) ?? pups.find((p) => p.name.toLowerCase() === k) ?? pups.find((p) => (p.external_reference ?? '').toLowerCase() === k);
      return hit?.uid ?? null;
    };
    try {
      type = detectType(input.fileName, input.bytes);
      const lim = this.ctx.config.suggestions;
      parsed = validateRows(await readRowsOffThread(type, input.bytes, { maxRows: lim.maxRows, maxUnpackedBytes: lim.maxUnpackedBytes, maxRatio: lim.maxCompressionRatio }, lim.parseTimeoutMs), resolve);
    } catch (e) {
      if (e instanceof SuggestionFileError) throw new ApiError(e.code, e.message, 400);
      throw e;
    }
    const now = this.ctx.clock.now();
    const reference = input.reference ?? input.fileName;
    const uploadUid = newUid();
    const counts = await db.transaction().execute(async (trx) => {
      // One upload of a tenant at a time: on PostgreSQL two concurrent uploads would each see the
      // same previous list, and both end up active. Locking the tenant's row makes the second
      // wait and then replace the first. (SQLite transactions run one at a time anyway.)
      if (this.ctx.db.engine === 'postgres') await trx.selectFrom('tenants').select('uid').where('uid', '=', tenant.uid).forUpdate().execute();
      const prev = await trx.selectFrom('account_suggestion_uploads').select('uid').where('tenant_uid', '=', tenant.uid).where('status', '=', 'active').execute();
      const prevUids = prev.map((p) => p.uid);
      const prevKeys = new Set(
        prevUids.length ? (await trx.selectFrom('account_suggestions').select('email_key').where('upload_uid', 'in', prevUids).execute()).map((r) => r.email_key) : [],
      );
      const newKeys = new Set(parsed.rows.map((r) => emailKey(r.emailAddress)));
      const existed = [...newKeys].filter((k) => prevKeys.has(k)).length;
      const removed = [...prevKeys].filter((k) => !newKeys.has(k)).length;
      if (prevUids.length) {
        await trx.deleteFrom('account_suggestions').where('upload_uid', 'in', prevUids).execute();
        await trx.updateTable('account_suggestion_uploads').set({ status: 'expired', expired_at: toDbTime(now) }).where('uid', 'in', prevUids).execute();
      }
      const c = {
        total_count: parsed.total,
        imported_count: parsed.rows.length - existed,
        existed_count: existed,
        removed_count: removed,
        error_count: parsed.errors.length,
      };
      await trx
        .insertInto('account_suggestion_uploads')
        .values({ uid: uploadUid, tenant_uid: tenant.uid, reference, file_name: input.fileName, file_type: type, status: 'active', ...c, created_at: toDbTime(now), expired_at: null })
        .execute();
      for (let i = 0; i < parsed.rows.length; i += INSERT_CHUNK) {
        await trx
          .insertInto('account_suggestions')
          .values(
            parsed.rows.slice(i, i + INSERT_CHUNK).map((r) => ({
              upload_uid: uploadUid,
              tenant_uid: tenant.uid,
              row_no: r.rowNo,
              email_address: r.emailAddress,
              email_key: emailKey(r.emailAddress),
              phone_number: r.phoneNumber,
              language_code: r.languageCode,
              first_name: r.firstName,
              last_name: r.lastName,
              remarks: r.remarks,
              pup_uid: r.pupUid,
            })),
          )
          .execute();
      }
      return c;
    });
    this.log.info({ tenant: tenant.clientId, uploadUid, fileType: type, ...counts }, 'account suggestions uploaded');
    return {
      reference,
      totalCount: counts.total_count,
      importedCount: counts.imported_count,
      existedCount: counts.existed_count,
      removedCount: counts.removed_count,
      errorCount: counts.error_count,
      dateTime: now.toISOString(),
      // errorCount is exact; the list is capped so a file of bad rows cannot blow up the response
      errorLogs: parsed.errors.slice(0, this.ctx.config.suggestions.maxErrorLogs),
    };
  }

  /** The active upload's suggestions, filtered and paged. */
  async list(tenant: TenantPrincipal, b: { pageNo: number; pageSize: number; searchText?: string | null; pupUid?: string | null }) {
    const db = this.ctx.db.kysely;
    const active = await db
      .selectFrom('account_suggestion_uploads')
      .select(['uid', 'reference', 'created_at'])
      .where('tenant_uid', '=', tenant.uid)
      .where('status', '=', 'active')
      .orderBy('created_at', 'desc')
      .orderBy('uid', 'desc')
      .executeTakeFirst();
    const pupUid = b.pupUid?.trim();
    if (pupUid && !tenant.pupUids.has(pupUid)) throw new ApiError('InvalidPupUid', 'pupUid: unknown pick up point or not one you manage', 400);
    if (!active) return { items: [] as SuggestionItem[], total: 0, reference: null, dateTime: null };
    let q = db.selectFrom('account_suggestions as s').where('s.upload_uid', '=', active.uid);
    if (pupUid) q = q.where('s.pup_uid', '=', pupUid);
    // bounded inputs, linear work per row: accounts/search.ts
    const engine = this.ctx.db.engine;
    for (const word of queryWords(b.searchText)) {
      q = q.where(sql<boolean>`(${contains(engine, sql.ref('s.email_key'), word, true)} or ${contains(engine, sql`coalesce(s.first_name, '') || ' ' || coalesce(s.last_name, '')`, word)})`);
    }
    const { n } = await q.select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow();
    const rows = await q
      .leftJoin('pups as p', 'p.uid', 's.pup_uid')
      .select(['s.email_address', 's.phone_number', 's.language_code', 's.first_name', 's.last_name', 's.remarks', 's.pup_uid', 'p.name as pup_name'])
      .orderBy('s.email_key')
      .limit(b.pageSize)
      .offset((b.pageNo - 1) * b.pageSize)
      .execute();
    return {
      items: rows.map(
        (r): SuggestionItem => ({
          emailAddress: r.email_address,
          phoneNumber: r.phone_number,
          languageCode: r.language_code,
          firstName: r.first_name,
          lastName: r.last_name,
          remarks: r.remarks,
          pupUid: r.pup_uid,
          pupName: r.pup_name ?? null,
        }),
      ),
      total: Number(n),
      reference: active.reference,
      dateTime: new Date(active.created_at).toISOString(),
    };
  }
}
