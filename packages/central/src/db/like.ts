// Case-insensitive "contains" search with LIKE, the same on both engines: the term lower-cased,
// its wildcards escaped, wrapped in %...%. Queries compare it with lower(column) and must say
// ESCAPE '\'. (Terms are bounded by the request schemas: SQLite refuses patterns over 50,000 bytes.)
export function containsPattern(term: string): string {
  return `%${term.toLowerCase().replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}
