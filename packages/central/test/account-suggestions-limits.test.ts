// Limits of UploadAccountSuggestions (docs/accounts.md): the .xlsx unpacked-size guard (ZIP bomb),
// the row limit, blank rows without allocation, the errorLogs cap; formula text is kept raw.
import zlib from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as XLSX from 'xlsx';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { COLUMNS, mapHeader, MAX_COLUMNS, parseCsv, readWorkbook, readWorkbookInWorker, SuggestionFileError, validateRows } from '../src/accounts/suggestions/parse';
import { checkZipLimits, readZipDirectory, ZipLimitError } from '../src/accounts/suggestions/zip';

interface ZipInput {
  name: string;
  data: Buffer;
  /** the uncompressed size written in the headers (default: the real one) */
  declaredSize?: number;
  stored?: boolean;
}

/** A minimal ZIP file: local headers, a central directory, an end record (no CRC check by the guard). */
function buildZip(entries: ZipInput[]): Buffer {
  const locals: Buffer[] = [];
  const cens: Buffer[] = [];
  let offset = 0;
  for (const e of entries) {
    const name = Buffer.from(e.name);
    const body = e.stored ? e.data : zlib.deflateRawSync(e.data);
    const usz = e.declaredSize ?? e.data.length;
    const crc = zlib.crc32 ? zlib.crc32(e.data) : 0;
    const loc = Buffer.alloc(30);
    loc.writeUInt32LE(0x04034b50, 0);
    loc.writeUInt16LE(20, 4);
    loc.writeUInt16LE(e.stored ? 0 : 8, 8);
    loc.writeUInt32LE(crc, 14);
    loc.writeUInt32LE(body.length, 18);
    loc.writeUInt32LE(usz, 22);
    loc.writeUInt16LE(name.length, 26);
    const cen = Buffer.alloc(46);
    cen.writeUInt32LE(0x02014b50, 0);
    cen.writeUInt16LE(20, 4);
    cen.writeUInt16LE(20, 6);
    cen.writeUInt16LE(e.stored ? 0 : 8, 10);
    cen.writeUInt32LE(crc, 16);
    cen.writeUInt32LE(body.length, 20);
    cen.writeUInt32LE(usz, 24);
    cen.writeUInt16LE(name.length, 28);
    cen.writeUInt32LE(offset, 42);
    locals.push(loc, name, body);
    cens.push(cen, name);
    offset += 30 + name.length + body.length;
  }
  const cd = Buffer.concat(cens);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(entries.length, 8);
  end.writeUInt16LE(entries.length, 10);
  end.writeUInt32LE(cd.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...locals, cd, end]);
}

function workbook(rows: unknown[][]): Buffer {
  const wb = XLSX.utils.book_new();
  XLSX.utils.book_append_sheet(wb, XLSX.utils.aoa_to_sheet(rows), 'Suggestions');
  return XLSX.write(wb, { type: 'buffer', bookType: 'xlsx', compression: true }) as Buffer;
}

const zipError = (f: () => unknown): ZipLimitError => {
  try {
    f();
  } catch (e) {
    if (e instanceof ZipLimitError) return e;
    throw e;
  }
  throw new Error('no ZipLimitError');
};
const fileError = (f: () => unknown): SuggestionFileError => {
  try {
    f();
  } catch (e) {
    if (e instanceof SuggestionFileError) return e;
    throw e;
  }
  throw new Error('no SuggestionFileError');
};

const MB = 1_048_576;
const limits = { maxUnpackedBytes: 64 * MB, maxRatio: 200 };

describe('ZIP guard (pure)', () => {
  it('reads the central directory of a workbook SheetJS wrote', () => {
    const entries = readZipDirectory(workbook([['a', 'b'], ['c', 'd']]));
    const sheet = entries.find((e) => e.name === 'xl/worksheets/sheet1.xml');
    expect(sheet).toMatchObject({ method: 8 });
    expect(sheet!.uncompressedSize).toBeGreaterThan(0);
    expect(checkZipLimits(workbook([['a']]), limits)).toBeGreaterThan(0);
  });
  it('refuses a container whose declared total exceeds the bound, before inflating anything', () => {
    const zip = buildZip([{ name: 'a.xml', data: Buffer.from('x'), declaredSize: 1 }, { name: 'b.xml', data: Buffer.alloc(10), declaredSize: 70 * MB }]);
    const e = zipError(() => checkZipLimits(zip, limits));
    expect(e.kind).toBe('tooLarge');
    expect(e.message).toContain(String(64 * MB));
  });
  it('refuses an absurd compression ratio (a bomb under the total bound)', () => {
    const zip = buildZip([{ name: 'xl/worksheets/sheet1.xml', data: Buffer.alloc(8 * MB, 'a') }]);
    expect(zip.length).toBeLessThan(20_000);
    expect(zipError(() => checkZipLimits(zip, limits)).kind).toBe('ratio');
    expect(zipError(() => checkZipLimits(zip, { maxUnpackedBytes: 4 * MB, maxRatio: 200 })).kind).toBe('tooLarge');
    expect(checkZipLimits(zip, { maxUnpackedBytes: 64 * MB, maxRatio: 10_000 })).toBe(8 * MB);
  });
  it('refuses an entry that unpacks to more than it declares (zlib stops at the declared size)', () => {
    const zip = buildZip([{ name: 'xl/worksheets/sheet1.xml', data: Buffer.alloc(2 * MB, 'a'), declaredSize: 1000 }]);
    const e = zipError(() => checkZipLimits(zip, limits));
    expect(e.kind).toBe('tooLarge');
    expect(e.message).toMatch(/declared size/);
  });
  it('refuses ZIP64 markers and damaged containers', () => {
    const zip = buildZip([{ name: 'a.xml', data: Buffer.from('hello') }]);
    const z64 = Buffer.from(zip);
    z64.writeUInt32LE(0xffffffff, z64.length - 6); // central directory offset
    expect(zipError(() => readZipDirectory(z64)).kind).toBe('zip64');
    const cen64 = Buffer.from(zip);
    cen64.writeUInt32LE(0xffffffff, cen64.length - 22 - 46 - 'a.xml'.length + 24); // uncompressed size
    expect(zipError(() => readZipDirectory(cen64)).kind).toBe('zip64');
    expect(zipError(() => readZipDirectory(zip.subarray(0, zip.length - 5))).kind).toBe('malformed');
    expect(zipError(() => readZipDirectory(Buffer.alloc(10))).kind).toBe('malformed');
    const badData = buildZip([{ name: 'a.xml', data: Buffer.from('not deflated'), stored: true }]);
    badData.writeUInt16LE(8, 8); // local: claims deflate
    badData.writeUInt16LE(8, badData.length - 22 - 46 - 5 + 10); // central: claims deflate
    expect(zipError(() => checkZipLimits(badData, limits)).kind).toBe('malformed');
  });
  it('readWorkbook answers InvalidRequest for a bomb and InvalidImportType for a damaged container', () => {
    const bomb = buildZip([{ name: 'xl/worksheets/sheet1.xml', data: Buffer.alloc(8 * MB, 'a') }]);
    const e = fileError(() => readWorkbook(bomb, { maxRows: 10, maxUnpackedBytes: 4 * MB, maxRatio: 200 }));
    expect(e.code).toBe('InvalidRequest');
    expect(e.message).toContain(String(4 * MB));
    const damaged = workbook([['a']]).subarray(0, 200);
    expect(fileError(() => readWorkbook(damaged)).code).toBe('InvalidImportType');
  });
});

describe('rows: blank lines and the row limit (pure)', () => {
  it('blank lines are holes: row numbers stay, nothing is allocated for them', () => {
    const rows = parseCsv('h1;h2\n\n;\n  ;  \nx;y\n');
    expect(rows.length).toBe(5);
    expect(rows[0]).toEqual(['h1', 'h2']);
    expect([1, 2, 3].map((i) => i in rows)).toEqual([false, false, false]);
    expect(rows[4]).toEqual(['x', 'y']);
  });
  it('five million blank lines parse to the header alone, quickly and without growing the heap much', () => {
    const text = COLUMNS.join(';') + '\n'.repeat(5_000_000);
    const before = process.memoryUsage().heapUsed;
    const t0 = Date.now();
    const rows = parseCsv(text, 100_000);
    expect(Date.now() - t0).toBeLessThan(5_000);
    expect(process.memoryUsage().heapUsed - before).toBeLessThan(50 * MB);
    expect(rows.length).toBe(1);
    expect(validateRows(rows, () => null)).toEqual({ total: 0, rows: [], errors: [] });
  });
  it('more data rows than the limit is InvalidRequest naming the limit (CSV and workbook); blank rows do not count', () => {
    const head = COLUMNS.join(';');
    const lines = (n: number) => Array.from({ length: n }, (_, i) => `u${i}@example.test;;;;;;`);
    expect(parseCsv([head, ...lines(3), '', '', ''].join('\n'), 3).filter(Boolean)).toHaveLength(4);
    const e = fileError(() => parseCsv([head, ...lines(4)].join('\n'), 3));
    expect(e.code).toBe('InvalidRequest');
    expect(e.message).toContain('limit of 3 data rows');
    const wb = (n: number) => workbook([[...COLUMNS], [], ...lines(n).map((l) => l.split(';'))]);
    expect(readWorkbook(wb(3), { maxRows: 3, maxUnpackedBytes: 64 * MB, maxRatio: 200 }).filter(Boolean)).toHaveLength(4);
    expect(fileError(() => readWorkbook(wb(4), { maxRows: 3, maxUnpackedBytes: 64 * MB, maxRatio: 200 })).message).toContain('limit of 3 data rows');
  });
});

describe('wide rows, long fields, long headers (pure)', () => {
  it('a CSV row with more than MAX_COLUMNS fields is InvalidRequest naming the row; exactly MAX_COLUMNS is fine', () => {
    const head = COLUMNS.join(';');
    expect(parseCsv(head + ';'.repeat(MAX_COLUMNS - COLUMNS.length))[0]).toHaveLength(MAX_COLUMNS);
    const e = fileError(() => parseCsv(`${head}\nx@example.test${';'.repeat(2_000_000)}`));
    expect(e.code).toBe('InvalidRequest');
    expect(e.message).toBe(`file: row 2 has more than the limit of ${MAX_COLUMNS} columns`);
  });
  it('a header with many unknown columns gives a short message', () => {
    const e = fileError(() => mapHeader([...COLUMNS, ...Array.from({ length: 5000 }, (_, i) => `c${i}`)]));
    expect(e.code).toBe('InvalidHeader');
    expect(e.message).toContain('unknown c0, c1, c2, c3, c4, c5, c6, c7, c8, c9 and 4990 more');
    expect(e.message.length).toBeLessThan(300);
  });
  it('a 5 MB quoted (even unterminated) field is copied in slices, not char by char', () => {
    const t0 = Date.now();
    const rows = parseCsv(`${COLUMNS.join(';')}\n"${'a'.repeat(5_000_000)}`);
    expect(Date.now() - t0).toBeLessThan(1_000);
    expect(rows[1]![0]).toHaveLength(5_000_000);
    expect(parseCsv('"a""b;c"\n"x\ny";z')).toEqual([['a"b;c'], ['x\ny', 'z']]);
  });
});

describe('workbook rows (pure)', () => {
  it('a range widened by one far cell does not widen every row', () => {
    const ws = XLSX.utils.aoa_to_sheet([[...COLUMNS], ...Array.from({ length: 1000 }, (_, i) => [`u${i}@example.test`])]);
    // column ZZ (702), not XFD: SheetJS's writer walks the whole range, which would make the test slow
    ws['ZZ1001'] = { t: 's', v: 'far' };
    ws['!ref'] = 'A1:ZZ1001';
    const wb = XLSX.utils.book_new();
    XLSX.utils.book_append_sheet(wb, ws, 'S');
    const rows = readWorkbook(XLSX.write(wb, { type: 'buffer', bookType: 'xlsx', compression: true }) as Buffer);
    expect(rows[0]).toEqual([...COLUMNS]);
    expect(rows[1]).toEqual(['u0@example.test']);
    expect(rows[1000]).toHaveLength(702);
    expect(validateRows(rows, () => null)).toMatchObject({ total: 1000, errors: [] });
  });
});

describe('workbooks are read in a worker thread', () => {
  const LIMITS = { maxRows: 100_000, maxUnpackedBytes: 64 * MB, maxRatio: 200 };
  // 50,000 rows: SheetJS needs most of a second of CPU for it on the test machine
  const big = () => workbook([[...COLUMNS], ...Array.from({ length: 50_000 }, (_, i) => [`u${i}@example.test`, '+31612345678', 'nl', 'First', 'Last', 'remark', 'p'])]);

  it('gives the same rows as reading on this thread, and the event loop keeps running meanwhile', async () => {
    const buf = big();
    const t0 = performance.now();
    const here = readWorkbook(buf, LIMITS);
    const sync = performance.now() - t0;
    // timer ticks every 5 ms while the worker reads: the largest gap between two ticks
    let last = performance.now();
    let maxGap = 0;
    const tick = setInterval(() => {
      const now = performance.now();
      maxGap = Math.max(maxGap, now - last);
      last = now;
    }, 5);
    let rows;
    try {
      last = performance.now();
      rows = await readWorkbookInWorker(buf, LIMITS, 60_000);
    } finally {
      clearInterval(tick);
      maxGap = Math.max(maxGap, performance.now() - last); // the gap up to the answer counts too
    }
    expect(rows).toEqual(here);
    expect(rows).toHaveLength(50_001);
    // on this thread the whole parse would have been one gap; generous, as the machine is shared
    expect(maxGap).toBeLessThan(Math.max(sync / 2, 100));
  }, 60_000);

  it('a parse over the time limit is stopped: InvalidRequest naming the file and the limit', async () => {
    const err = await readWorkbookInWorker(big(), LIMITS, 1).then(
      () => null,
      (e) => e,
    );
    expect(err).toBeInstanceOf(SuggestionFileError);
    expect(err).toMatchObject({ code: 'InvalidRequest', message: expect.stringMatching(/^file: the workbook took longer than 0\.001 s to read/) });
  });

  it('errors of the worker keep their codes: too many rows, not a workbook', async () => {
    const tooMany = await readWorkbookInWorker(workbook([[...COLUMNS], ['a@example.test'], ['b@example.test']]), { ...LIMITS, maxRows: 1 }, 10_000).catch((e) => e);
    expect(tooMany).toMatchObject({ code: 'InvalidRequest', message: 'file: more than the limit of 1 data rows' });
    const ole = Buffer.from([0xd0, 0xcf, 0x11, 0xe0, 0xa1, 0xb1, 0x1a, 0xe1, ...Array(504).fill(0)]);
    const damaged = await readWorkbookInWorker(ole, LIMITS, 10_000).catch((e) => e);
    expect(damaged).toMatchObject({ code: 'InvalidImportType', message: 'file: the workbook cannot be read' });
  });
});

describeEngines('UploadAccountSuggestions limits', (engine) => {
  let t: TestService;
  beforeAll(async () => {
    t = await createTestService(engine, { config: { http: { uploadLimitBytes: 256 * 1024 }, suggestions: { maxRows: 20, maxUnpackedBytes: 200_000, maxErrorLogs: 3 } } });
  });
  afterAll(async () => t?.close());

  async function upload(fileName: string, body: string | Buffer) {
    const boundary = '----lockerlimits';
    const payload = Buffer.concat([
      Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="data"\r\n\r\n{"reference":"limits"}\r\n`),
      Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${fileName}"\r\nContent-Type: application/octet-stream\r\n\r\n`),
      Buffer.from(body),
      Buffer.from(`\r\n--${boundary}--\r\n`),
    ]);
    const res = await t.app.inject({
      method: 'POST',
      url: '/v1/Account/UploadAccountSuggestions',
      payload,
      headers: { 'content-type': `multipart/form-data; boundary=${boundary}`, authorization: `Bearer ${await t.token()}` },
    });
    return { status: res.statusCode, body: res.json(), bytes: res.body.length };
  }
  const csv = (...lines: string[]) => [COLUMNS.join(';'), ...lines].join('\r\n') + '\r\n';
  const active = async () => (await t.post('/v1/Account/GetAccountSuggestions', { pageNo: 1, pageSize: 100 })).body;

  it('a ZIP bomb .xlsx is refused with the envelope, quickly, naming the limit; the previous list stays active', async () => {
    expect((await upload('first.csv', csv('keep@example.test;;;;;;'))).status).toBe(200);
    const bomb = buildZip([{ name: '[Content_Types].xml', data: Buffer.from('<Types/>') }, { name: 'xl/worksheets/sheet1.xml', data: Buffer.alloc(100 * MB, 'a') }]);
    expect(bomb.length).toBeLessThan(256 * 1024);
    const t0 = Date.now();
    const res = await upload('bomb.xlsx', bomb);
    expect(Date.now() - t0).toBeLessThan(2_000);
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ success: false, error: 'InvalidRequest' });
    expect(res.body.message).toContain('200000');
    expect((await active()).items.map((i: { emailAddress: string }) => i.emailAddress)).toEqual(['keep@example.test']);
  });

  it('a real workbook over the configured unpacked bound is refused; a small one is read', async () => {
    // 20 rows of 30,000 characters: about 600 KB unpacked, a few KB packed
    const big = workbook([[...COLUMNS], ...Array.from({ length: 20 }, (_, i) => [`u${i}@example.test`, '', '', 'x'.repeat(10_000), 'y'.repeat(10_000), 'z'.repeat(10_000)])]);
    expect(big.length).toBeLessThan(100_000);
    const res = await upload('big.xlsx', big);
    expect(res.body, JSON.stringify(res.body)).toMatchObject({ success: false, error: 'InvalidRequest', message: expect.stringContaining('200000') });
    const small = await upload('small.xlsx', workbook([[...COLUMNS], ['w@example.test']]));
    expect(small.body).toMatchObject({ success: true, totalCount: 1, importedCount: 1 });
  });

  it('more data rows than suggestions.maxRows is InvalidRequest, nothing stored', async () => {
    expect((await upload('first.csv', csv('keep@example.test;;;;;;'))).status).toBe(200);
    const lines = Array.from({ length: 21 }, (_, i) => `u${i}@example.test;;;;;;`);
    const res = await upload('many.csv', csv(...lines));
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ success: false, error: 'InvalidRequest', message: expect.stringContaining('limit of 20 data rows') });
    expect((await active()).totalItems).toBe(1);
    const ok = await upload('exact.csv', csv(...lines.slice(0, 20), ...Array(1000).fill('')));
    expect(ok.body).toMatchObject({ success: true, totalCount: 20, importedCount: 20 });
  });

  it('a workbook that takes longer than suggestions.parseTimeoutMs is InvalidRequest naming the file; nothing stored', async () => {
    expect((await upload('first.csv', csv('keep@example.test;;;;;;'))).status).toBe(200);
    const saved = t.ctx.config.suggestions.parseTimeoutMs;
    t.ctx.config.suggestions.parseTimeoutMs = 1;
    try {
      const res = await upload('slow.xlsx', workbook([[...COLUMNS], ['w@example.test']]));
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ success: false, error: 'InvalidRequest', message: expect.stringContaining('file: the workbook took longer than') });
    } finally {
      t.ctx.config.suggestions.parseTimeoutMs = saved;
    }
    expect((await active()).items.map((i: { emailAddress: string }) => i.emailAddress)).toEqual(['keep@example.test']);
  });

  it('errorLogs lists the first suggestions.maxErrorLogs rejected rows; errorCount stays exact', async () => {
    const res = await upload('bad.csv', csv(...Array.from({ length: 10 }, (_, i) => `bad${i};;;;;;`)));
    expect(res.body).toMatchObject({ success: true, totalCount: 10, errorCount: 10, importedCount: 0 });
    expect(res.body.errorLogs.map((e: { id: string }) => e.id)).toEqual(['row 2', 'row 3', 'row 4']);
  });

  it('formula-like text is data: stored and returned as sent (clients exporting to spreadsheets escape it)', async () => {
    const res = await upload('formula.csv', csv('f@example.test;;;=HYPERLINK("http://x.test");@SUM(1+1);"=cmd|\' /C calc\'!A0";'));
    expect(res.body).toMatchObject({ success: true, importedCount: 1 });
    expect((await active()).items[0]).toMatchObject({ firstName: '=HYPERLINK("http://x.test")', lastName: '@SUM(1+1)', remarks: "=cmd|' /C calc'!A0" });
  });
});
