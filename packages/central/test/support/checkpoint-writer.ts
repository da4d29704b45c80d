// A writer process for sqlite-checkpoints.test.ts: group-commit jobs into a SQLite file with WAL
// checkpoints in their thread, printing `ok <id>` once the COMMIT holding row <id> returned (the
// acknowledgement) and `ckpt <n>` after each checkpoint; it runs until it is killed.
import { sql } from 'kysely';
import { openDatabase } from '../../src/db/database';
import { SqliteGroupCommitRunner } from '../../src/shipments/tx';

const file = process.argv[2]!;
const db = await openDatabase({ url: file, sqliteSynchronous: 'FULL' });
await sql`CREATE TABLE IF NOT EXISTS ck_rows (id INTEGER PRIMARY KEY, v TEXT NOT NULL)`.execute(db.kysely);
const runner = new SqliteGroupCommitRunner(db);
let next = Number((await sql<{ m: number | null }>`SELECT max(id) AS m FROM ck_rows`.execute(db.kysely)).rows[0]?.m ?? 0) + 1;
let seen = 0;
const pad = 'x'.repeat(300);
for (;;) {
  // 32 jobs at a time, 20 rows each: they share one transaction
  await Promise.all(
    Array.from({ length: 32 }, () => {
      const first = next;
      next += 20;
      return runner
        .run(async (trx) => {
          for (let i = 0; i < 20; i++) await sql`INSERT INTO ck_rows (id, v) VALUES (${first + i}, ${pad})`.execute(trx);
        })
        .then(() => process.stdout.write(`ok ${first + 19}\n`));
    }),
  );
  const n = db.walCheckpointer?.stats.checkpoints ?? 0;
  if (n !== seen) process.stdout.write(`ckpt ${(seen = n)}\n`);
}
