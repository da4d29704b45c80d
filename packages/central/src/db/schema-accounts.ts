// Tables of the accounts area (filled in by that area's migration).
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface AccountTables {}
