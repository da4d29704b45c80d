// Which network addresses the service may send requests to on a tenant's behalf (callback
// targets): public internet addresses only, unless the operator allows private networks for
// on-premises receivers. Address classification is ipaddr.js's (IANA special-purpose registries);
// the spellings of an address (127.1, 2130706433, 0x7f000001, 0177.0.0.1, trailing dots, IDN
// digits) are normalized by the WHATWG URL parser before they get here, and resolved addresses
// come from the resolver in their canonical form.
//
// Three classes:
// - public: IPv4 global unicast; IPv6 global unicast (2000::/3) that is not a transition form
// - private: loopback, RFC 1918, CGNAT 100.64/10, IPv6 loopback and unique-local fc00::/7; and
//   the IPv4-mapped IPv6 forms of these. Allowed only with `allowPrivateNetworks`
// - never: unspecified, broadcast, multicast, link-local (169.254/16 holds the cloud metadata
//   services; fe80::/10), reserved and documentation ranges, benchmarking, IPv6 transition forms
//   that embed an IPv4 address (IPv4-compatible ::/96, NAT64 64:ff9b::/96 and 64:ff9b:1::/48,
//   6to4 2002::/16, Teredo 2001::/32, SIIT), cloud metadata addresses outside link-local
//   (Alibaba 100.100.100.200, AWS fd00:ec2::254) and cloud metadata host names.
import net from 'node:net';
import ipaddr from 'ipaddr.js';

export interface TargetPolicy {
  /** loopback, RFC 1918, CGNAT and unique-local targets are allowed (on-premises receivers) */
  allowPrivateNetworks: boolean;
}

export type AddressClass = 'public' | 'private' | 'never';

export interface AddressVerdict {
  allowed: boolean;
  cls: AddressClass;
  /** what the address is, for messages: "a loopback address", "a private (RFC 1918) address", ... */
  what: string;
}

/** Cloud instance metadata services reachable by address (besides 169.254.0.0/16, which is refused as link-local). */
const METADATA_ADDRESSES = new Set(['100.100.100.200', 'fd00:ec2::254', 'fd00:ec2::23'].map((a) => ipaddr.parse(a).toString()));

/** Cloud instance metadata services by name (compared without trailing dots, lower case). */
export const METADATA_HOSTNAMES: readonly string[] = [
  'metadata',
  'metadata.google.internal',
  'metadata.goog',
  'instance-data',
  'instance-data.ec2.internal',
  'metadata.tencentyun.com',
  'metadata.platformequinix.com',
  'metadata.packet.net',
];

const LOOPBACK_HOSTNAMES = new Set(['localhost', 'localhost.localdomain', 'ip6-localhost', 'ip6-loopback']);

const V4_WHAT: Record<string, [AddressClass, string]> = {
  unicast: ['public', 'a public address'],
  loopback: ['private', 'a loopback address'],
  private: ['private', 'a private (RFC 1918) address'],
  carrierGradeNat: ['private', 'a carrier-grade NAT (100.64.0.0/10) address'],
  unspecified: ['never', 'the unspecified address'],
  broadcast: ['never', 'the broadcast address'],
  multicast: ['never', 'a multicast address'],
  linkLocal: ['never', 'a link-local address (cloud metadata range)'],
};

const V6_WHAT: Record<string, [AddressClass, string]> = {
  unicast: ['public', 'a public address'],
  loopback: ['private', 'a loopback address'],
  uniqueLocal: ['private', 'a unique-local (fc00::/7) address'],
  unspecified: ['never', 'the unspecified address'],
  multicast: ['never', 'a multicast address'],
  linkLocal: ['never', 'a link-local address'],
  rfc6052: ['never', 'a NAT64 address (embeds an IPv4 address)'],
  rfc6145: ['never', 'an IPv4-translated (SIIT) address'],
  '6to4': ['never', 'a 6to4 address (embeds an IPv4 address)'],
  teredo: ['never', 'a Teredo address (embeds an IPv4 address)'],
};

const GLOBAL_UNICAST_V6 = ipaddr.parseCIDR('2000::/3');

/** Classifies an IP address (dotted IPv4 or IPv6, without brackets). Anything else is 'never'. */
export function classifyAddress(ip: string): Omit<AddressVerdict, 'allowed'> {
  if (net.isIP(ip) === 0) return { cls: 'never', what: 'not an IP address' };
  const addr = ipaddr.parse(ip);
  if (METADATA_ADDRESSES.has(addr.toString())) return { cls: 'never', what: 'a cloud metadata address' };
  if (addr.kind() === 'ipv4') {
    const [cls, what] = V4_WHAT[addr.range()] ?? ['never', `a reserved address (${addr.range()})`];
    return { cls, what };
  }
  const v6 = addr as ipaddr.IPv6;
  if (v6.isIPv4MappedAddress()) {
    const inner = classifyAddress(v6.toIPv4Address().toString());
    return { cls: inner.cls, what: `the IPv4-mapped form of ${inner.what}` };
  }
  // IPv4-compatible ::a.b.c.d (deprecated; ipaddr.js calls it unicast). :: and ::1 have ranges of their own.
  const range = v6.range();
  if (range === 'unicast' && v6.parts.slice(0, 6).every((p) => p === 0)) return { cls: 'never', what: 'an IPv4-compatible IPv6 address' };
  if (range === 'unicast' && !v6.match(GLOBAL_UNICAST_V6)) return { cls: 'never', what: 'an unassigned IPv6 address (outside 2000::/3)' };
  const [cls, what] = V6_WHAT[range] ?? ['never', `a reserved address (${range})`];
  return { cls, what };
}

export function addressVerdict(ip: string, policy: TargetPolicy): AddressVerdict {
  const c = classifyAddress(ip);
  return { ...c, allowed: c.cls === 'public' || (c.cls === 'private' && policy.allowPrivateNetworks) };
}

/** A host name without trailing dots, in lower case; an IPv6 literal without brackets. */
export function normalizeHost(hostname: string): string {
  let h = hostname.toLowerCase();
  if (h.startsWith('[') && h.endsWith(']')) h = h.slice(1, -1);
  while (h.endsWith('.')) h = h.slice(0, -1);
  return h;
}

export function isMetadataHostname(host: string): boolean {
  const h = normalizeHost(host);
  return METADATA_HOSTNAMES.some((m) => h === m || h.endsWith(`.${m}`));
}

export type HostVerdict =
  /** an IP literal, decided */
  | { kind: 'address'; verdict: AddressVerdict; address: string }
  /** a name decided without DNS (metadata or loopback names) */
  | { kind: 'name'; verdict: AddressVerdict }
  /** a name whose addresses decide */
  | { kind: 'resolve'; host: string };

/**
 * What can be said about a URL's host before DNS: IP literals are classified, cloud metadata
 * names are refused always, localhost names are loopback; other names need resolving.
 */
export function hostVerdict(hostname: string, policy: TargetPolicy): HostVerdict {
  const h = normalizeHost(hostname);
  if (net.isIP(h) !== 0) return { kind: 'address', verdict: addressVerdict(h, policy), address: h };
  if (isMetadataHostname(h)) return { kind: 'name', verdict: { allowed: false, cls: 'never', what: 'a cloud metadata host name' } };
  if (LOOPBACK_HOSTNAMES.has(h) || h.endsWith('.localhost')) {
    return { kind: 'name', verdict: { allowed: policy.allowPrivateNetworks, cls: 'private', what: 'a loopback host name' } };
  }
  return { kind: 'resolve', host: h };
}
