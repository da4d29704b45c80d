// The provisioning file: tenants, pick up points with their lockers, terminals. The API has no
// endpoints for these (product.md); operators keep them in a JSON or YAML file and apply it with
// `locker-central provision FILE`. docs/provisioning.md shows the JSON Schema generated from this.
import { z } from 'zod';

const uid = z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'letters, digits, _ or -, at most 64');

export const ProvAddress = z
  .object({
    streetName: z.string().default(''),
    mailbox: z.string().default(''),
    city: z.string().default(''),
    countryIso2: z.string().regex(/^[A-Z]{2}$/, 'ISO 3166-1 alpha-2, upper case'),
    latitude: z.number().min(-90).max(90).optional(),
    longitude: z.number().min(-180).max(180).optional(),
  })
  .strict();

export const ProvDimension = z.object({ width: z.number().min(1), height: z.number().min(1), length: z.number().min(1) }).strict();

export const ProvLocker = z
  .object({
    uid: uid.optional().describe('stable id; generated on first apply when absent (the name then identifies the locker)'),
    name: z.string().min(1),
    dimension: ProvDimension,
    sizeCode: z.string().min(1).nullish().describe('size name, e.g. S, M, L; when absent the API shows HxWxL'),
    typeCode: z.string().min(1).default('normal').describe('e.g. normal, cooled'),
    bus: z.string().min(1).default('bus0').describe("the terminal's bus the lock board hangs on"),
    boardAddress: z.number().int().min(0).max(255),
    lockNumber: z.number().int().min(1).max(64),
    inService: z
      .boolean()
      .default(true)
      .describe('false takes the locker out of service: never booked, neither free nor occupied in availability; a booking it holds stays until it ends'),
  })
  .strict();

export const ProvPickupPoint = z
  .object({
    uid,
    name: z.string().min(1),
    timeZone: z.string().min(1).optional().describe('IANA time zone, e.g. Europe/Amsterdam'),
    externalReference: z.string().optional(),
    overflowPupUid: uid.optional().describe('where bookings go when this PUP is full and AllowOverflowLockers is true'),
    locationAddress: ProvAddress,
    deliveryAddress: ProvAddress.optional(),
    parkingAddress: ProvAddress.nullish(),
    lockers: z.array(ProvLocker).default([]),
  })
  .strict();

export const ProvAccount = z
  .object({
    uid: uid.optional(),
    email: z.string().email(),
    userName: z.string().min(1).optional(),
    firstName: z.string().min(1),
    lastName: z.string().min(1),
    phoneNumber: z.string().optional(),
    languageCode: z.string().optional(),
  })
  .strict();

export const ProvCallback = z
  .object({
    url: z.string().url().nullable(),
    authType: z.enum(['None', 'HMAC', 'ApiKey']).default('HMAC'),
    authKey: z.string().min(16).optional(),
  })
  .strict();

export const ProvTenant = z
  .object({
    clientId: z.string().regex(/^[A-Za-z0-9_.-]{3,128}$/),
    clientSecret: z.string().min(12).describe('plain secret (hashed on apply) or an scrypt$ hash'),
    name: z.string().min(1),
    mainAccount: ProvAccount.describe('the Dispatcher Main Account'),
    pickupPoints: z.array(uid).default([]).describe('uids of the PUPs this tenant manages'),
    callback: ProvCallback.optional(),
  })
  .strict();

export const ProvTerminal = z
  .object({
    id: uid,
    pupUid: uid,
    secret: z.string().min(12).describe('plain secret (hashed on apply) or an scrypt$ hash'),
    name: z.string().optional(),
  })
  .strict();

export const ProvisioningFile = z
  .object({
    pickupPoints: z.array(ProvPickupPoint).default([]),
    tenants: z.array(ProvTenant).default([]),
    terminals: z.array(ProvTerminal).default([]),
  })
  .strict()
  .superRefine((f, ctx) => {
    const pups = new Set(f.pickupPoints.map((p) => p.uid));
    const seen = new Set<string>();
    f.pickupPoints.forEach((p, i) => {
      if (seen.has(p.uid)) ctx.addIssue({ code: 'custom', path: ['pickupPoints', i, 'uid'], message: `duplicate pick up point ${p.uid}` });
      seen.add(p.uid);
      if (p.overflowPupUid === p.uid) ctx.addIssue({ code: 'custom', path: ['pickupPoints', i, 'overflowPupUid'], message: 'a PUP cannot overflow into itself' });
      const names = new Set<string>();
      const places = new Set<string>();
      p.lockers.forEach((l, j) => {
        if (names.has(l.name)) ctx.addIssue({ code: 'custom', path: ['pickupPoints', i, 'lockers', j, 'name'], message: `duplicate locker name ${l.name}` });
        names.add(l.name);
        const place = `${l.bus}/${l.boardAddress}/${l.lockNumber}`;
        if (places.has(place)) ctx.addIssue({ code: 'custom', path: ['pickupPoints', i, 'lockers', j, 'lockNumber'], message: `two lockers on the same lock ${place}` });
        places.add(place);
      });
    });
    const clients = new Set<string>();
    f.tenants.forEach((t, i) => {
      if (clients.has(t.clientId)) ctx.addIssue({ code: 'custom', path: ['tenants', i, 'clientId'], message: `duplicate client id ${t.clientId}` });
      clients.add(t.clientId);
    });
    void pups;
  });

export type ProvisioningFile = z.infer<typeof ProvisioningFile>;
export type ProvisioningInput = z.input<typeof ProvisioningFile>;

export function provisioningJsonSchema(): unknown {
  return z.toJSONSchema(ProvisioningFile, { io: 'input', unrepresentable: 'any' });
}
