import pg from 'pg';
import { openDatabase } from '../packages/central/src/db/database';
import { listShipments } from '../packages/central/src/shipments/queries';
const schema = process.argv[2]!;
const texts: string[] = [];
const proto = pg.Client.prototype as unknown as { query: (...a: unknown[]) => unknown };
const orig = proto.query;
proto.query = function (this: unknown, ...a: unknown[]) {
  const q = a[0] as string | { text?: string };
  texts.push(typeof q === 'string' ? q : (q?.text ?? '?'));
  return orig.apply(this, a);
};
const db = await openDatabase({ url: 'postgres://postgres@127.0.0.1:5432/test', pgSchema: schema });
const t = await db.kysely.selectFrom('tenants').select('uid').where('client_id', '=', 'bench').executeTakeFirstOrThrow();
await listShipments(db, { tenantUid: t.uid, typeCode: null, active: true, updatedSince: '2025-01-01T09:00:00', sortBy: 'ActivityAsc', pageNo: 1, pageSize: 100 });
await listShipments(db, { tenantUid: t.uid, typeCode: null, active: true, sortBy: 'CreatedDesc', pageNo: 1, pageSize: 100 });
console.log(JSON.stringify({ tenant: t.uid, texts: texts.filter((x) => x.includes('shipments')) }));
await db.close();
