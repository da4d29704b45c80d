// JSON written by the database, for answers whose items go out as they are (http/serializer.ts
// JsonText): the same expressions on both engines. SQLite's json_quote and PostgreSQL's to_json
// quote a string exactly as JSON.stringify does (checked for every code point in
// test/shipments-item-json.test.ts); NULL is written `null`.

import { JsonText } from '../http/serializer';

export type Engine = 'sqlite' | 'postgres';

/**
 * A row's one text as an item: the item's JSON written by the database (it starts with `{`) goes
 * out as it is; a row the database could not write exactly comes as its JSON array (`[`), which
 * `map` turns into the item as before.
 */
export function itemOrRow<T>(text: string, map: (row: unknown[]) => T): T | JsonText {
  return text.charCodeAt(0) === 123 /* { */ ? new JsonText(text) : map(JSON.parse(text) as unknown[]);
}

/** the JSON text of a string (or NULL) expression */
export function jsonQuoteSql(engine: Engine, expr: string): string {
  return engine === 'sqlite' ? `json_quote(${expr})` : `coalesce(to_json(${expr})::text, 'null')`;
}

/** the JSON array text of the columns (a row kept for mapping in JavaScript) */
export function jsonArraySql(engine: Engine, columns: string): string {
  return engine === 'sqlite' ? `json_array(${columns})` : `json_build_array(${columns})::text`;
}

/**
 * The condition that a number column holds a whole number of at least 1 within the safe
 * integers, and its digits: such a number is written alike by both engines and by JavaScript.
 */
export function wholeNumberSql(engine: Engine, column: string): { is: string; digits: string } {
  const int = engine === 'sqlite' ? `CAST(${column} AS INTEGER)` : `${column}::bigint`;
  const whole = engine === 'sqlite' ? int : `trunc(${column})`;
  return { is: `${column} >= 1 AND ${column} < 9007199254740992 AND ${column} = ${whole}`, digits: int };
}
