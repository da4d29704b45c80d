// The WAL checkpointer's thread (db/checkpointer.ts): its own connection to the SQLite file, and
// on each request one PASSIVE checkpoint (copy the WAL's frames into the database file, fsync it),
// answered with SQLite's own figures. Plain JavaScript: a worker runs outside the TypeScript
// loaders, in tests as in production.
import { parentPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';

const db = new Database(workerData.file, { fileMustExist: true });
// the database file is fsynced at the end of a checkpoint as the main connection would
db.pragma(`synchronous = ${workerData.synchronous ?? 'FULL'}`);
const checkpoint = db.prepare('PRAGMA wal_checkpoint(PASSIVE)');

parentPort.on('message', (m) => {
  if (m?.op === 'stop') {
    db.close();
    parentPort.close();
    return;
  }
  if (m?.op !== 'checkpoint') return;
  const t0 = performance.now();
  try {
    // log: frames in the WAL; checkpointed: frames now in the database file
    const r = checkpoint.get();
    parentPort.postMessage({ id: m.id, log: r.log, checkpointed: r.checkpointed, ms: performance.now() - t0 });
  } catch (err) {
    parentPort.postMessage({ id: m.id, error: String(err?.message ?? err), code: err?.code ?? null });
  }
});
parentPort.postMessage({ ready: true });
