// The booking's SQL with nothing around it (bench/booking-floor.bench.ts): the statements a
// CreateLocalShipment writes on SQLite (candidate lockers, conditional locker UPDATE, shipment row,
// audit row, outbox row, five access codes, the point's code version), as raw better-sqlite3
// prepared statements, one SAVEPOINT per booking, group commit with synchronous=FULL. No Kysely, no promises inside a
// batch, no validation, no auth. Loaded in the main thread (makeBooker) or as a worker thread that
// owns the write connection (the "writer thread" design).
//
// Keep the statements in step with packages/central/src/shipments (booking.ts, service.ts
// createIn, codes.ts, callbacks/outbox.ts); the schema itself comes from the real migrations.
import crypto from 'node:crypto';
import { parentPort, Worker, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';

const CHECKPOINT_WORKER = new URL('../packages/central/src/db/checkpoint-worker.mjs', import.meta.url);

const SHIPMENT_COLS = ['uid', 'tenant_uid', 'type_code', 'flow', 'state_code', 'active', 'state_start', 'created_at', 'updated_at', 'reference_no', 'reference_case_no', 'description', 'from_user_uid', 'to_user_uid', 'from_address', 'to_address', 'receiver_delayed', 'keep_booked', 'pup_uid', 'locker_uid', 'width', 'height', 'length', 'swaps_shipment_uid', 'prior_shipment_uid', 'waits_on_uid', 'wait_kind', 'drop_off_deadline', 'seq'];
const OUTBOX_COLS = ['event_id', 'tenant_uid', 'shipment_uid', 'sequence', 'message_type', 'payload', 'status', 'attempts', 'next_attempt_at', 'lease_until', 'lease_owner', 'last_status', 'last_error', 'created_at', 'delivered_at'];
const CODE_ROW = '(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)';

// Random values from a pooled buffer, as the service draws them (packages/central/src/ids.ts
// randomBytes: one crypto.randomFillSync per 4 KiB). One crypto.randomBytes call per uid cost the
// floor about 20 us per booking in its seven uids alone, more with the two PINs and three Qr values,
// which the service does not pay: the floor was slower than the endpoint's own SQL needs.
const POOL_SIZE = 4096;
const pool = Buffer.alloc(POOL_SIZE);
let offset = POOL_SIZE;
function random(n) {
  if (offset + n > POOL_SIZE) {
    crypto.randomFillSync(pool);
    offset = 0;
  }
  const b = pool.subarray(offset, offset + n);
  offset += n;
  return b;
}
const PIN_LIMIT = Math.floor(2 ** 32 / 1_000_000) * 1_000_000;
/** time-ordered uid, as the service's newSeqUid (48 bits of milliseconds, 80 random bits) */
const uid = () => Date.now().toString(16).padStart(12, '0') + random(10).toString('hex');
/** a uniform 6-digit PIN, as the service's newPin (rejection sampling over 32 random bits) */
const pin = () => {
  for (;;) {
    const v = random(4).readUInt32BE(0);
    if (v < PIN_LIMIT) return String(v % 1_000_000).padStart(6, '0');
  }
};
const qr = () => random(18).toString('base64url');
const sorted = (d) => [d.width, d.height, d.length].sort((a, b) => a - b);

/**
 * A booker on the SQLite file: book(request) queues, batches run on setImmediate. minimal: the
 * least any durable booking can write (the locker taken, one row holding the whole booking as
 * JSON, no secondary index), a lower bound for every storage design, not a design of ours.
 * appendOnly: lower still, the free lockers are held in memory (loaded once) and a booking is
 * only the append of its JSON row (a log from which every table would have to be derived).
 */
export function makeBooker(file, { minimal = false, appendOnly = false, checkpoints = 'commit' } = {}) {
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  db.pragma('temp_store = MEMORY');
  // checkpoints 'background': as the service does them (packages/central/src/db/checkpointer.ts),
  // in a thread with its own connection between two batches, the next batch held until it answers
  // (after 2,000 changed rows or a second); 'commit': SQLite's own, inside the COMMIT at 10,000 pages.
  // The thresholds repeat checkpointer.ts's CHECKPOINT_CHANGES, CHECKPOINT_INTERVAL_MS and
  // WAL_SAFETY_PAGES (this plain .mjs cannot import the TypeScript): change them together.
  const background = checkpoints === 'background';
  db.pragma(`wal_autocheckpoint = ${background ? 40000 : 10000}`);
  const checkpointer = background ? new Worker(CHECKPOINT_WORKER, { workerData: { file, synchronous: 'FULL' } }) : null;
  checkpointer?.unref();
  /** what to do when the checkpoint asked for answers (the thread's first message is its start) */
  let onAnswer = null;
  checkpointer?.on('message', (m) => {
    if (m?.ready) return;
    const f = onAnswer;
    onAnswer = null;
    f?.();
  });
  const totalChanges = db.prepare('SELECT total_changes() AS c');
  let checkpointedChanges = 0;
  let checkpointedAt = Date.now();
  let paused = false;
  const candidates = db.prepare(
    "SELECT uid, name, width, height, length FROM lockers WHERE pup_uid = ? AND active = 1 AND booked_shipment_uid IS NULL AND width * height * length >= ? ORDER BY width * height * length, CASE WHEN type_code = 'normal' THEN 0 ELSE 1 END, name LIMIT 4",
  );
  const take = db.prepare('UPDATE lockers SET booked_shipment_uid = ?, updated_at = ? WHERE uid = ? AND booked_shipment_uid IS NULL AND active = 1');
  const insertShipment = db.prepare(`INSERT INTO shipments (${SHIPMENT_COLS.join(', ')}) VALUES (${SHIPMENT_COLS.map(() => '?').join(', ')})`);
  const insertTransition = db.prepare('INSERT INTO shipment_transitions (shipment_uid, seq, tenant_uid, from_state, to_state, cause, detail, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)');
  const insertOutbox = db.prepare(
    `INSERT INTO callback_outbox (${OUTBOX_COLS.join(', ')}) VALUES (${OUTBOX_COLS.map((c) => (c === 'status' ? "CASE WHEN EXISTS (SELECT 1 FROM callback_configs WHERE tenant_uid = ? AND url IS NOT NULL AND url <> '') THEN 'pending' ELSE 'skipped' END" : '?')).join(', ')}) RETURNING status`,
  );
  const insertCodes = db.prepare(
    `INSERT INTO access_codes (uid, shipment_uid, tenant_uid, pup_uid, locker_uid, usage, type, value, valid, shared, created_at, invalidated_at) VALUES ${Array(5).fill(CODE_ROW).join(', ')} ON CONFLICT (pup_uid, value) WHERE valid = 1 AND shared = 0 AND type = 'Code' DO NOTHING RETURNING uid`,
  );
  const bumpVersion = db.prepare('INSERT INTO pup_code_versions (pup_uid, version) VALUES (?, 1) ON CONFLICT (pup_uid) DO UPDATE SET version = pup_code_versions.version + 1');
  db.exec('CREATE TABLE IF NOT EXISTS floor_minimal_bookings (uid TEXT PRIMARY KEY, body TEXT NOT NULL) WITHOUT ROWID');
  const insertMinimal = db.prepare('INSERT INTO floor_minimal_bookings (uid, body) VALUES (?, ?)');
  /** appendOnly: free lockers per PUP in candidate order, in memory */
  const free = new Map();
  if (appendOnly) {
    const all = db.prepare("SELECT uid, name, pup_uid, width, height, length FROM lockers WHERE active = 1 AND booked_shipment_uid IS NULL ORDER BY pup_uid, width * height * length, CASE WHEN type_code = 'normal' THEN 0 ELSE 1 END, name").all();
    for (const l of all) {
      if (!free.has(l.pup_uid)) free.set(l.pup_uid, []);
      free.get(l.pup_uid).push(l);
    }
  }
  const [begin, commit, savepoint, release, rollbackTo] = ['BEGIN', 'COMMIT', 'SAVEPOINT job', 'RELEASE SAVEPOINT job', 'ROLLBACK TO SAVEPOINT job'].map((s) => db.prepare(s));

  function bookOne(m) {
    const now = new Date().toISOString();
    const s = uid();
    const want = sorted(m.dimension);
    let locker = null;
    if (appendOnly) {
      const list = free.get(m.pupUid) ?? [];
      const i = list.findIndex((c) => {
        const have = sorted(c);
        return have[0] >= want[0] && have[1] >= want[1] && have[2] >= want[2];
      });
      if (i < 0) return { success: false, error: 'NoLockerAvailable', message: 'no fitting locker is free' };
      locker = list.splice(i, 1)[0];
      const codes = { dropOffPin: pin(), pickUpPin: pin(), dropOffQr: qr(), pickUpQr: qr(), linkCode: qr() };
      insertMinimal.run(s, JSON.stringify({ ...m, lockerUid: locker.uid, state: 'ReadyForDropoff', at: now, codes, outbox: [{ eventId: uid(), sequence: 1 }] }));
      return { success: true, error: null, message: null, shipmentUid: s, lockerName: locker.name, dropOffCode: codes.dropOffPin, pickUpCode: codes.pickUpPin };
    }
    for (const c of candidates.all(m.pupUid, m.dimension.width * m.dimension.height * m.dimension.length)) {
      const have = sorted(c);
      if (have[0] >= want[0] && have[1] >= want[1] && have[2] >= want[2] && take.run(s, now, c.uid).changes === 1) {
        locker = c;
        break;
      }
    }
    if (!locker) return { success: false, error: 'NoLockerAvailable', message: 'no fitting locker is free' };
    if (minimal) {
      const codes = { dropOffPin: pin(), pickUpPin: pin(), dropOffQr: qr(), pickUpQr: qr(), linkCode: qr() };
      insertMinimal.run(s, JSON.stringify({ ...m, lockerUid: locker.uid, state: 'ReadyForDropoff', at: now, codes, outbox: [{ eventId: uid(), sequence: 1 }] }));
      return { success: true, error: null, message: null, shipmentUid: s, lockerName: locker.name, dropOffCode: codes.dropOffPin, pickUpCode: codes.pickUpPin };
    }
    const row = { uid: s, tenant_uid: m.tenantUid, type_code: 'LocalPupShipment', flow: 'local', state_code: 'ReadyForDropoff', active: 1, state_start: now, created_at: now, updated_at: now, reference_no: m.referenceNo ?? null, reference_case_no: null, description: null, from_user_uid: m.fromUserUid, to_user_uid: m.toUserUid, from_address: null, to_address: null, receiver_delayed: 0, keep_booked: 0, pup_uid: m.pupUid, locker_uid: locker.uid, width: m.dimension.width, height: m.dimension.height, length: m.dimension.length, swaps_shipment_uid: null, prior_shipment_uid: null, waits_on_uid: null, wait_kind: null, drop_off_deadline: now, seq: 1 };
    insertShipment.run(SHIPMENT_COLS.map((c) => row[c]));
    insertTransition.run(s, 1, m.tenantUid, null, 'ReadyForDropoff', 'api', 'CreateLocalShipment', now);
    const payload = JSON.stringify({ messageType: 'ShipmentStatusUpdate', message: { shipmentUid: s, stateCode: 'ReadyForDropoff', stateStart: now, shipmentType: 'LocalPupShipment', pupUid: m.pupUid, sequence: 1 } });
    insertOutbox.all(uid(), m.tenantUid, s, 1, 'ShipmentStatusUpdate', payload, m.tenantUid, 0, now, null, null, null, null, now, null);
    const codes = [['DropOff', 'Code', pin()], ['PickUp', 'Code', pin()], ['DropOff', 'Qr', qr()], ['PickUp', 'Qr', qr()], ['LinkCode', 'Qr', qr()]];
    insertCodes.all(codes.flatMap(([usage, type, value]) => [uid(), s, m.tenantUid, m.pupUid, locker.uid, usage, type, value, 1, 0, now, null]));
    bumpVersion.run(m.pupUid); // the point's code version, the edge sync's change marker
    return { success: true, error: null, message: null, shipmentUid: s, lockerName: locker.name, dropOffCode: codes[0][2], pickUpCode: codes[1][2] };
  }

  let queue = [];
  let scheduled = false;
  const stats = { batches: 0, jobs: 0 };
  function runBatch() {
    scheduled = false;
    const batch = queue;
    queue = [];
    begin.run();
    const answers = batch.map(([m]) => {
      savepoint.run();
      try {
        const r = bookOne(m);
        release.run();
        return r;
      } catch (e) {
        rollbackTo.run();
        release.run();
        return { success: false, error: 'InternalError', message: String(e) };
      }
    });
    commit.run(); // synchronous=FULL: the WAL is fsynced here
    stats.batches++;
    stats.jobs += batch.length;
    batch.forEach(([, done], i) => done(answers[i]));
    if (checkpointer) {
      const c = totalChanges.get().c;
      if (c - checkpointedChanges >= 2000 || (c > checkpointedChanges && Date.now() - checkpointedAt >= 1000)) {
        checkpointedChanges = c;
        checkpointedAt = Date.now();
        paused = true;
        stats.checkpoints = (stats.checkpoints ?? 0) + 1;
        onAnswer = () => {
          paused = false;
          if (queue.length && !scheduled) {
            scheduled = true;
            setImmediate(runBatch);
          }
        };
        checkpointer.postMessage({ op: 'checkpoint', id: stats.checkpoints });
      }
    }
  }
  return {
    stats,
    book(m) {
      return new Promise((resolve) => {
        queue.push([m, resolve]);
        if (!scheduled && !paused) {
          scheduled = true;
          setImmediate(runBatch);
        }
      });
    },
    close: () => {
      void checkpointer?.terminate();
      db.close();
    },
  };
}

if (parentPort && workerData?.file) {
  // writer thread: requests arrive as [id, request], answers go back as [id, answer] pairs
  const booker = makeBooker(workerData.file, { minimal: !!workerData.minimal, appendOnly: !!workerData.appendOnly, checkpoints: workerData.checkpoints ?? 'commit' });
  parentPort.on('message', ([id, m]) => {
    void booker.book(m).then((answer) => parentPort.postMessage([id, answer]));
  });
}
