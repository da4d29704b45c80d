// The fleet's provisioning file (docs/provisioning.md): `locker-sim fleet generate` writes one that
// the operator applies with `locker-central provision FILE`, and `locker-sim fleet run` reads the
// terminals' ids and secrets back from the same file. Pick up points with a few lockers each, one
// tenant managing all of them (its client id and secret book shipments through the API), and the
// terminals spread over the pick up points, each with its own machine-generated secret.
import crypto from 'node:crypto';
import fs from 'node:fs';
import YAML from 'yaml';
import { generateTerminalSecret } from '@locker/common';
import { FleetError } from './errors';
import type { TerminalCredentials } from './terminal';

export interface GenerateOptions {
  terminals: number;
  /** pick up points; default: one per terminal */
  pups?: number;
  lockersPerPup?: number;
  /** terminal id prefix (default "fleet-"): terminal i is `${prefix}${i}` */
  prefix?: string;
  tenantId?: string;
  /**
   * One secret for every terminal (benches): the file then holds `secretHash` (the secret's scrypt
   * hash) for each terminal and the secret is passed to `fleet run` separately. Default: a secret
   * of its own per terminal, in plain text in the file.
   */
  sharedSecret?: { secret: string; hash: string };
}

export interface FleetSite {
  pickupPoints: {
    uid: string;
    name: string;
    timeZone: string;
    externalReference: string;
    locationAddress: { streetName: string; mailbox: string; city: string; countryIso2: string };
    lockers: { name: string; dimension: { width: number; height: number; length: number }; sizeCode: string; bus: string; boardAddress: number; lockNumber: number }[];
  }[];
  tenants: { clientId: string; clientSecret: string; name: string; mainAccount: { email: string; firstName: string; lastName: string }; pickupPoints: string[] }[];
  terminals: { id: string; pupUid: string; secret: string; name: string }[];
}

/**
 * A random secret that passes the central service's rule for high-entropy terminal secrets
 * (isHighEntropySecret in @locker/common, docs/edge-protocol.md "Connection"), so provisioning
 * stores its fast digest.
 */
export const generateSecret = generateTerminalSecret;

const hex = (bytes: number) => crypto.randomBytes(bytes).toString('hex');

export function generateFleetSite(o: GenerateOptions): { site: FleetSite; tenant: { clientId: string; clientSecret: string } } {
  const n = o.terminals;
  const pups = o.pups ?? n;
  const lockers = o.lockersPerPup ?? 4;
  const prefix = o.prefix ?? 'fleet-';
  const run = hex(3);
  const pickupPoints: FleetSite['pickupPoints'] = [];
  for (let p = 0; p < pups; p++) {
    pickupPoints.push({
      uid: hex(16),
      name: `Fleet PUP ${p}`,
      timeZone: 'Europe/Amsterdam',
      externalReference: `FLEET-${run}-${p}`,
      locationAddress: { streetName: `Fleet street ${p}`, mailbox: '', city: 'Fleetville', countryIso2: 'NL' },
      lockers: Array.from({ length: lockers }, (_, j) => ({
        name: `F-${String(j + 1).padStart(2, '0')}`,
        dimension: { width: 40, height: 20 + 10 * (j % 3), length: 60 },
        sizeCode: ['S', 'M', 'L'][j % 3]!,
        bus: 'bus0',
        boardAddress: Math.floor(j / 16),
        lockNumber: (j % 16) + 1,
      })),
    });
  }
  const clientId = o.tenantId ?? `fleet-tenant-${run}`;
  const clientSecret = generateSecret();
  const tenants: FleetSite['tenants'] = [
    { clientId, clientSecret, name: 'Fleet simulator tenant', mainAccount: { email: `dispatch-${run}@fleet.example`, firstName: 'Fleet', lastName: 'Dispatcher' }, pickupPoints: pickupPoints.map((p) => p.uid) },
  ];
  const terminals: FleetSite['terminals'] = [];
  for (let i = 0; i < n; i++) {
    const pup = pickupPoints[i % pups]!;
    terminals.push({ id: `${prefix}${i}`, pupUid: pup.uid, secret: o.sharedSecret ? o.sharedSecret.hash : generateSecret(), name: `Fleet terminal ${i}` });
  }
  return { site: { pickupPoints, tenants, terminals }, tenant: { clientId, clientSecret } };
}

/** YAML for the file (with a header that says what it is and how to apply it). */
export function siteToYaml(site: FleetSite): string {
  const head = [
    '# A simulated fleet, written by `locker-sim fleet generate`.',
    '# Apply it with the central service\'s configuration (the same mqtt.terminalSecretPepper, so the',
    '# terminals\' fast digests are written):   locker-central provision THIS_FILE',
    '# then run the terminals:   locker-sim fleet run --provisioning THIS_FILE --broker mqtt(s)://HOST:PORT',
    '# It holds plain secrets (terminals and the tenant): keep it as private as the terminals\' own configuration.',
    '',
  ].join('\n');
  return head + YAML.stringify(site, { lineWidth: 0 });
}

/**
 * The terminals of a provisioning file (YAML or JSON): id, secret, pick up point. A terminal whose
 * secret is an `scrypt$` hash needs `secret` (one secret for all such terminals), else it is an
 * error (FLEET_NO_SECRET). `only`: the first n terminals.
 */
export function readFleetTerminals(file: string, opts: { secret?: string | null; only?: number | null; prefix?: string | null } = {}): TerminalCredentials[] {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    throw new FleetError('FLEET_PROVISIONING_UNREADABLE', `cannot read ${file}: ${(err as Error).message}`);
  }
  let raw: unknown;
  try {
    raw = YAML.parse(text);
  } catch (err) {
    throw new FleetError('FLEET_PROVISIONING_INVALID', `${file} is not valid YAML/JSON: ${(err as Error).message.split('\n')[0]}`);
  }
  const terms = (raw as { terminals?: unknown } | null)?.terminals;
  if (!Array.isArray(terms) || terms.length === 0) throw new FleetError('FLEET_PROVISIONING_INVALID', `${file} has no terminals: (a provisioning file with a "terminals" list)`);
  const out: TerminalCredentials[] = [];
  for (const [i, t] of terms.entries()) {
    const r = t as { id?: unknown; secret?: unknown; pupUid?: unknown };
    if (typeof r.id !== 'string' || !r.id || typeof r.secret !== 'string' || !r.secret) throw new FleetError('FLEET_PROVISIONING_INVALID', `${file}: terminals[${i}] needs an id and a secret`);
    if (opts.prefix && !r.id.startsWith(opts.prefix)) continue;
    let secret = r.secret;
    if (secret.startsWith('scrypt$')) {
      if (!opts.secret) throw new FleetError('FLEET_NO_SECRET', `${file}: the secret of terminal ${r.id} is a stored hash; pass the plain secret with --secret-env NAME`);
      secret = opts.secret;
    }
    out.push({ id: r.id, secret, ...(typeof r.pupUid === 'string' ? { pupUid: r.pupUid } : {}) });
    if (opts.only && out.length >= opts.only) break;
  }
  if (!out.length) throw new FleetError('FLEET_PROVISIONING_INVALID', `${file}: no terminal matches the prefix ${opts.prefix}`);
  return out;
}
