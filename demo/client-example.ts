// The demo's API steps with the typed client (@locker/client, docs/client.md) instead of curl: a
// token, an account, a shipment (with an Idempotency-Key), its codes and its state. `npm start`
// prints the command line with the demo's address, credentials and pick up point:
//   npx tsx --conditions=@locker/source demo/client-example.ts --api URL --client-id ID --client-secret SECRET --pup UID
// packages/client/test/demo-example.test.ts runs runExample against the real service.
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { LockerApiError, LockerClient } from '@locker/client';

export interface ExampleOptions {
  api: string;
  clientId: string;
  clientSecret: string;
  pupUid: string;
  print?: (line: string) => void;
}

export async function runExample(o: ExampleOptions): Promise<{ userUid: string; shipmentUid: string; lockerName: string | null; dropOffPin: string | undefined; stateCode: string | undefined }> {
  const print = o.print ?? ((s: string) => process.stdout.write(`${s}\n`));
  const api = new LockerClient({ baseUrl: o.api, clientId: o.clientId, clientSecret: o.clientSecret });
  const account = await api.call('/v1/Account/CreateOrGetAccount', { emailAddress: 'ann@example.com', firstName: 'Ann', lastName: 'Example', pickUpPointUid: o.pupUid });
  const userUid = account.userUid!;
  print(`account ${userUid}${account.isExisting ? ' (existing)' : ''}`);
  // the client sends an Idempotency-Key (here our own): repeating this call cannot book twice
  const shipment = await api.call(
    '/v1/Logistics/CreateLocalShipment',
    { ToUserUid: userUid, PupUid: o.pupUid, Dimension: { width: 30, height: 10, length: 40 }, AllowLargerLockers: true, AllowOverflowLockers: false },
    { idempotencyKey: `demo-${Date.now()}` },
  );
  print(`shipment ${shipment.shipmentUid} in locker ${shipment.lockerName}`);
  const codes = await api.call('/v1/Logistics/GetShipmentAccessConfig', { shipmentUid: shipment.shipmentUid });
  for (const c of codes.items) print(`  ${c.usage} ${c.type}: ${c.value}`);
  const page = await api.call('/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 1, shipmentUid: shipment.shipmentUid });
  const stateCode = page.items[0]?.stateCode;
  print(`state ${stateCode}`);
  return { userUid, shipmentUid: shipment.shipmentUid, lockerName: shipment.lockerName, dropOffPin: codes.items.find((c) => c.usage === 'DropOff' && c.type === 'Code')?.value, stateCode };
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  const { values } = parseArgs({ options: { api: { type: 'string' }, 'client-id': { type: 'string' }, 'client-secret': { type: 'string' }, pup: { type: 'string' } } });
  if (!values.api || !values['client-id'] || !values['client-secret'] || !values.pup) {
    process.stderr.write('usage: npx tsx --conditions=@locker/source demo/client-example.ts --api URL --client-id ID --client-secret SECRET --pup UID\n');
    process.exit(2);
  }
  runExample({ api: values.api, clientId: values['client-id'], clientSecret: values['client-secret'], pupUid: values.pup }).catch((err: unknown) => {
    process.stderr.write(err instanceof LockerApiError ? `${err.code}: ${err.message}\n` : `${(err as Error).message}\n`);
    process.exit(1);
  });
}
