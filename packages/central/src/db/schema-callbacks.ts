// Tables of the callbacks area (filled in by that area's migration).
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface CallbackTables {}
