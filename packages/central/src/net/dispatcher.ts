// An undici dispatcher that only connects to allowed targets (net/address.ts), checked at connect
// time on the address the socket actually connects to: a host name is resolved by our own lookup
// (the socket's `lookup` option), which refuses the connection when any address is not allowed,
// before the socket connects; an IP literal (no lookup happens for those) is checked before the
// connector is called; and the connected socket's remote address is checked once more. Every new
// connection is checked, so a name that resolved to a public address when it was registered and
// resolves to 127.0.0.1 now (DNS rebinding) is refused. It never follows redirects (undici does
// not unless asked to).
import type dns from 'node:dns';
import net from 'node:net';
import { Agent, buildConnector } from 'undici';
import { addressVerdict, hostVerdict, type TargetPolicy } from './address';
import { allowedAddresses, refusedAddressMessage, TargetRefusedError, type Resolver } from './resolve';

export interface GuardedAgentOptions {
  policy: TargetPolicy;
  /** the resolver, asked on every new connection (a function so tests may swap it) */
  resolver: () => Resolver;
  /** bound of one name resolution */
  resolveTimeoutMs: number;
  /** bound of one TCP (and TLS) connect */
  connectTimeoutMs: number;
  /** idle keep-alive connections are closed after this long (a new connection is checked again) */
  keepAliveTimeoutMs?: number;
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | dns.LookupAddress[], family?: number) => void;

/** A `lookup` for net.connect / tls.connect that only answers allowed addresses. */
export function guardedLookup(opts: Pick<GuardedAgentOptions, 'policy' | 'resolver' | 'resolveTimeoutMs'>) {
  return (hostname: string, options: dns.LookupOptions, callback: LookupCallback): void => {
    allowedAddresses(hostname, opts.policy, opts.resolver(), opts.resolveTimeoutMs).then(
      (addrs) => {
        const family = options.family === 4 || options.family === 'IPv4' ? 4 : options.family === 6 || options.family === 'IPv6' ? 6 : 0;
        const list = addrs.map((address) => ({ address, family: net.isIP(address) })).filter((a) => family === 0 || a.family === family);
        if (!list.length) {
          const err: NodeJS.ErrnoException = new Error(`${hostname} has no IPv${family} address`);
          err.code = 'ENOTFOUND';
          callback(err, '');
          return;
        }
        if (options.all) callback(null, list);
        else callback(null, list[0]!.address, list[0]!.family);
      },
      (err: NodeJS.ErrnoException) => callback(err, ''),
    );
  };
}

/** The connector of the guarded agent (exported for tests). */
export function guardedConnector(opts: GuardedAgentOptions): buildConnector.connector {
  const base = buildConnector({ timeout: opts.connectTimeoutMs, lookup: guardedLookup(opts) } as buildConnector.BuildOptions);
  return (options, callback) => {
    const hv = hostVerdict(options.hostname, opts.policy);
    if (hv.kind === 'address' && !hv.verdict.allowed) {
      callback(new TargetRefusedError(refusedAddressMessage(hv.address, hv.address, hv.verdict), hv.verdict, hv.address), null);
      return;
    }
    base(options, (err, socket) => {
      if (err || !socket) {
        callback(err ?? new Error('connect failed'), null);
        return;
      }
      // Belt and braces: the peer the socket is connected to.
      const remote = socket.remoteAddress;
      const v = remote ? addressVerdict(remote, opts.policy) : null;
      if (!remote || !v!.allowed) {
        socket.destroy();
        const verdict = v ?? { allowed: false, cls: 'never' as const, what: 'an unknown address' };
        callback(new TargetRefusedError(refusedAddressMessage(options.hostname, remote ?? '(none)', verdict), verdict, remote ?? null), null);
        return;
      }
      callback(null, socket);
    });
  };
}

/** An undici Agent that connects only to allowed targets (see the header). Pass as `dispatcher`. */
export function createGuardedAgent(opts: GuardedAgentOptions): Agent {
  return new Agent({
    connect: guardedConnector(opts),
    // idle connections are reused at most this long, whatever the server's Keep-Alive hint says
    keepAliveTimeout: opts.keepAliveTimeoutMs ?? 4_000,
    keepAliveMaxTimeout: opts.keepAliveTimeoutMs ?? 4_000,
    // undici follows no redirects without a redirect interceptor; fetch is called with redirect: 'manual' as well
  });
}
