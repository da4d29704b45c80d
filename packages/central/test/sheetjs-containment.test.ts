// Issue 12, item 7: SheetJS 0.18.5 (npm's last) pollutes Object.prototype when it reads a crafted
// workbook (CVE-2023-30533: a cell comment whose ref is "__proto__" makes SheetJS write the
// comment list to Object.prototype.c). The upload path reads workbooks only in a fresh worker
// thread per file, under a time limit, and takes back a structured clone of plain string rows
// (src/accounts/suggestions/parse.ts). This test:
// 1. proves the crafted file is a real attack: read by SheetJS in a scratch worker, it does pollute
//    that worker's Object.prototype;
// 2. uploads it (and reads it through readRowsOffThread) in this process: Object.prototype stays
//    unchanged, and the rows that come back are plain arrays of strings.
import { Worker } from 'node:worker_threads';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as XLSX from 'xlsx';
import { COLUMNS, readRowsOffThread } from '../src/accounts/suggestions/parse';
import { createTestService, type TestService } from './support/harness';

const PROTO_KEYS = Object.getOwnPropertyNames(Object.prototype).sort();
const ARRAY_PROTO_KEYS = Object.getOwnPropertyNames(Array.prototype).sort();

/** A valid suggestion workbook with the attack: a comment on "__proto__", and "__proto__" text in header and cells. */
function craftedWorkbook(): Buffer {
  const ws = XLSX.utils.aoa_to_sheet([
    [...COLUMNS, '__proto__'],
    ['polluter@example.test', '', '', '__proto__', 'constructor', '__proto__.polluted', '', 'x'],
  ]);
  (ws.A1 as XLSX.CellObject).c = [{ a: 'attacker', t: 'polluted' } as XLSX.Comment];
  const wb = XLSX.utils.book_new();
  XLSX.utils.book_append_sheet(wb, ws, 'S');
  const zip = XLSX.CFB.read(XLSX.write(wb, { type: 'buffer', bookType: 'xlsx' }) as Buffer, { type: 'buffer' });
  let patched = false;
  zip.FullPaths.forEach((p: string, i: number) => {
    if (!/comments\d*\.xml$/.test(p)) return;
    const xml = Buffer.from(zip.FileIndex[i]!.content as Uint8Array).toString('utf8');
    zip.FileIndex[i]!.content = Buffer.from(xml.replace('ref="A1"', 'ref="__proto__"'));
    patched = true;
  });
  if (!patched) throw new Error('no comments part to patch');
  return XLSX.CFB.write(zip, { fileType: 'zip', type: 'buffer' }) as Buffer;
}

function expectPrototypesClean() {
  expect(Object.getOwnPropertyNames(Object.prototype).sort()).toEqual(PROTO_KEYS);
  expect(Object.getOwnPropertyNames(Array.prototype).sort()).toEqual(ARRAY_PROTO_KEYS);
  expect(({} as Record<string, unknown>).c).toBeUndefined();
  expect(({} as Record<string, unknown>).polluted).toBeUndefined();
}

describe('SheetJS is contained: a workbook that pollutes prototypes leaks nothing into the service', () => {
  let t: TestService;
  const file = craftedWorkbook();
  beforeAll(async () => {
    t = await createTestService('sqlite');
  });
  afterAll(async () => t?.close());

  it('the crafted workbook does pollute Object.prototype where SheetJS reads it (a scratch worker)', async () => {
    const worker = new Worker(
      `const XLSX = require(${JSON.stringify(require.resolve('xlsx'))});
       const { parentPort, workerData } = require('node:worker_threads');
       try { XLSX.read(workerData, { type: 'buffer' }); } catch {}
       parentPort.postMessage({ keys: Object.keys(Object.prototype), c: JSON.stringify(({}).c ?? null) });`,
      { eval: true, workerData: file },
    );
    const m = await new Promise<{ keys: string[]; c: string }>((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
    });
    await worker.terminate();
    expect(m.keys).toContain('c');
    expect(m.c).toContain('polluted');
    expectPrototypesClean();
  });

  it('readRowsOffThread: prototypes unchanged, rows plain arrays of strings', async () => {
    const rows = await readRowsOffThread('xlsx', file, { maxRows: 100, maxUnpackedBytes: 1 << 24, maxRatio: 200 }, 10_000);
    expectPrototypesClean();
    expect(Object.getPrototypeOf(rows)).toBe(Array.prototype);
    for (const r of rows.filter(Boolean)) {
      expect(Object.getPrototypeOf(r)).toBe(Array.prototype);
      for (const c of r!) expect(typeof c).toBe('string');
    }
    // the comment's bogus ref widens the sheet's range by a row and a column: the cells come back as text, shifted
    const data = rows.find((r) => r?.includes('polluter@example.test'));
    expect(data?.filter(Boolean)).toEqual(['polluter@example.test', '__proto__', 'constructor', '__proto__.polluted', 'x']);
  });

  it('UploadAccountSuggestions with the crafted workbook: answered, nothing leaks', async () => {
    const token = await t.token();
    const boundary = 'x-boundary-1';
    const payload = Buffer.concat([
      Buffer.from(`--${boundary}\r\ncontent-disposition: form-data; name="data"\r\n\r\n{"reference":"crafted"}\r\n`),
      Buffer.from(`--${boundary}\r\ncontent-disposition: form-data; name="file"; filename="crafted.xlsx"\r\ncontent-type: application/octet-stream\r\n\r\n`),
      file,
      Buffer.from(`\r\n--${boundary}--\r\n`),
    ]);
    const res = await t.app.inject({ method: 'POST', url: '/v1/Account/UploadAccountSuggestions', payload, headers: { 'content-type': `multipart/form-data; boundary=${boundary}`, authorization: `Bearer ${token}` } });
    // the shifted, extra "__proto__" header is refused clearly: no crash, no 500
    expect(res.statusCode, res.body).toBe(400);
    expect(res.json()).toMatchObject({ success: false, error: 'InvalidHeader', message: expect.stringMatching(/^file: /) });
    expectPrototypesClean();
    // the service still works, and its objects are plain
    const list = await t.post('/v1/Account/GetAccountSuggestions', { pageNo: 1, pageSize: 10 });
    expect(list.body.success).toBe(true);
    expectPrototypesClean();
  });
});
