export declare class SheetRowsError extends Error {
  readonly kind: 'unreadable' | 'tooManyRows';
  constructor(kind: 'unreadable' | 'tooManyRows', message: string);
}
/** The first sheet's rows of display text (holes for blank rows); throws SheetRowsError. */
export declare function sheetRows(buf: Uint8Array, maxRows: number): (string[] | undefined)[];
