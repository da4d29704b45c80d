// /v1/Account/...: the ten account calls of the API document plus GetAccountSuggestions (an
// extension, docs/accounts.md). Schemas here serve validation, serialization and OpenAPI.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import multipart from '@fastify/multipart';
import { z } from 'zod';
import type { AppContext } from '../context';
import { ApiError, invalidRequest } from '../errors';
import { envelope, envelopeShape, optBool, optStr, pageInfo, paged, pagingRequestShape } from '../http/envelope';
import { SEARCH_LIMITS, searchTerm, searchWords } from '../accounts/search';
import { accountPost } from '../accounts/route';
import { AccountService, FLAG_NAMES } from '../accounts/service';
import { SuggestionService } from '../accounts/suggestions/store';

const nstr = () => z.string().nullable();

const accountFieldsShape = {
  userUid: nstr(),
  userName: nstr(),
  firstName: nstr(),
  lastName: nstr(),
  emailAddress: nstr(),
  phoneNumber: nstr(),
  mainPupUid: nstr(),
  mainPupName: nstr(),
  mailCode: nstr(),
  languageCode: nstr(),
  street: nstr().describe('streetName and streetNo joined by a space'),
  mailbox: nstr(),
  city: nstr(),
  countryCode: nstr().describe('ISO 3166-1 alpha-2'),
};

const flagsShape = Object.fromEntries(FLAG_NAMES.map((f) => [f, z.boolean()])) as Record<(typeof FLAG_NAMES)[number], z.ZodBoolean>;
const optFlagsShape = Object.fromEntries(FLAG_NAMES.map((f) => [f, optBool()])) as Record<(typeof FLAG_NAMES)[number], ReturnType<typeof optBool>>;

const detailsShape = {
  phoneNumber: optStr().describe('international format starting with + or 00'),
  languageCode: optStr().describe('e.g. nl, nl-NL, en-GB, en'),
  streetName: optStr(),
  streetNo: optStr(),
  mailbox: optStr(),
  city: optStr(),
  countryCode: optStr().describe('ISO 3166-1 alpha-2'),
};

const createBody = z.object({
  emailAddress: z.string(),
  firstName: z.string(),
  lastName: z.string(),
  pickUpPointUid: optStr().describe('the main pick up point; must be one the caller manages (InvalidPupUid otherwise)'),
  userName: optStr().describe('defaults to the e-mail address'),
  ...detailsShape,
  mutationConfig: z
    .object({ userUid: optStr().describe('not needed; ignored'), ...optFlagsShape })
    .nullish(),
});

/** The create calls answer the account's fields without the address, plus canManageUser. */
const { street: _street, mailbox: _mailbox, city: _city, countryCode: _countryCode, ...accountCoreShape } = accountFieldsShape;
const createResultShape = { ...accountCoreShape, canManageUser: z.boolean() };

/** SetAccountDetails answers the create result's fields except the user name. */
const { userName: _userName, ...setDetailsResultShape } = createResultShape;

const Address = z.object({
  streetName: z.string(),
  mailbox: z.string(),
  city: z.string(),
  countryIso2: z.string(),
  latitude: z.number().nullable(),
  longitude: z.number().nullable(),
});

const GetAccountsItem = z.object({
  userUid: z.string(),
  userName: z.string(),
  canManage: z.boolean(),
  firstName: nstr().optional(),
  lastName: nstr().optional(),
  emailAddress: nstr().optional(),
  phoneNumber: nstr().optional(),
  mainPupUid: nstr().optional(),
  mainPupName: nstr().optional(),
  mailCode: nstr().optional(),
  languageCode: nstr().optional(),
  street: nstr().optional(),
  mailbox: nstr().optional(),
  city: nstr().optional(),
  countryCode: nstr().optional(),
});

export const UploadResult = envelope({
  reference: z.string(),
  totalCount: z.number().int(),
  importedCount: z.number().int(),
  existedCount: z.number().int(),
  removedCount: z.number().int(),
  errorCount: z.number().int(),
  dateTime: z.string().describe('ISO 8601 UTC'),
  errorLogs: z.array(z.object({ id: z.string(), message: z.string() })).describe('the first rejected rows (at most suggestions.maxErrorLogs, default 1000); errorCount counts them all'),
});

const SuggestionItem = z.object({
  emailAddress: z.string(),
  phoneNumber: nstr(),
  languageCode: nstr(),
  firstName: nstr(),
  lastName: nstr(),
  remarks: nstr(),
  pupUid: nstr(),
  pupName: nstr(),
});

const userUidBody = z.object({ userUid: optStr() });

export async function accountRoutes(app: FastifyInstance, ctx: AppContext): Promise<void> {
  const accounts = new AccountService(ctx);
  const suggestions = new SuggestionService(ctx);
  const limit = ctx.config.http.uploadLimitBytes;
  await app.register(multipart, { limits: { fileSize: limit, files: 4, fields: 10, parts: 20, fieldSize: 64 * 1024, headerPairs: 200 } });

  accountPost(app, {
    path: '/v1/Account/GetAccount',
    summary: 'Look up an account by userUid, userName or emailAddress (in that order)',
    description: 'An account the caller cannot manage is found only by emailAddress (by userUid or userName it counts as not found); then only isExisting and userUid are given, every other field is null.',
    body: z.object({ userName: optStr(), emailAddress: optStr(), userUid: optStr() }),
    response: envelope({ isExisting: z.boolean(), canManageUser: z.boolean(), ...accountFieldsShape }),
    handler: async (b, req) => accounts.getAccount(req.tenant, b),
  });

  accountPost(app, {
    path: '/v1/Account/GetAccounts',
    summary: 'Search the accounts the caller manages (paged)',
    description: 'Fields whose include flag is false are omitted from the items.',
    body: z.object({
      ...pagingRequestShape,
      userName: searchTerm().describe(`contained in the user name, ignoring case; at most ${SEARCH_LIMITS.maxLength} characters`),
      emailAddress: searchTerm().describe(`contained in the e-mail address, ignoring case; at most ${SEARCH_LIMITS.maxLength} characters`),
      fullName: searchWords().describe(`every word contained in "firstName lastName", ignoring case; at most ${SEARCH_LIMITS.maxLength} characters and ${SEARCH_LIMITS.maxWords} words`),
      pupUid: searchTerm(SEARCH_LIMITS.maxPupUidLength),
      phoneNumber: searchTerm(SEARCH_LIMITS.maxPhoneLength).describe(`contained in the phone number (spaces and punctuation ignored, 00 read as +); at most ${SEARCH_LIMITS.maxPhoneLength} characters`),
      mailCode: searchTerm(SEARCH_LIMITS.maxMailCodeLength),
      includeEmail: optBool().describe('default true'),
      includeFullName: optBool().describe('default true'),
      includeMainPup: optBool().describe('default true'),
      includeAddress: optBool().describe('default false'),
      includeLanguage: optBool().describe('default false'),
      includeMailCode: optBool().describe('default false'),
      includePhone: optBool().describe('default false'),
    }),
    response: paged(GetAccountsItem),
    handler: async (b, req) => {
      const r = await accounts.getAccounts(req.tenant, b);
      return { items: r.items, ...pageInfo(b.pageNo, b.pageSize, r.total) };
    },
  });

  accountPost(app, {
    path: '/v1/Account/GetAccountPickUpPoint',
    summary: "The account's main pick up point and mail code (for addressing mail to the account)",
    body: userUidBody,
    response: envelope({
      userUid: z.string(),
      mailCode: nstr(),
      mailCodeFirstName: nstr().describe('the letters before the hyphen of the mail code'),
      mailCodeLastName: nstr().describe('the digits after the hyphen of the mail code'),
      pupUid: nstr(),
      name: nstr(),
      timeZone: nstr(),
      deliveryAddress: Address.nullable(),
      locationAddress: Address.nullable(),
    }),
    handler: async (b, req) => accounts.getAccountPickUpPoint(req.tenant, b.userUid),
  });

  accountPost(app, {
    path: '/v1/Account/GetAccountMutationConfig',
    summary: 'The nine mutation flags of an account',
    body: userUidBody,
    response: envelope({ userUid: z.string(), ...flagsShape }),
    handler: async (b, req) => accounts.getMutationConfig(req.tenant, b.userUid),
  });

  accountPost(app, {
    path: '/v1/Account/SetAccountDetails',
    summary: "Change an account's details (null leaves a field unchanged)",
    description: 'firstName and lastName together; streetName, streetNo, mailbox, city and countryCode together.',
    body: z.object({ userUid: optStr(), emailAddress: optStr(), firstName: optStr(), lastName: optStr(), ...detailsShape }),
    response: envelope(setDetailsResultShape),
    handler: async (b, req) => accounts.setDetails(req.tenant, b),
  });

  accountPost(app, {
    path: '/v1/Account/SetAccountPickUpPoint',
    summary: "Set an account's main (default) pick up point",
    body: z.object({ userUid: optStr(), pickUpPointUid: optStr() }),
    response: envelope({ userUid: z.string(), pupUid: nstr(), pickUpPointChanged: z.boolean() }),
    handler: async (b, req) => accounts.setPickUpPoint(req.tenant, b),
  });

  accountPost(app, {
    path: '/v1/Account/SetAccountMutationConfig',
    summary: 'Change mutation flags (null leaves a flag unchanged)',
    body: z.object({ userUid: optStr(), ...optFlagsShape }),
    response: envelope({ userUid: z.string(), ...flagsShape }),
    handler: async (b, req) => accounts.setMutationConfig(req.tenant, b),
  });

  accountPost(app, {
    path: '/v1/Account/RemoveAccount',
    summary: 'Remove an account the caller manages',
    body: userUidBody,
    response: z.object(envelopeShape),
    handler: async (b, req) => {
      await accounts.remove(req.tenant, b.userUid);
      return {};
    },
  });

  accountPost(app, {
    path: '/v1/Account/CreateAccount',
    summary: 'Create an account linked to one of your pick up points',
    body: createBody,
    response: envelope(createResultShape),
    idempotent: true,
    handler: async (b, req) => accounts.create(req.tenant, b),
  });

  accountPost(app, {
    path: '/v1/Account/CreateOrGetAccount',
    summary: 'Return the account matched by e-mail address (and userName when given), or create it',
    body: createBody,
    response: envelope({ ...createResultShape, isExisting: z.boolean() }),
    handler: async (b, req) => accounts.createOrGet(req.tenant, b),
  });

  accountPost(app, {
    path: '/v1/Account/UploadAccountSuggestions',
    summary: 'Upload the list of account suggestions (multipart/form-data: parts data and file)',
    description:
      "Part `data`: JSON object {\"reference\": string|null} (the file name is used when reference is omitted). Part `file`: .xlsx, .xls or .csv (';' delimited) " +
      'with the columns EmailAddress, PhoneNumber, LanguageCode, FirstName, LastName, Remarks, PickUpPoint. The newest upload replaces the previous list.',
    jsonBody: false,
    openapi: { consumes: ['multipart/form-data'] },
    body: z
      .object({
        data: z.string().describe('JSON object {"reference": string|null}'),
        file: z.string().meta({ format: 'binary' }).describe('the suggestion file'),
      })
      .nullish(),
    response: UploadResult,
    handler: async (_b, req) => {
      const parts = await readUpload(req, limit);
      return suggestions.upload(req.tenant, parts);
    },
  });

  accountPost(app, {
    path: '/v1/Account/GetAccountSuggestions',
    summary: 'Suggestions of the active upload (extension: not in the API document)',
    description: 'searchText matches e-mail address, first or last name (every term, case-insensitive); pupUid filters on the suggested pick up point.',
    body: z.object({
      ...pagingRequestShape,
      searchText: searchWords().describe(`every word contained in the e-mail address or "firstName lastName", ignoring case; at most ${SEARCH_LIMITS.maxLength} characters and ${SEARCH_LIMITS.maxWords} words`),
      pupUid: searchTerm(SEARCH_LIMITS.maxPupUidLength),
    }),
    response: paged(SuggestionItem, { reference: nstr(), dateTime: nstr().describe('ISO 8601 UTC time of the active upload') }),
    handler: async (b, req) => {
      const r = await suggestions.list(req.tenant, b);
      return { items: r.items, reference: r.reference, dateTime: r.dateTime, ...pageInfo(b.pageNo, b.pageSize, r.total) };
    },
  });
}

/** Reads the two parts of an upload. Part names are matched case-insensitively. */
async function readUpload(req: FastifyRequest, limit: number): Promise<{ reference: string | null; fileName: string; bytes: Uint8Array }> {
  if (!req.isMultipart()) throw invalidRequest(`unsupported Content-Type ${req.headers['content-type'] ?? '(none)'}: send multipart/form-data with the parts data and file`);
  let dataText: string | undefined;
  let file: { name: string; bytes: Buffer } | undefined;
  try {
    for await (const part of req.parts()) {
      const name = part.fieldname.toLowerCase();
      if (part.type === 'file') {
        const bytes = await part.toBuffer();
        if (name === 'file' && !file) file = { name: part.filename ?? '', bytes };
        else if (name === 'data' && dataText === undefined) dataText = bytes.toString('utf8');
      } else if (name === 'data' && dataText === undefined) {
        dataText = typeof part.value === 'string' ? part.value : String(part.value ?? '');
      } else if (name === 'file' && !file) {
        file = { name: '', bytes: Buffer.from(typeof part.value === 'string' ? part.value : '') };
      }
    }
  } catch (e) {
    const err = e as { code?: string; statusCode?: number; message?: string };
    if (err.code === 'FST_REQ_FILE_TOO_LARGE') throw new ApiError('InvalidRequest', `file: larger than the upload limit of ${limit} bytes`, 413);
    if (err.statusCode === 413) throw new ApiError('InvalidRequest', `multipart request too large: ${err.message ?? 'limit reached'}`, 413);
    if (e instanceof ApiError) throw e;
    throw invalidRequest(`malformed multipart/form-data body: ${err.message ?? 'cannot be read'}`);
  }
  if (dataText === undefined) throw new ApiError('NoRequestData', 'data: the request data part is missing (a JSON object {"reference": ...})', 400);
  let data: unknown;
  try {
    data = JSON.parse(dataText);
  } catch {
    throw invalidRequest('data: must be a JSON object such as {"reference": "list 2026-03"}');
  }
  if (!data || typeof data !== 'object' || Array.isArray(data)) throw invalidRequest('data: must be a JSON object such as {"reference": "list 2026-03"}');
  const refKey = Object.keys(data).find((k) => k.toLowerCase() === 'reference');
  const ref = refKey ? (data as Record<string, unknown>)[refKey] : undefined;
  if (ref !== undefined && ref !== null && typeof ref !== 'string') throw invalidRequest('data.reference: must be a string or null');
  if (typeof ref === 'string' && ref.length > 200) throw invalidRequest('data.reference: at most 200 characters');
  if (typeof ref === 'string' && ref.includes('\u0000')) throw invalidRequest('data.reference: must not contain the NUL character (U+0000)');
  if (!file) throw new ApiError('NoRequestFile', 'file: the request file part is missing', 400);
  if (!file.name.trim() || file.bytes.length === 0) throw new ApiError('MissingFile', 'file: no file specified (the file part has no file name or is empty)', 400);
  if (file.name.includes('\u0000')) throw invalidRequest('file: the file name must not contain the NUL character (U+0000)');
  return { reference: typeof ref === 'string' && ref.trim() ? ref.trim() : null, fileName: file.name.trim(), bytes: file.bytes };
}
