// Reads one workbook off the event loop (parse.ts readWorkbookInWorker): workerData { buf, maxRows }
// in, one message out: { rows } or { error: { kind, message } }. The parent stops the thread when it
// takes longer than suggestions.parseTimeoutMs.
import { parentPort, workerData } from 'node:worker_threads';
import { sheetRows } from './sheet-rows.mjs';

try {
  parentPort.postMessage({ rows: sheetRows(workerData.buf, workerData.maxRows) });
} catch (e) {
  parentPort.postMessage({ error: { kind: e?.kind ?? 'unreadable', message: String(e?.message ?? e) } });
}
