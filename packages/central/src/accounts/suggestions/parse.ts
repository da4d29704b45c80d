// Reading an account suggestion file: type detection, CSV (';'), Excel (.xlsx, .xls), header
// mapping and per-row validation. Pure: bytes in, rows and errors out (no I/O, no database).
import * as XLSX from 'xlsx';
import { isValidEmail, parseLanguage, parsePhone } from '../validate';

export type ImportType = 'csv' | 'xlsx' | 'xls';

export const COLUMNS = ['EmailAddress', 'PhoneNumber', 'LanguageCode', 'FirstName', 'LastName', 'Remarks', 'PickUpPoint'] as const;
export type Column = (typeof COLUMNS)[number];

export class SuggestionFileError extends Error {
  constructor(
    readonly code: 'InvalidImportType' | 'InvalidHeader',
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

/** CSV with ';' as delimiter; fields may be quoted with " ("" inside quotes is a quote); CRLF or LF. */
export function parseCsv(text: string): string[][] {
  const s = text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
  const rows: string[][] = [];
  let row: string[] = [];
  let field = '';
  let quoted = false;
  let i = 0;
  while (i < s.length) {
    const c = s[i]!;
    if (quoted) {
      if (c === '"') {
        if (s[i + 1] === '"') {
          field += '"';
          i += 2;
          continue;
        }
        quoted = false;
        i++;
        continue;
      }
      field += c;
      i++;
      continue;
    }
    if (c === '"' && field === '') {
      quoted = true;
      i++;
    } else if (c === ';') {
      row.push(field);
      field = '';
      i++;
    } else if (c === '\r' || c === '\n') {
      row.push(field);
      rows.push(row);
      row = [];
      field = '';
      i += c === '\r' && s[i + 1] === '\n' ? 2 : 1;
    } else {
      field += c;
      i++;
    }
  }
  if (field !== '' || row.length) {
    row.push(field);
    rows.push(row);
  }
  return rows;
}

/** The first sheet of a workbook as rows of display text (cells as Excel shows them). */
export function readWorkbook(buf: Uint8Array): string[][] {
  let wb: XLSX.WorkBook;
  try {
    wb = XLSX.read(buf, { type: 'array', cellDates: false, dense: true });
  } catch {
    throw new SuggestionFileError('InvalidImportType', 'file: the workbook cannot be read');
  }
  const name = wb.SheetNames[0];
  const sheet = name ? wb.Sheets[name] : undefined;
  if (!sheet) return [];
  const rows = XLSX.utils.sheet_to_json<unknown[]>(sheet, { header: 1, raw: false, defval: '', blankrows: true });
  return rows.map((r) => r.map((v) => (v == null ? '' : String(v))));
}

export function readRows(type: ImportType, buf: Uint8Array): string[][] {
  return type === 'csv' ? parseCsv(new TextDecoder('utf-8').decode(buf)) : readWorkbook(buf);
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
  const problems = [
    missing.length ? `missing ${missing.join(', ')}` : '',
    unknown.length ? `unknown ${unknown.join(', ')}` : '',
    dup.length ? `duplicate ${dup.join(', ')}` : '',
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
export function validateRows(all: string[][], resolvePup: (value: string) => string | null): ParsedFile {
  const index = mapHeader(all[0]);
  const rows: SuggestionRow[] = [];
  const errors: RowError[] = [];
  const seen = new Map<string, number>();
  let total = 0;
  for (let r = 1; r < all.length; r++) {
    const cells = all[r]!;
    if (cells.every((c) => c.trim() === '')) continue;
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
