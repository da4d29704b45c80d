// A read thread of the SQLite read pool (db/read-pool.ts): its own read-only connection to the
// database file (WAL: it reads beside the writer and sees committed rows only), answering one
// request at a time. Plain JavaScript: a worker runs outside the TypeScript loaders, in tests as in
// production.
//
// A request is a page of an ordered read with its total, in one read transaction (one snapshot):
// PRAGMA data_version (changes committed by any other connection since this one's last read
// transaction), the count unless this thread holds it for that version, then the page's rows.
// Or ('all') the rows of one statement.
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
 * mode + text -> statement: 'pluck' each row's one column (a page of items, a count), 'raw' rows as
 * arrays, 'object' rows as objects
 */
const statements = new Map();
function statement(text, mode = 'pluck') {
  const key = mode + text;
  let st = statements.get(key);
  if (!st) {
    if (statements.size >= 500) statements.clear();
    st = db.prepare(text);
    if (mode === 'pluck') st.pluck(true);
    else if (mode === 'raw') st.raw(true);
    statements.set(key, st);
  }
  return st;
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
    return { id: m.id, total, rows, counted };
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
  if (m?.op !== 'page' && m?.op !== 'all') return;
  try {
    // 'all': the rows of one statement (its own read transaction)
    parentPort.postMessage(m.op === 'page' ? page(m) : { id: m.id, rows: statement(m.text, m.mode).all(m.params) });
  } catch (err) {
    parentPort.postMessage({ id: m.id, error: String(err?.message ?? err), code: err?.code ?? null });
  }
});
parentPort.postMessage({ ready: true });
