// Reading an account suggestion file: type detection, CSV (';'), Excel (.xlsx, .xls), header
// mapping and per-row validation. Bytes in, rows and errors out (no database); workbooks may be
// read in a worker thread (readWorkbookInWorker).
import { Worker } from 'node:worker_threads';
import { isValidEmail, parseLanguage, parsePhone } from '../validate';
import { checkZipLimits, ZipLimitError } from './zip';
import { SheetRowsError, sheetRows } from './sheet-rows.mjs';

export type ImportType = 'csv' | 'xlsx' | 'xls';

export const COLUMNS = ['EmailAddress', 'PhoneNumber', 'LanguageCode', 'FirstName', 'LastName', 'Remarks', 'PickUpPoint'] as const;
export type Column = (typeof COLUMNS)[number];

export class SuggestionFileError extends Error {
  constructor(
    readonly code: 'InvalidImportType' | 'InvalidHeader' | 'InvalidRequest',
    message: string,
  ) {
    super(message);
    this.name = 'SuggestionFileError';
  }
}

const ZIP_MAGIC = [0x50, 0x4b, 0x03, 0x04];
const CFB_MAGIC = [0xd0, 0xcf, 0x11, 0xe0, 0xa1, 0xb1, 0x1a, 0xe1];
const startsWith = (buf: Uint8Array, magic: number[]) => buf.length >= magic.length && magic.every((b, i) => buf[i] === b);

/**
 * The file type from its extension, confirmed by its content: .xlsx must be a ZIP container,
 * .xls an OLE2 compound file, .csv text (valid UTF-8 without NUL bytes). Anything else is
 * InvalidImportType.
 */
export function detectType(fileName: string, buf: Uint8Array): ImportType {
  const ext = /\.([A-Za-z0-9]+)$/.exec(fileName)?.[1]?.toLowerCase();
  if (ext === 'xlsx') {
    if (!startsWith(buf, ZIP_MAGIC)) throw new SuggestionFileError('InvalidImportType', 'file: the .xlsx file is not an Excel workbook');
    return 'xlsx';
  }
  if (ext === 'xls') {
    if (!startsWith(buf, CFB_MAGIC)) throw new SuggestionFileError('InvalidImportType', 'file: the .xls file is not an Excel 97-2003 workbook');
    return 'xls';
  }
  if (ext === 'csv') {
    if (buf.includes(0) || startsWith(buf, ZIP_MAGIC) || startsWith(buf, CFB_MAGIC)) throw new SuggestionFileError('InvalidImportType', 'file: the .csv file is not text');
    try {
      new TextDecoder('utf-8', { fatal: true }).decode(buf);
    } catch {
      throw new SuggestionFileError('InvalidImportType', 'file: the .csv file is not UTF-8 text');
    }
    return 'csv';
  }
  throw new SuggestionFileError('InvalidImportType', `file: type ${ext ? '.' + ext : '(no extension)'} not supported; send .xlsx, .xls or .csv (';' delimited)`);
}

/** Limits of one upload's content (config `suggestions`, docs/accounts.md). */
export interface ReadLimits {
  /** the most data rows (non-blank rows after the header) a file may hold */
  maxRows: number;
  /** .xlsx: the most bytes the ZIP container may unpack to */
  maxUnpackedBytes: number;
  /** .xlsx: the highest compression ratio of a large part of the container */
  maxRatio: number;
}

export const DEFAULT_READ_LIMITS: ReadLimits = { maxRows: 100_000, maxUnpackedBytes: 64 * 1_048_576, maxRatio: 200 };

const tooManyRows = (max: number) => new SuggestionFileError('InvalidRequest', `file: more than the limit of ${max} data rows`);

/**
 * Rows of a file, indexed by their position (index 0 is row 1, the header). Blank rows (every
 * cell empty or spaces) are holes of the sparse array: they are skipped without allocating, and
 * the rows after them keep their row numbers.
 */
export type Rows = (string[] | undefined)[];

/** The most fields a CSV row may have (the file needs 7; a trailing ';' and spare columns are fine). */
export const MAX_COLUMNS = 1000;

const isBlank = (cells: string[]) => cells.every((c) => c.trim() === '');

/**
 * CSV with ';' as delimiter; fields may be quoted with " ("" inside quotes is a quote); CRLF or LF.
 * More than maxRows data rows (non-blank rows after row 1, the header) throws InvalidRequest as
 * soon as the row past the limit is read, before the rest of the file is parsed.
 */
export function parseCsv(text: string, maxRows = Infinity): Rows {
  const s = text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
  const rows: Rows = [];
  let line = 0;
  let data = 0;
  let row: string[] = [];
  let field = '';
  let quoted = false;
  let i = 0;
  const endRow = () => {
    row.push(field);
    if (!isBlank(row)) {
      if (line > 0 && ++data > maxRows) throw tooManyRows(maxRows);
      rows[line] = row;
      row = [];
    } else row.length = 0; // a blank row: reuse the array
    line++;
    field = '';
  };
  while (i < s.length) {
    const c = s[i]!;
    if (quoted) {
      if (c !== '"') {
        // copy up to the next quote in one slice (a 5 MB quoted field is not built char by char)
        const j = s.indexOf('"', i);
        const end = j < 0 ? s.length : j;
        field += s.slice(i, end);
        i = end;
        continue;
      }
      if (s[i + 1] === '"') {
        field += '"';
        i += 2;
        continue;
      }
      quoted = false;
      i++;
      continue;
    }
    if (c === '"' && field === '') {
      quoted = true;
      i++;
    } else if (c === ';') {
      if (row.length >= MAX_COLUMNS - 1) throw new SuggestionFileError('InvalidRequest', `file: row ${line + 1} has more than the limit of ${MAX_COLUMNS} columns`);
      row.push(field);
      field = '';
      i++;
    } else if (c === '\r' || c === '\n') {
      if (row.length === 0 && field === '') line++; // an empty line: nothing to keep or check
      else endRow();
      i += c === '\r' && s[i + 1] === '\n' ? 2 : 1;
    } else {
      field += c;
      i++;
    }
  }
  if (field !== '' || row.length) endRow();
  return rows;
}

/**
 * Checks an .xlsx (ZIP) against the unpacked-size limits before SheetJS reads it; an .xls (OLE2,
 * not compressed) is bounded by the upload size limit.
 */
function checkWorkbookLimits(buf: Uint8Array, limits: ReadLimits): void {
  if (buf[0] !== 0x50 || buf[1] !== 0x4b) return;
  try {
    checkZipLimits(buf, limits);
  } catch (e) {
    if (!(e instanceof ZipLimitError)) throw e;
    if (e.kind === 'tooLarge' || e.kind === 'ratio') throw new SuggestionFileError('InvalidRequest', `file: ${e.message}`);
    throw new SuggestionFileError('InvalidImportType', `file: the workbook cannot be read (${e.message})`);
  }
}

const sheetError = (e: { kind: string; message: string }) =>
  e.kind === 'tooManyRows' ? new SuggestionFileError('InvalidRequest', `file: ${e.message}`) : new SuggestionFileError('InvalidImportType', 'file: the workbook cannot be read');

/**
 * The first sheet of a workbook as rows of display text (cells as Excel shows them), on this
 * thread. Tests and tools only: the upload path reads workbooks in a worker (readRowsOffThread),
 * because SheetJS may pollute the prototypes of the thread it runs on (see plainRows).
 */
export function readWorkbook(buf: Uint8Array, limits: ReadLimits = DEFAULT_READ_LIMITS): Rows {
  checkWorkbookLimits(buf, limits);
  try {
    return sheetRows(buf, limits.maxRows);
  } catch (e) {
    if (e instanceof SheetRowsError) throw sheetError(e);
    throw e;
  }
}

const WORKER = new URL('./workbook-worker.mjs', import.meta.url);

/**
 * The worker's answer, accepted only as what it must be: an array whose entries are holes or
 * arrays of strings. SheetJS 0.18.5 can be made to pollute Object.prototype by a crafted file
 * (CVE-2023-30533) and runs untrusted input through slow regular expressions (CVE-2024-22363):
 * it runs only in that worker, a fresh one per file, stopped after suggestions.parseTimeoutMs;
 * what crosses back is a structured clone (own data only, no prototypes, no functions, no
 * getters), and this check copies it into fresh arrays of this thread, refusing anything else.
 */
function plainRows(rows: unknown): Rows {
  if (rows === undefined) return [];
  const bad = () => new SuggestionFileError('InvalidImportType', 'file: the workbook cannot be read');
  if (!Array.isArray(rows)) throw bad();
  const out: Rows = [];
  for (let i = 0; i < rows.length; i++) {
    if (!(i in rows)) continue; // a blank row stays a hole
    const r: unknown = rows[i];
    if (!Array.isArray(r)) throw bad();
    const cells: string[] = [];
    for (let c = 0; c < r.length; c++) {
      const v: unknown = r[c];
      if (typeof v !== 'string') throw bad();
      cells.push(v);
    }
    out[i] = cells;
  }
  return out;
}

/**
 * readWorkbook in a worker thread: SheetJS parses synchronously, and a workbook within the upload
 * limits can still take seconds, during which the event loop (every tenant's calls, the MQTT edge)
 * would stand still. A parse that takes longer than `timeoutMs` is stopped (the thread is
 * terminated) and answered InvalidRequest.
 */
export async function readWorkbookInWorker(buf: Uint8Array, limits: ReadLimits, timeoutMs: number): Promise<Rows> {
  checkWorkbookLimits(buf, limits);
  const worker = new Worker(WORKER, { workerData: { buf, maxRows: limits.maxRows } });
  try {
    return await new Promise<Rows>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new SuggestionFileError('InvalidRequest', `file: the workbook took longer than ${timeoutMs / 1000} s to read; split it into smaller files or send CSV`)),
        timeoutMs,
      );
      const done = () => clearTimeout(timer);
      worker.once('message', (m: { rows?: Rows; error?: { kind: string; message: string } }) => {
        done();
        if (m?.error) reject(sheetError(m.error));
        // structured clone turns the holes of blank rows into nothing: they stay holes
        else {
          try {
            resolve(plainRows(m?.rows));
          } catch (e) {
            reject(e);
          }
        }
      });
      worker.once('error', (e) => {
        done();
        reject(e);
      });
      worker.once('exit', (code) => {
        done();
        reject(new Error(`workbook reader exited with code ${code} before answering`));
      });
    });
  } finally {
    await worker.terminate(); // at once when it answered; stops a parse that ran out of time
  }
}

/** The rows of an uploaded file; workbooks are read in a worker thread under a time limit. */
export async function readRowsOffThread(type: ImportType, buf: Uint8Array, limits: ReadLimits, timeoutMs: number): Promise<Rows> {
  // CSV is one linear pass over the text, bounded by the upload size: it stays on this thread
  return type === 'csv' ? parseCsv(new TextDecoder('utf-8').decode(buf), limits.maxRows) : readWorkbookInWorker(buf, limits, timeoutMs);
}

/**
 * Header rule: the first row must name all seven columns exactly once, in any order, compared
 * case-insensitively after trimming spaces. Unknown, missing or duplicate columns: InvalidHeader.
 * Returns the column index of each column.
 */
export function mapHeader(header: string[] | undefined): Record<Column, number> {
  if (!header || header.every((h) => h.trim() === '')) throw new SuggestionFileError('InvalidHeader', `file: no header row; expected columns ${COLUMNS.join(', ')}`);
  const byLower = new Map(COLUMNS.map((c) => [c.toLowerCase(), c] as const));
  const index = {} as Record<Column, number>;
  const unknown: string[] = [];
  const dup: string[] = [];
  header.forEach((h, i) => {
    const name = h.trim();
    if (name === '' && i === header.length - 1) return; // a trailing delimiter
    const col = byLower.get(name.toLowerCase());
    if (!col) unknown.push(name || `(empty column ${i + 1})`);
    else if (col in index) dup.push(col);
    else index[col] = i;
  });
  const missing = COLUMNS.filter((c) => !(c in index));
  // the message names at most 10 columns per problem: a header of thousands of columns must not
  // become a response of megabytes
  const list = (names: string[]) => (names.length > 10 ? `${names.slice(0, 10).join(', ')} and ${names.length - 10} more` : names.join(', '));
  const problems = [
    missing.length ? `missing ${missing.join(', ')}` : '',
    unknown.length ? `unknown ${list(unknown)}` : '',
    dup.length ? `duplicate ${list(dup)}` : '',
  ].filter(Boolean);
  if (problems.length) throw new SuggestionFileError('InvalidHeader', `file: invalid header (${problems.join('; ')}); expected columns ${COLUMNS.join(', ')}`);
  return index;
}

export interface SuggestionRow {
  /** row number in the file, the header being row 1 */
  rowNo: number;
  emailAddress: string;
  phoneNumber: string | null;
  languageCode: string | null;
  firstName: string | null;
  lastName: string | null;
  remarks: string | null;
  /** the PickUpPoint cell resolved to a pick up point uid of the tenant */
  pupUid: string | null;
}

export interface RowError {
  id: string;
  message: string;
}

export interface ParsedFile {
  /** data rows (blank rows skipped) */
  total: number;
  rows: SuggestionRow[];
  errors: RowError[];
}

/**
 * Validates the data rows. Error ids are "row <n>" (the file row number): ids must not carry the
 * e-mail address, the response is logged by proxies. One entry per rejected row; a row's
 * problems are joined in its message. An e-mail address repeated in the file: the first row
 * counts, later ones are errors.
 */
export function validateRows(all: Rows, resolvePup: (value: string) => string | null): ParsedFile {
  const index = mapHeader(all[0]);
  const rows: SuggestionRow[] = [];
  const errors: RowError[] = [];
  const seen = new Map<string, number>();
  let total = 0;
  for (let r = 1; r < all.length; r++) {
    const cells = all[r];
    if (!cells || isBlank(cells)) continue;
    total++;
    const rowNo = r + 1;
    const cell = (c: Column) => (cells[index[c]] ?? '').trim();
    const opt = (c: Column) => cell(c) || null;
    const problems: string[] = [];
    const email = cell('EmailAddress');
    if (!email) problems.push('EmailAddress: required');
    else if (!isValidEmail(email)) problems.push('EmailAddress: not a valid e-mail address');
    else if (seen.has(email.toLowerCase())) problems.push(`EmailAddress: already in row ${seen.get(email.toLowerCase())}`);
    let phone: string | null = null;
    if (cell('PhoneNumber')) {
      phone = parsePhone(cell('PhoneNumber'));
      if (!phone) problems.push('PhoneNumber: must be in international format starting with + or 00');
    }
    let lang: string | null = null;
    if (cell('LanguageCode')) {
      lang = parseLanguage(cell('LanguageCode'));
      if (!lang) problems.push('LanguageCode: must be a language code such as nl or en-GB');
    }
    let pup: string | null = null;
    if (cell('PickUpPoint')) {
      pup = resolvePup(cell('PickUpPoint'));
      if (!pup) problems.push('PickUpPoint: unknown pick up point or not one you manage');
    }
    for (const c of ['FirstName', 'LastName', 'Remarks'] as const) if (cell(c).length > (c === 'Remarks' ? 500 : 100)) problems.push(`${c}: too long`);
    // PostgreSQL text cannot hold U+0000; a cell with it is an error of its row on both engines
    for (const c of COLUMNS) if (cell(c).includes('\u0000')) problems.push(`${c}: contains the NUL character`);
    if (problems.length) {
      errors.push({ id: `row ${rowNo}`, message: problems.join('; ') });
      continue;
    }
    seen.set(email.toLowerCase(), rowNo);
    rows.push({ rowNo, emailAddress: email, phoneNumber: phone, languageCode: lang, firstName: opt('FirstName'), lastName: opt('LastName'), remarks: opt('Remarks'), pupUid: pup });
  }
  return { total, rows, errors };
}
