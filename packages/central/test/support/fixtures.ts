// The site every central test starts from. Two tenants: A manages PUP A1 (overflowing into A2)
// and A2; B manages B1. Lockers in sizes S, M, L, one without a size code, and a cooled one.
import type { ProvisioningInput } from '../../src/provisioning/schema';

export const PUP_A1 = 'aaaa0000000000000000000000000001';
export const PUP_A2 = 'aaaa0000000000000000000000000002';
export const PUP_B1 = 'bbbb0000000000000000000000000001';
export const UNKNOWN_UID = 'ffff0000000000000000000000000000';

export const TENANT_A = { clientId: 'tenant-a', clientSecret: 'secret-a-0123456789' };
export const TENANT_B = { clientId: 'tenant-b', clientSecret: 'secret-b-0123456789' };
export const DISPATCHER_A_EMAIL = 'dispatch-a@example.test';
export const DISPATCHER_B_EMAIL = 'dispatch-b@example.test';

export const S = { width: 40, height: 10, length: 60 };
export const M = { width: 40, height: 20, length: 60 };
export const L = { width: 40, height: 40, length: 60 };
export const XL = { width: 60, height: 60, length: 60 };

const addr = (street: string, city: string, lat: number, lon: number) => ({ streetName: street, mailbox: '', city, countryIso2: 'NL', latitude: lat, longitude: lon });

export function testSite(): ProvisioningInput {
  return {
    pickupPoints: [
      {
        uid: PUP_A1,
        name: 'Alpha Station',
        timeZone: 'Europe/Amsterdam',
        externalReference: 'EXT-A1',
        overflowPupUid: PUP_A2,
        locationAddress: addr('Stationsplein 1', 'Amsterdam', 52.379, 4.9),
        deliveryAddress: { ...addr('Stationsplein 1', 'Amsterdam', 52.3792, 4.9004), mailbox: 'Dock B' },
        parkingAddress: addr('Prins Hendrikkade 10', 'Amsterdam', 52.3776, 4.9021),
        lockers: [
          { uid: 'a1000000000000000000000000000001', name: 'A1-01', dimension: S, sizeCode: 'S', typeCode: 'normal', bus: 'bus0', boardAddress: 0, lockNumber: 1 },
          { uid: 'a1000000000000000000000000000002', name: 'A1-02', dimension: S, sizeCode: 'S', typeCode: 'normal', bus: 'bus0', boardAddress: 0, lockNumber: 2 },
          { uid: 'a1000000000000000000000000000003', name: 'A1-03', dimension: M, sizeCode: 'M', typeCode: 'normal', bus: 'bus0', boardAddress: 0, lockNumber: 3 },
          { uid: 'a1000000000000000000000000000004', name: 'A1-04', dimension: M, sizeCode: 'M', typeCode: 'normal', bus: 'bus0', boardAddress: 0, lockNumber: 4 },
          { uid: 'a1000000000000000000000000000005', name: 'A1-05', dimension: L, sizeCode: 'L', typeCode: 'normal', bus: 'bus0', boardAddress: 0, lockNumber: 5 },
          { uid: 'a1000000000000000000000000000006', name: 'A1-06', dimension: M, sizeCode: 'M', typeCode: 'cooled', bus: 'bus0', boardAddress: 1, lockNumber: 1 },
          { uid: 'a1000000000000000000000000000007', name: 'A1-07', dimension: XL, typeCode: 'normal', bus: 'bus0', boardAddress: 1, lockNumber: 2 },
        ],
      },
      {
        uid: PUP_A2,
        name: 'Alpha Harbour',
        timeZone: 'Europe/Amsterdam',
        externalReference: 'EXT-A2',
        locationAddress: addr('Piet Heinkade 55', 'Amsterdam', 52.377, 4.918),
        parkingAddress: null,
        lockers: [
          { uid: 'a2000000000000000000000000000001', name: 'A2-01', dimension: S, sizeCode: 'S', typeCode: 'normal', bus: 'bus0', boardAddress: 0, lockNumber: 1 },
          { uid: 'a2000000000000000000000000000002', name: 'A2-02', dimension: M, sizeCode: 'M', typeCode: 'normal', bus: 'bus0', boardAddress: 0, lockNumber: 2 },
          { uid: 'a2000000000000000000000000000003', name: 'A2-03', dimension: L, sizeCode: 'L', typeCode: 'normal', bus: 'bus0', boardAddress: 0, lockNumber: 3 },
        ],
      },
      {
        uid: PUP_B1,
        name: 'Beta Campus',
        timeZone: 'Europe/Brussels',
        externalReference: 'EXT-B1',
        locationAddress: { ...addr('Boulevard du Triomphe 1', 'Brussels', 50.8155, 4.3995), countryIso2: 'BE' },
        lockers: [
          { uid: 'b1000000000000000000000000000001', name: 'B1-01', dimension: S, sizeCode: 'S', typeCode: 'normal', bus: 'bus0', boardAddress: 0, lockNumber: 1 },
          { uid: 'b1000000000000000000000000000002', name: 'B1-02', dimension: M, sizeCode: 'M', typeCode: 'normal', bus: 'bus0', boardAddress: 0, lockNumber: 2 },
        ],
      },
    ],
    tenants: [
      { ...TENANT_A, name: 'Tenant A', mainAccount: { email: DISPATCHER_A_EMAIL, firstName: 'Ada', lastName: 'Dispatch' }, pickupPoints: [PUP_A1, PUP_A2] },
      { ...TENANT_B, name: 'Tenant B', mainAccount: { email: DISPATCHER_B_EMAIL, firstName: 'Bob', lastName: 'Dispatch' }, pickupPoints: [PUP_B1] },
    ],
    terminals: [
      { id: 'term-a1', pupUid: PUP_A1, secret: 'terminal-secret-a1' },
      { id: 'term-b1', pupUid: PUP_B1, secret: 'terminal-secret-b1' },
    ],
  };
}
