// Search filters of GetAccounts and GetAccountSuggestions, bounded in cost (issue 12, item 4).
//
// The inputs are bounded by the request schemas (SEARCH_LIMITS: characters per filter, words per
// multi-word filter), and the query work per row is linear in them: a term is matched with
// instr() (SQLite) / strpos() (PostgreSQL) on the lower-cased column, not with LIKE '%term%'
// (LIKE compares the whole pattern again at every position of the value: a 254-character
// near-miss term against 20,000 long names took 60-100 ms on SQLite, instr() 3-9 ms, measured in
// bench/search.bench.ts). There are no wildcards: `%`, `_` and `\` are ordinary characters.
// Repeated words, and words contained in another word of the same filter, are dropped before the
// query (they cannot change its answer), so the query runs at most maxWords containment tests per
// row for a multi-word filter, one per other filter.
import { sql, type RawBuilder } from 'kysely';
import { z } from 'zod';
import type { Engine } from '../db/database';

export const SEARCH_LIMITS = {
  /** characters of a text filter: userName, emailAddress, fullName, searchText (the longest e-mail address is 254) */
  maxLength: 254,
  /** words of a multi-word filter: fullName (GetAccounts), searchText (GetAccountSuggestions) */
  maxWords: 5,
  /** characters of phoneNumber (E.164 has at most 15 digits; spaces and punctuation allowed) */
  maxPhoneLength: 32,
  /** characters of mailCode */
  maxMailCodeLength: 32,
  /** characters of pupUid */
  maxPupUidLength: 128,
} as const;

/** The words of a multi-word filter, as sent (split at white space). */
export function wordsOf(text: string | null | undefined): string[] {
  return (text ?? '').trim().split(/\s+/).filter(Boolean);
}

/**
 * The words a query needs: lower-cased, repeated words and words contained in another word
 * dropped (every row holding "anna" holds "an"), longest first.
 */
export function queryWords(text: string | null | undefined): string[] {
  const words = [...new Set(wordsOf(text).map((w) => w.toLowerCase()))].sort((a, b) => b.length - a.length);
  return words.filter((w, i) => !words.some((o, j) => j < i && o.includes(w)));
}

const lengthMessage = (max: number) => ({ message: `at most ${max} characters` });

/** An optional single-term filter of at most `max` characters (null means no filter). */
export const searchTerm = (max: number = SEARCH_LIMITS.maxLength) => z.string().max(max, lengthMessage(max)).nullish();

/** An optional multi-word filter: at most maxLength characters and maxWords words. */
export const searchWords = () =>
  z
    .string()
    .max(SEARCH_LIMITS.maxLength, lengthMessage(SEARCH_LIMITS.maxLength))
    .refine((v) => wordsOf(v).length <= SEARCH_LIMITS.maxWords, { message: `at most ${SEARCH_LIMITS.maxWords} words` })
    .nullish();

/**
 * `expr` contains `term` (already lower-cased), ignoring case as SQL lower() does. `expr` is
 * lower-cased here unless `lowered` (the *_key columns are stored lower-cased).
 */
export function contains(engine: Engine, expr: RawBuilder<unknown>, term: string, lowered = false): RawBuilder<boolean> {
  const e = lowered ? expr : sql`lower(${expr})`;
  return engine === 'postgres' ? sql<boolean>`strpos(${e}, ${term}) > 0` : sql<boolean>`instr(${e}, ${term}) > 0`;
}
