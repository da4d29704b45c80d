// For sqlite-checkpoints.test.ts: opens a SQLite file, asks the checkpoint thread for a checkpoint
// at once (the thread still starting), prints the answer and ends WITHOUT closing the database:
// the process must still exit by itself (the thread holds it only while starting or asked).
import { sql } from 'kysely';
import { openDatabase } from '../../src/db/database';

const db = await openDatabase({ url: process.argv[2]! });
const r = await db.walCheckpointer!.checkpoint();
await sql`CREATE TABLE t (v TEXT)`.execute(db.kysely);
await sql`INSERT INTO t (v) VALUES ('x')`.execute(db.kysely);
process.stdout.write(`${JSON.stringify(r)}\n`);
