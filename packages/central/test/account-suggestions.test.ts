import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as XLSX from 'xlsx';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { PUP_A1, PUP_A2, PUP_B1 } from './support/fixtures';
import { COLUMNS, detectType, mapHeader, parseCsv, validateRows } from '../src/accounts/suggestions/parse';

const UPLOAD_LIMIT = 64 * 1024;

interface Part {
  name: string;
  filename?: string;
  contentType?: string;
  body: string | Uint8Array;
}

/** multipart/form-data encoded by hand, so tests control every header (a part without filename, an empty file). */
function multipart(parts: Part[]): { payload: Buffer; contentType: string } {
  const boundary = `----locker${Math.random().toString(16).slice(2)}`;
  const chunks: Buffer[] = [];
  for (const p of parts) {
    let head = `--${boundary}\r\nContent-Disposition: form-data; name="${p.name}"`;
    if (p.filename !== undefined) head += `; filename="${p.filename}"`;
    head += '\r\n';
    if (p.contentType) head += `Content-Type: ${p.contentType}\r\n`;
    chunks.push(Buffer.from(head + '\r\n'), typeof p.body === 'string' ? Buffer.from(p.body) : Buffer.from(p.body), Buffer.from('\r\n'));
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return { payload: Buffer.concat(chunks), contentType: `multipart/form-data; boundary=${boundary}` };
}

const HEADER = COLUMNS.join(';');
const csv = (...lines: string[]) => [HEADER, ...lines].join('\r\n') + '\r\n';
const row = (email: string, phone = '', lang = '', first = '', last = '', remarks = '', pup = '') => [email, phone, lang, first, last, remarks, pup].join(';');

function workbook(rows: unknown[][], bookType: 'xlsx' | 'biff8'): Buffer {
  const wb = XLSX.utils.book_new();
  XLSX.utils.book_append_sheet(wb, XLSX.utils.aoa_to_sheet(rows), 'Suggestions');
  return XLSX.write(wb, { type: 'buffer', bookType }) as Buffer;
}

describe('suggestion file parsing (pure)', () => {
  it('parses ;-delimited CSV with quotes, CRLF and a BOM', () => {
    expect(parseCsv('\ufeffa;b;c\r\n"x;y";"say ""hi""";\n1;2;3')).toEqual([
      ['a', 'b', 'c'],
      ['x;y', 'say "hi"', ''],
      ['1', '2', '3'],
    ]);
  });
  it('maps headers in any order and any case; refuses missing, unknown and duplicate columns', () => {
    const shuffled = ['pickuppoint', ' Remarks ', 'LASTNAME', 'FirstName', 'languagecode', 'PhoneNumber', 'emailaddress'];
    expect(mapHeader(shuffled)).toMatchObject({ EmailAddress: 6, PickUpPoint: 0 });
    expect(() => mapHeader(COLUMNS.slice(1))).toThrow(/missing EmailAddress/);
    expect(() => mapHeader([...COLUMNS, 'Age'])).toThrow(/unknown Age/);
    expect(() => mapHeader([...COLUMNS, 'remarks'])).toThrow(/duplicate Remarks/);
    expect(mapHeader([...COLUMNS, ''])).toMatchObject({ EmailAddress: 0 }); // trailing delimiter
  });
  it('detects file types from extension and content', () => {
    expect(detectType('a.CSV', Buffer.from('x;y'))).toBe('csv');
    expect(detectType('a.xlsx', workbook([['a']], 'xlsx'))).toBe('xlsx');
    expect(detectType('a.xls', workbook([['a']], 'biff8'))).toBe('xls');
    expect(() => detectType('a.txt', Buffer.from('x'))).toThrow(/not supported/);
    expect(() => detectType('a.xlsx', Buffer.from('x;y'))).toThrow(/not an Excel workbook/);
    expect(() => detectType('a.csv', workbook([['a']], 'xlsx'))).toThrow(/not text/);
  });
  it('validates rows and reports row numbers, not e-mail addresses', () => {
    const r = validateRows(parseCsv(csv(row('ok@example.test', '+31 6 1234 5678'), row('bad'), row('ok@example.test'), '', row('x@example.test', '0612345678'))), () => null);
    expect(r.total).toBe(4);
    expect(r.rows.map((x) => x.rowNo)).toEqual([2]);
    expect(r.rows[0]!.phoneNumber).toBe('+31612345678');
    expect(r.errors).toEqual([
      { id: 'row 3', message: expect.stringContaining('EmailAddress: not a valid') },
      { id: 'row 4', message: expect.stringContaining('already in row 2') },
      { id: 'row 6', message: expect.stringContaining('PhoneNumber') },
    ]);
  });
});

describeEngines('UploadAccountSuggestions and GetAccountSuggestions', (engine) => {
  let t: TestService;
  let tokB: string;
  beforeAll(async () => {
    t = await createTestService(engine, { config: { http: { uploadLimitBytes: UPLOAD_LIMIT } } });
    tokB = await t.token('tenant-b');
  });
  afterAll(async () => t?.close());

  async function upload(parts: Part[], token?: string) {
    const tok = token ?? (await t.token());
    const { payload, contentType } = multipart(parts);
    const res = await t.app.inject({ method: 'POST', url: '/v1/Account/UploadAccountSuggestions', payload, headers: { 'content-type': contentType, authorization: `Bearer ${tok}` } });
    return { status: res.statusCode, body: res.json() };
  }
  const dataPart = (reference?: string | null) => ({ name: 'data', body: JSON.stringify(reference === undefined ? {} : { reference }) });
  const filePart = (filename: string, body: string | Uint8Array) => ({ name: 'file', filename, contentType: 'application/octet-stream', body });
  const suggestions = async (body: Record<string, unknown> = {}, token?: string) => (await t.post('/v1/Account/GetAccountSuggestions', { pageNo: 1, pageSize: 100, ...body }, token)).body;

  it('imports a CSV file: counts, per-row errors, reference, dateTime', async () => {
    const file = csv(
      row('anna@example.test', '+31612345678', 'nl', 'Anna', 'de Vries', 'floor 2', 'Alpha Station'),
      row('bram@example.test', '0032 470 12 34 56', 'en-gb', 'Bram', 'Peeters', '"desk; left"', PUP_A2),
      row('carla@example.test', '', '', 'Carla', '', '', 'EXT-A1'),
      row('no-at-sign', '+31612345678'),
      row('dirk@example.test', '0612345678'),
      row('eva@example.test', '', '', '', '', '', 'Beta Campus'),
      row('ANNA@example.test'),
      '',
    );
    const res = await upload([dataPart('March list'), filePart('people.csv', file)]);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toEqual({
      success: true, error: null, message: null, reference: 'March list',
      totalCount: 7, importedCount: 3, existedCount: 0, removedCount: 0, errorCount: 4,
      dateTime: t.clock.now().toISOString(),
      errorLogs: [
        { id: 'row 5', message: expect.stringContaining('EmailAddress') },
        { id: 'row 6', message: expect.stringContaining('PhoneNumber: must be in international format starting with + or 00') },
        { id: 'row 7', message: expect.stringContaining('PickUpPoint: unknown pick up point or not one you manage') },
        { id: 'row 8', message: expect.stringContaining('already in row 2') },
      ],
    });
    const list = await suggestions();
    expect(list).toMatchObject({ success: true, reference: 'March list', totalItems: 3, dateTime: t.clock.now().toISOString() });
    expect(list.items).toEqual([
      { emailAddress: 'anna@example.test', phoneNumber: '+31612345678', languageCode: 'nl', firstName: 'Anna', lastName: 'de Vries', remarks: 'floor 2', pupUid: PUP_A1, pupName: 'Alpha Station' },
      { emailAddress: 'bram@example.test', phoneNumber: '+32470123456', languageCode: 'en-GB', firstName: 'Bram', lastName: 'Peeters', remarks: 'desk; left', pupUid: PUP_A2, pupName: 'Alpha Harbour' },
      { emailAddress: 'carla@example.test', phoneNumber: null, languageCode: null, firstName: 'Carla', lastName: null, remarks: null, pupUid: PUP_A1, pupName: 'Alpha Station' },
    ]);
  });

  it('filters and pages suggestions; other tenants see none', async () => {
    expect((await suggestions({ searchText: 'VRIES' })).items.map((i: any) => i.emailAddress)).toEqual(['anna@example.test']);
    expect((await suggestions({ searchText: 'bram peeters' })).items.map((i: any) => i.emailAddress)).toEqual(['bram@example.test']);
    expect((await suggestions({ pupUid: PUP_A1 })).items.map((i: any) => i.emailAddress)).toEqual(['anna@example.test', 'carla@example.test']);
    const page = await suggestions({ pageNo: 2, pageSize: 2 });
    expect(page).toMatchObject({ pageNo: 2, pageSize: 2, totalItems: 3, totalPages: 2 });
    expect(page.items.map((i: any) => i.emailAddress)).toEqual(['carla@example.test']);
    expect(await suggestions({}, tokB)).toMatchObject({ success: true, items: [], totalItems: 0, reference: null, dateTime: null });
    expect(await suggestions({ pupUid: PUP_B1 })).toMatchObject({ success: false, error: 'InvalidPupUid' });
  });

  it('never shows suggestions among accounts', async () => {
    const got = await t.post('/v1/Account/GetAccount', { emailAddress: 'anna@example.test' });
    expect(got.body).toMatchObject({ success: true, isExisting: false, userUid: null });
    const list = await t.post('/v1/Account/GetAccounts', { pageNo: 1, pageSize: 50, emailAddress: 'example.test', fullName: 'Anna' });
    expect(list.body).toMatchObject({ success: true, totalItems: 0, items: [] });
  });

  it('replaces the previous upload (xlsx): imported, existed and removed counts; reference defaults to the file name', async () => {
    t.clock.advance(60_000);
    const file = workbook(
      [
        [...COLUMNS],
        ['anna@example.test', '+31 6 11111111', 'nl', 'Anna', 'Visser', '', 'EXT-A2'],
        ['frank@example.test', '', 'en', 'Frank', 'Bos', 'new', ''],
        ['gina@example.test', 31612345678, '', 'Gina', 'Mol', '', ''],
      ],
      'xlsx',
    );
    const res = await upload([dataPart(), filePart('April.xlsx', file)]);
    expect(res.body).toMatchObject({
      success: true, reference: 'April.xlsx', totalCount: 3, importedCount: 1, existedCount: 1, removedCount: 2, errorCount: 1,
      dateTime: t.clock.now().toISOString(), errorLogs: [{ id: 'row 4', message: expect.stringContaining('PhoneNumber') }],
    });
    const list = await suggestions();
    expect(list.reference).toBe('April.xlsx');
    expect(list.items.map((i: any) => [i.emailAddress, i.lastName, i.phoneNumber, i.pupUid])).toEqual([
      ['anna@example.test', 'Visser', '+31611111111', PUP_A2],
      ['frank@example.test', 'Bos', null, null],
    ]);
    const uploads = await t.ctx.db.kysely.selectFrom('account_suggestion_uploads').select(['status', 'reference']).orderBy('created_at').execute();
    expect(uploads.filter((u) => u.status === 'active').map((u) => u.reference)).toEqual(['April.xlsx']);
    expect(uploads.find((u) => u.reference === 'March list')?.status).toBe('expired');
  });

  it('reads .xls (Excel 97-2003) files', async () => {
    const file = workbook([[...COLUMNS].reverse(), ['Alpha Harbour', '', 'Lang', 'Hans', 'nl', '+49 151 23456789', 'hans@example.test']], 'biff8');
    const res = await upload([dataPart('xls list'), filePart('legacy.xls', file)]);
    expect(res.body).toMatchObject({ success: true, totalCount: 1, importedCount: 1, existedCount: 0, removedCount: 2, errorCount: 0, errorLogs: [] });
    expect((await suggestions()).items).toEqual([
      { emailAddress: 'hans@example.test', phoneNumber: '+4915123456789', languageCode: 'nl', firstName: 'Hans', lastName: 'Lang', remarks: null, pupUid: PUP_A2, pupName: 'Alpha Harbour' },
    ]);
  });

  it('keeps the active list when an upload is refused', async () => {
    const res = await upload([dataPart('broken'), filePart('broken.csv', 'Email;Phone\r\nx@example.test;+31612345678\r\n')]);
    expect(res.body).toMatchObject({ success: false, error: 'InvalidHeader' });
    expect((await suggestions()).reference).toBe('xls list');
  });

  describe('errors', () => {
    const good = csv(row('z@example.test'));
    it.each([
      ['NoRequestData', () => [filePart('a.csv', good)]],
      ['NoRequestFile', () => [dataPart('x')]],
      ['MissingFile', () => [dataPart('x'), filePart('a.csv', '')]],
      ['MissingFile', () => [dataPart('x'), { name: 'file', body: good }]],
      ['MissingFile', () => [dataPart('x'), filePart('', good)]],
      ['InvalidHeader', () => [dataPart('x'), filePart('a.csv', 'EmailAddress;PhoneNumber\r\nz@example.test;\r\n')]],
      ['InvalidHeader', () => [dataPart('x'), filePart('a.csv', `${HEADER};Age\r\n`)]],
      ['InvalidHeader', () => [dataPart('x'), filePart('a.csv', '\r\n\r\n')]],
      ['InvalidHeader', () => [dataPart('x'), filePart('a.xlsx', workbook([['Name', 'Mail']], 'xlsx'))]],
      ['InvalidImportType', () => [dataPart('x'), filePart('a.txt', good)]],
      ['InvalidImportType', () => [dataPart('x'), filePart('a.pdf', '%PDF-1.4')]],
      ['InvalidImportType', () => [dataPart('x'), filePart('a.xlsx', good)]],
      ['InvalidImportType', () => [dataPart('x'), filePart('a.xls', workbook([[...COLUMNS]], 'xlsx'))]],
      ['InvalidImportType', () => [dataPart('x'), filePart('a.csv', new Uint8Array([0x41, 0x00, 0x42]))]],
      ['InvalidRequest', () => [{ name: 'data', body: 'not json' }, filePart('a.csv', good)]],
      ['InvalidRequest', () => [{ name: 'data', body: '[1]' }, filePart('a.csv', good)]],
      ['InvalidRequest', () => [{ name: 'data', body: '{"reference": 5}' }, filePart('a.csv', good)]],
    ] as [string, () => Part[]][])('answers %s', async (code, parts) => {
      const res = await upload(parts());
      expect(res.status).toBe(400);
      expect(res.body).toEqual({ success: false, error: code, message: expect.any(String) });
    });

    it('answers NoRequestData when there are no parts at all', async () => {
      const res = await upload([]);
      expect(res.body).toMatchObject({ success: false, error: 'NoRequestData' });
    });

    it('refuses a JSON body with InvalidRequest', async () => {
      const res = await t.post('/v1/Account/UploadAccountSuggestions', { data: {}, file: 'x' });
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ success: false, error: 'InvalidRequest', message: expect.stringContaining('multipart/form-data') });
    });

    it('answers 413 in the envelope for a file above the upload limit', async () => {
      const big = csv(...Array.from({ length: 3000 }, (_, i) => row(`person${i}@example.test`, '+31612345678', 'nl', 'First', 'Last', 'remark')));
      expect(big.length).toBeGreaterThan(UPLOAD_LIMIT);
      const res = await upload([dataPart('big'), filePart('big.csv', big)]);
      expect(res.status).toBe(413);
      expect(res.body).toEqual({ success: false, error: 'InvalidRequest', message: `file: larger than the upload limit of ${UPLOAD_LIMIT} bytes` });
    });

    it('needs a token', async () => {
      const { payload, contentType } = multipart([dataPart('x'), filePart('a.csv', good)]);
      const res = await t.app.inject({ method: 'POST', url: '/v1/Account/UploadAccountSuggestions', payload, headers: { 'content-type': contentType } });
      expect(res.statusCode).toBe(401);
      expect(res.json()).toMatchObject({ success: false, error: 'Unauthorized' });
    });
  });

  it('accepts a large file below the limit and stores every row (chunked inserts)', async () => {
    const rows = Array.from({ length: 900 }, (_, i) => row(`bulk${i}@example.test`, '', '', `F${i}`, 'L'));
    const res = await upload([dataPart('bulk'), filePart('bulk.csv', csv(...rows))]);
    expect(res.body).toMatchObject({ success: true, totalCount: 900, importedCount: 900, errorCount: 0, removedCount: 1 });
    expect((await suggestions({ pageSize: 1 })).totalItems).toBe(900);
  });

  it('concurrent uploads of one tenant leave exactly one active list, whole (the last one to commit)', async () => {
    const tok = await t.token();
    const tags = ['c1', 'c2', 'c3', 'c4'];
    const lists = tags.map((tag) => csv(...Array.from({ length: 30 }, (_, i) => row(`${tag}-${i}@example.test`))));
    const res = await Promise.all(lists.map((file, i) => upload([dataPart(`concurrent ${i}`), filePart(`c${i}.csv`, file)], tok)));
    for (const r of res) expect(r.body).toMatchObject({ success: true });
    const tenantUid = (await t.ctx.db.kysely.selectFrom('tenants').select('uid').where('client_id', '=', 'tenant-a').executeTakeFirstOrThrow()).uid;
    const active = await t.ctx.db.kysely.selectFrom('account_suggestion_uploads').select(['uid', 'reference']).where('tenant_uid', '=', tenantUid).where('status', '=', 'active').execute();
    expect(active).toHaveLength(1);
    const got = await suggestions();
    expect(got.reference).toBe(active[0]!.reference);
    const tag = tags[Number(active[0]!.reference!.replace('concurrent ', ''))]; // the list of the active upload
    expect(got.items.map((x: { emailAddress: string }) => x.emailAddress).sort()).toEqual(Array.from({ length: 30 }, (_, i) => `${tag}-${i}@example.test`).sort());
  });

  it('a NUL character in the reference, the file name or a cell is refused, never a 500 (PostgreSQL text cannot hold it)', async () => {
    const withNulRef = await upload([dataPart('list\u0000one'), filePart('nul.csv', csv(row('nul-ref@example.test')))]);
    expect(withNulRef).toMatchObject({ status: 400, body: { success: false, error: 'InvalidRequest', message: expect.stringContaining('data.reference') } });
    const withNulName = await upload([dataPart('nul name'), filePart('n\u0000ul.csv', csv(row('nul-name@example.test')))]);
    expect(withNulName).toMatchObject({ status: 400, body: { success: false, error: 'InvalidRequest', message: expect.stringContaining('file name') } });
    // a CSV with NUL bytes is not a text file at all
    const csvNul = await upload([dataPart('nul csv'), filePart('nul.csv', csv(row('nul-csv@example.test', '', '', 'An\u0000na')))]);
    expect(csvNul).toMatchObject({ status: 400, body: { success: false, error: 'InvalidImportType' } });
    // a spreadsheet cell can hold one: that row is an error, the others are imported
    const sheet = workbook([[...COLUMNS], ['nul-cell@example.test', '', '', 'An\u0000na', '', '', ''], ['fine@example.test', '', '', 'Fine', '', '', '']], 'xlsx');
    const withNulCell = await upload([dataPart('nul cells'), filePart('nul.xlsx', sheet)]);
    expect(withNulCell.status).toBe(200);
    expect(withNulCell.body).toMatchObject({ success: true, importedCount: 1, errorCount: 1 });
    expect(withNulCell.body.errorLogs).toEqual([{ id: 'row 2', message: expect.stringContaining('FirstName: contains the NUL character') }]);
  });

  it('documents the upload in OpenAPI as multipart', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/docs/json' });
    const op = res.json().paths['/v1/Account/UploadAccountSuggestions'].post;
    expect(Object.keys(op.requestBody.content)).toEqual(['multipart/form-data']);
    expect(res.json().paths['/v1/Account/GetAccountSuggestions']).toBeDefined();
  });
});
