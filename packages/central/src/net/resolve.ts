// Name resolution for outbound requests made on a tenant's behalf, bounded in time, and the check
// that every address a name resolves to is an allowed target (net/address.ts). One resolver is
// used both when a callback URL is configured and when the delivery worker connects, so both see
// the same answers; tests replace it per service (setResolver) instead of doing real DNS.
import dns from 'node:dns';
import net from 'node:net';
import { addressVerdict, hostVerdict, normalizeHost, type AddressVerdict, type TargetPolicy } from './address';

/** Resolves a host name to its IP addresses (IPv4 and IPv6, in the resolver's order). */
export type Resolver = (hostname: string) => Promise<string[]>;

/** The operating system's resolver (getaddrinfo: /etc/hosts, then DNS), as connections use by default. */
export const systemResolver: Resolver = async (hostname) => (await dns.promises.lookup(hostname, { all: true, verbatim: true })).map((a) => a.address);

const resolvers = new WeakMap<object, Resolver>();

/** Uses `resolver` for the outbound requests of `owner` (the service's AppContext); null restores the system resolver. */
export function setResolver(owner: object, resolver: Resolver | null): void {
  if (resolver) resolvers.set(owner, resolver);
  else resolvers.delete(owner);
}

export function resolverFor(owner: object): Resolver {
  return resolvers.get(owner) ?? systemResolver;
}

/** A target the policy does not allow. `code` lets callers tell it from network errors. */
export class TargetRefusedError extends Error {
  readonly code = 'ETARGETREFUSED';
  constructor(
    message: string,
    readonly verdict: AddressVerdict,
    readonly address: string | null,
  ) {
    super(message);
    this.name = 'TargetRefusedError';
  }
}

/** A name that did not resolve (or not in time). `code` is the resolver's (ENOTFOUND, EAI_AGAIN, ...) or ETIMEOUT. */
export class ResolveError extends Error {
  constructor(
    message: string,
    readonly code: string,
  ) {
    super(message);
    this.name = 'ResolveError';
  }
}

export function refusedAddressMessage(host: string, address: string, verdict: AddressVerdict): string {
  return host === address ? `${address} is ${verdict.what}` : `${host} resolves to ${address}, ${verdict.what}`;
}

/** Resolves `host` within `timeoutMs`; rejects with ResolveError on failure, timeout or no address. */
export async function resolveBounded(resolver: Resolver, host: string, timeoutMs: number): Promise<string[]> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new ResolveError(`resolving ${host} took longer than ${timeoutMs} ms`, 'ETIMEOUT')), timeoutMs);
  });
  try {
    const addrs = await Promise.race([resolver(host), timeout]);
    const valid = addrs.filter((a) => net.isIP(a) !== 0);
    if (!valid.length) throw new ResolveError(`${host} has no address`, 'ENODATA');
    return valid;
  } catch (err) {
    if (err instanceof ResolveError) throw err;
    const code = String((err as { code?: string }).code ?? 'ERESOLVE');
    throw new ResolveError(`${host} could not be resolved (${code})`, code);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The addresses a URL host may be connected to: an allowed IP literal itself, or every address
 * an allowed name resolves to. Throws TargetRefusedError when the host, or any one of its
 * addresses, is not allowed (a name with one internal address among public ones is refused:
 * nothing legitimate needs that, and it is a rebinding trick), ResolveError when it does not resolve.
 */
export async function allowedAddresses(hostname: string, policy: TargetPolicy, resolver: Resolver, timeoutMs: number): Promise<string[]> {
  const hv = hostVerdict(hostname, policy);
  if (hv.kind === 'address') {
    if (!hv.verdict.allowed) throw new TargetRefusedError(refusedAddressMessage(hv.address, hv.address, hv.verdict), hv.verdict, hv.address);
    return [hv.address];
  }
  if (hv.kind === 'name' && !hv.verdict.allowed) throw new TargetRefusedError(`${hostname} is ${hv.verdict.what}`, hv.verdict, null);
  const host = hv.kind === 'resolve' ? hv.host : normalizeHost(hostname);
  const addrs = await resolveBounded(resolver, host, timeoutMs);
  for (const a of addrs) {
    const v = addressVerdict(a, policy);
    if (!v.allowed) throw new TargetRefusedError(refusedAddressMessage(host, a, v), v, a);
  }
  return addrs;
}
