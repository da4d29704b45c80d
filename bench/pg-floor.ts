// The booking's SQL floor on PostgreSQL: the very statements one CreateLocalShipment sends, captured
// from a real booking of the service under test, replayed by pgbench (PostgreSQL's own C load
// generator: no Node, no HTTP) on the same store with as many connections as the service's pool.
// What PostgreSQL itself can book on this machine; the endpoint's distance to it is what the
// service's own work costs. The same for GetShipments' page (pgbenchReadScript): what PostgreSQL
// itself answers at the load's 64 connections, with its latencies. Used by shipments.bench.ts;
// skipped when pgbench is not installed.
import { execFile, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';

export interface Captured {
  text: string;
  values: unknown[];
}

let recording: Captured[] | null = null;
let installed = false;

/**
 * Records the statements sent through any pg client while `record` runs (BEGIN, COMMIT and
 * ROLLBACK left out: the floor's script writes its own). Install it before the service connects:
 * the service's pooled clients keep the query function they found when they connected
 * (db/pg-prepared.ts binds it). Idle, it costs one test per query.
 */
export function installPgRecorder(): { record(fn: () => Promise<void>): Promise<Captured[]> } {
  if (!installed) {
    installed = true;
    const proto = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
    const original = proto.query;
    proto.query = function (this: unknown, q: unknown, ...rest: unknown[]) {
      if (recording) {
        const o = q as { text?: string; values?: unknown[] } | string;
        const text = typeof o === 'string' ? o : o?.text;
        // PgStatement's values are private to TypeScript only; pg's own Query has them public
        const values = typeof o === 'string' ? rest[0] : (o?.values ?? rest[0]);
        if (text && !/^\s*(BEGIN|COMMIT|ROLLBACK)\b/i.test(text)) recording.push({ text, values: Array.isArray(values) ? [...(values as unknown[])] : [] });
      }
      return original.call(this, q, ...rest);
    };
  }
  return {
    async record(fn) {
      const seen: Captured[] = (recording = []);
      try {
        await fn();
      } finally {
        recording = null;
      }
      return seen;
    },
  };
}

export interface Booking {
  statements: Captured[];
  shipmentUid: string;
  lockerUid: string;
  pupUid: string;
  /** access codes the captured booking wrote (each replayed booking must write as many) */
  codes: number;
  /** uids that exist before the booking (tenant, accounts): kept as they are */
  fixed: Set<string>;
}

/** pgbench sees `:name` anywhere in a command as a variable: a literal's colons are written as chr(58) */
function literal(v: unknown): string {
  if (v === null || v === undefined) return 'NULL';
  if (typeof v === 'number' || typeof v === 'bigint') return String(v);
  const parts = String(v)
    .replace(/'/g, "''")
    .split(':')
    .map((p) => `'${p}'`);
  return parts.length === 1 ? parts[0]! : `(${parts.join(' || chr(58) || ')})`;
}

/** the service's strict codes INSERT (shipments/codes.ts INSERT_STRICT_N) as captured, its VALUES of $n only */
const STRICT_CODES_INSERT = /(INSERT INTO access_codes \([^)]*\) VALUES \([^)]*\)(?:, \([^)]*\))*) RETURNING uid\b/g;
/** the ON CONFLICT of the service's other codes INSERT (shipments/codes.ts insertRows) */
const CODES_ON_CONFLICT = "ON CONFLICT (pup_uid, value) WHERE valid = 1 AND shared = 0 AND type = 'Code' DO NOTHING";

/**
 * A pgbench script booking like the captured booking: a random PUP of `pups`, a new shipment uid per
 * transaction, the locker the first statement takes (\gset) in the later ones, a new uid for every
 * other new row, new PINs and QR values; every other value as captured.
 */
export function pgbenchScript(b: Booking, pups: [number, number], pupExpr: (v: string) => string): string {
  const ship = 'md5((:s)::text)';
  const pup = pupExpr('(:p)');
  let fresh = 0;
  const value = (v: unknown, first: boolean): string => {
    if (v === b.shipmentUid) return ship;
    if (v === b.pupUid) return pup;
    if (!first && v === b.lockerUid) return '(:uid)::text';
    if (typeof v === 'string' && /^[0-9a-f]{32}$/.test(v) && !b.fixed.has(v)) return `md5((:s)::text || '${++fresh}')`;
    if (typeof v === 'string' && /^[0-9]{6}$/.test(v)) return `lpad((floor(random() * 1000000))::int::text, 6, '0')`;
    if (typeof v === 'string' && /^[A-Za-z0-9_-]{24}$/.test(v)) return `substr(md5((:s)::text || '${++fresh}'), 1, 24)`;
    return literal(v);
  };
  if (!/\bUPDATE lockers\b/.test(b.statements[0]?.text ?? '')) throw new Error(`the captured booking does not begin by taking a locker: ${b.statements[0]?.text.slice(0, 80)}`);
  const lines = [`\\set p random(${pups[0]}, ${pups[1]})`, '\\set s random(1, 1000000000000000)', 'BEGIN;'];
  let codeInserts = 0;
  b.statements.forEach((st, i) => {
    // The service writes a booking's codes without ON CONFLICT on PostgreSQL (a PIN that collides
    // with a valid PIN of the point fails the statement and the job runs again with new PINs:
    // shipments/codes.ts); pgbench cannot run a transaction again, and one collision of its random
    // PINs aborted the whole floor run (seen once in 4,000 bookings). The floor skips such a PIN
    // instead (the check after the run allows for it). The codes' INSERT travels inside the
    // booking's batch (WITH s0 AS (...), s1 AS (INSERT INTO access_codes ... RETURNING uid), ...:
    // shipments/sqlq.ts); its VALUES hold only $n here, before the values are written in.
    const raw = st.text.replace(STRICT_CODES_INSERT, (_, head: string) => {
      codeInserts++;
      return `${head} ${CODES_ON_CONFLICT} RETURNING uid`;
    });
    if (new RegExp(STRICT_CODES_INSERT.source).test(raw)) throw new Error('the floor left a codes INSERT without ON CONFLICT');
    const text = raw.replace(/\$(\d+)/g, (_, n: string) => value(st.values[Number(n) - 1], i === 0));
    // the first statement answers the taken locker's uid: the later ones write it
    lines.push(i === 0 ? `${text} \\gset` : `${text};`);
  });
  if (codeInserts === 0) throw new Error(`the captured booking has no codes INSERT without ON CONFLICT (the service's strict insert, shipments/codes.ts): ${b.statements.map((st) => st.text.slice(0, 60)).join(' | ')}`);
  lines.push('COMMIT;', '');
  return lines.join('\n');
}

export function pgbenchAvailable(): boolean {
  try {
    execFileSync('pgbench', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

export interface PgbenchResult {
  tps: number;
  transactions: number;
  failed: number;
  latencyMs: number;
  /** with `latencies`: the transactions' latency percentiles from pgbench's per-transaction log */
  p50Ms?: number;
  p99Ms?: number;
}

/**
 * A read-only pgbench script: the captured statements as they were sent, their parameters written
 * in as literals (the listing floor: the same page, the same plan, on every transaction).
 */
export function pgbenchReadScript(statements: Captured[]): string {
  return `${statements.map((st) => `${st.text.replace(/\$(\d+)/g, (_, n: string) => literal(st.values[Number(n) - 1]))};`).join('\n')}\n`;
}

/**
 * Runs the script with pgbench (prepared statements, `clients` connections) in `schema`, each
 * connection `perClient` transactions (a count, not a duration: the bookings must fit the lockers).
 */
export async function runPgbench(url: string, schema: string, script: string, clients: number, perClient: number | { seconds: number }, opts: { latencies?: boolean } = {}): Promise<PgbenchResult> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-pgbench-'));
  const file = path.join(dir, 'script.sql');
  fs.writeFileSync(file, script);
  try {
    const length = typeof perClient === 'number' ? ['-t', String(perClient)] : ['-T', String(perClient.seconds)];
    const stdout = await new Promise<string>((resolve, reject) =>
      execFile(
        'pgbench',
        ['-n', '-M', 'prepared', '-c', String(clients), '-j', '2', ...length, ...(opts.latencies ? ['-l'] : []), '-f', file, url],
        // -l writes pgbench_log.* into the working directory: the temporary one
        { cwd: dir, env: { ...process.env, PGOPTIONS: `-c search_path=${schema}` }, maxBuffer: 16 * 1024 * 1024 },
        (err, out, errOut) => (err ? reject(new Error(`pgbench failed: ${err.message} ${errOut}`)) : resolve(out)),
      ),
    );
    const num = (re: RegExp) => Number(re.exec(stdout)?.[1] ?? NaN);
    const r: PgbenchResult = {
      tps: num(/tps = ([\d.]+) \(without initial connection time\)/),
      transactions: num(/number of transactions actually processed: (\d+)/),
      failed: num(/number of failed transactions: (\d+)/) || 0,
      latencyMs: num(/latency average = ([\d.]+) ms/),
    };
    if (opts.latencies) {
      // one line per transaction: client_id transaction_no time(us) script_no time_epoch time_us
      const us: number[] = [];
      for (const f of fs.readdirSync(dir).filter((n) => n.startsWith('pgbench_log.'))) {
        for (const line of fs.readFileSync(path.join(dir, f), 'utf8').split('\n')) {
          const v = Number(line.split(' ')[2]);
          if (line && Number.isFinite(v)) us.push(v);
        }
      }
      us.sort((a, b) => a - b);
      const pct = (q: number) => (us.length ? us[Math.min(us.length - 1, Math.floor(us.length * q))]! / 1000 : NaN);
      r.p50Ms = pct(0.5);
      r.p99Ms = pct(0.99);
    }
    return r;
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
