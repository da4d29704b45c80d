// A read thread of the SQLite read pool (db/read-pool.ts): its own read-only connection to the
// database file (WAL: it reads beside the writer and sees committed rows only), answering one
// request at a time. Plain JavaScript: a worker runs outside the TypeScript loaders, in tests as in
// production.
//
// A request is a page of an ordered read with its total, in one read transaction (one snapshot):
// PRAGMA data_version (changes committed by any other connection since this one's last read
// transaction), the count unless this thread holds it for that version, then the page's rows.
// Or ('search') a page of a search's matches with its total, in one read transaction; or ('all')
// the rows of one statement.
import { parentPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';

const db = new Database(workerData.file, { readonly: true, fileMustExist: true });
db.pragma('busy_timeout = 5000');
// a read of a page touches its index range and its rows: a page cache of its own (KiB)
db.pragma(`cache_size = -${workerData.cacheKiB ?? 16384}`);
const begin = db.prepare('BEGIN');
const commit = db.prepare('COMMIT');
const dataVersion = db.prepare('PRAGMA data_version').pluck();
/**
 * text -> statement, by mode: 'pluck' each row's one column (a page of items or uids, a count),
 * 'object' rows as objects ('all'). A map per mode: the text itself is the key (no key string
 * built per read).
 */
const statements = { pluck: new Map(), object: new Map(), raw: new Map() };
function statement(text, mode = 'pluck') {
  const cache = statements[mode];
  let st = cache.get(text);
  if (!st) {
    if (cache.size >= 500) cache.clear();
    st = db.prepare(text);
    if (mode === 'pluck') st.pluck(true);
    else if (mode === 'raw') st.raw(true);
    cache.set(text, st);
  }
  return st;
}

/**
 * True when a row holds a BLOB (better-sqlite3 gives a Buffer): a Buffer crosses to the main
 * thread as a plain Uint8Array, which the pool turns back into a Buffer (read-pool.ts asBuffers)
 * for answers so marked. Rows as objects, as arrays ('raw'), or values ('pluck').
 */
function hasBlob(rows) {
  for (const r of rows) {
    if (r === null || typeof r !== 'object') continue;
    if (r instanceof Uint8Array) return true;
    // no array built per row (an object row's values walked in place): this runs on every answer
    if (Array.isArray(r)) {
      for (const v of r) if (v instanceof Uint8Array) return true;
    } else for (const k in r) if (r[k] instanceof Uint8Array) return true;
  }
  return false;
}

/** `out` with `blobs: true` when its rows hold a BLOB */
function marked(out) {
  if (hasBlob(out.rows)) out.blobs = true;
  return out;
}

/**
 * 'batch': the quick reads the main thread gathered in one turn of its event loop, each one
 * statement's rows, all in one read transaction (one snapshot, one WAL read lock for them all);
 * each answered apart: rows, or its own error.
 */
function batch(m) {
  const answers = new Array(m.reads.length);
  begin.run();
  try {
    for (let i = 0; i < m.reads.length; i++) {
      const r = m.reads[i];
      try {
        answers[i] = marked({ rows: statement(r.text, r.mode).all(r.params) });
      } catch (err) {
        answers[i] = { error: String(err?.message ?? err), code: err?.code ?? null };
      }
    }
  } finally {
    commit.run();
  }
  return { id: m.id, answers };
}

/** totals counted under `version` (data_version), by key; any commit elsewhere drops them all */
let version = -1;
const totals = new Map();

function page(m) {
  begin.run();
  try {
    // the first read of the transaction: it takes the snapshot the count and the page read under
    const v = dataVersion.get();
    if (v !== version) {
      totals.clear();
      version = v;
    }
    let total = totals.get(m.key);
    const counted = total === undefined;
    if (counted) {
      total = Number(statement(m.count).get(m.params));
      if (totals.size >= 512) totals.clear();
      totals.set(m.key, total);
    }
    const rows = total === 0 || m.offset >= total ? [] : statement(m.page).all([...m.params, m.size, m.offset]);
    return marked({ id: m.id, total, rows, counted });
  } finally {
    commit.run();
  }
}

/**
 * A page of a search's matches (their one column, e.g. uids) and its total, in one read
 * transaction, as the main connection reads it (accounts/service.ts getAccounts): the first page
 * with a literal LIMIT, the power of two above the page (a read that ends before it tells the
 * total; a full page is counted); a later page after the count, walking from the nearer end
 * (`desc`, the rows reversed) so that no page walks more than half the matches. Keep it in step
 * with getAccounts' SQLite branches, which read the same way on the main connection.
 */
function search(m) {
  begin.run();
  try {
    if (m.offset === 0) {
      let limit = 8;
      while (limit <= m.size) limit *= 2;
      const all = statement(`${m.asc} limit ${limit}`).all(m.params);
      const rows = all.length <= m.size ? all : all.slice(0, m.size);
      const total = all.length < limit ? all.length : rows.length < m.size ? rows.length : Number(statement(m.count).get(m.params));
      return marked({ id: m.id, total, rows });
    }
    const total = Number(statement(m.count).get(m.params));
    if (m.offset >= total) return { id: m.id, total, rows: [] };
    const size = Math.min(m.size, total - m.offset);
    const fromEnd = total - m.offset - size;
    const reverse = fromEnd < m.offset;
    const rows = statement(`${reverse ? m.desc : m.asc} limit ? + 0 offset ? + 0`).all([...m.params, size, reverse ? fromEnd : m.offset]);
    if (reverse) rows.reverse();
    return marked({ id: m.id, total, rows });
  } finally {
    commit.run();
  }
}

parentPort.on('message', (m) => {
  if (m?.op === 'stop') {
    db.close();
    parentPort.close();
    return;
  }
  if (m?.op !== 'page' && m?.op !== 'search' && m?.op !== 'all' && m?.op !== 'batch') return;
  try {
    // 'all': the rows of one statement (its own read transaction)
    parentPort.postMessage(m.op === 'page' ? page(m) : m.op === 'search' ? search(m) : m.op === 'batch' ? batch(m) : marked({ id: m.id, rows: statement(m.text, 'object').all(m.params) }));
  } catch (err) {
    parentPort.postMessage({ id: m.id, error: String(err?.message ?? err), code: err?.code ?? null });
  }
});
parentPort.postMessage({ ready: true });
