// The SheetJS part of reading a workbook, in plain JavaScript so that it runs as is in a worker
// thread (workbook-worker.mjs) under every loader (tsx in production, vitest in tests) as well as
// on the main thread (parse.ts readWorkbook). The first sheet as rows of display text, cells as
// Excel shows them; blank rows are holes; more than maxRows data rows throws.
import * as XLSX from 'xlsx';

/** An error of reading: `kind` 'unreadable' (not a workbook) or 'tooManyRows'. */
export class SheetRowsError extends Error {
  constructor(kind, message) {
    super(message);
    this.name = 'SheetRowsError';
    this.kind = kind;
  }
}

const isBlank = (cells) => cells.every((c) => c.trim() === '');

export function sheetRows(buf, maxRows) {
  let wb;
  try {
    wb = XLSX.read(buf, { type: 'array', cellDates: false, dense: true });
  } catch {
    throw new SheetRowsError('unreadable', 'the workbook cannot be read');
  }
  const name = wb.SheetNames[0];
  const sheet = name ? wb.Sheets[name] : undefined;
  if (!sheet?.['!ref']) return [];
  // dense sheet (SheetJS 0.18): sheet[r] is the array of cells of row r; missing rows are blank
  const range = XLSX.utils.decode_range(sheet['!ref']);
  const rows = [];
  let data = 0;
  for (let r = range.s.r; r <= range.e.r; r++) {
    const cells = sheet[r];
    if (!cells) continue;
    // only up to the row's last cell: a range widened by one far cell does not allocate every row
    // to its width (trailing empty cells read as '' anyway)
    const out = [];
    const last = Math.min(range.e.c, cells.length - 1);
    for (let c = range.s.c; c <= last; c++) {
      const cell = cells[c];
      // as sheet_to_json({ raw: false, defval: '' }): stubs and error cells are empty
      out.push(!cell?.t || cell.t === 'z' || cell.t === 'e' || cell.v == null ? '' : XLSX.utils.format_cell(cell));
    }
    if (isBlank(out)) continue;
    if (r > range.s.r && ++data > maxRows) throw new SheetRowsError('tooManyRows', `more than the limit of ${maxRows} data rows`);
    rows[r - range.s.r] = out;
  }
  return rows;
}
