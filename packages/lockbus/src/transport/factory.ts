// Builds a transport from a URL-ish string:
//   /dev/ttyUSB0            serial, baud from options (or the dialect default)
//   /dev/ttyUSB0?baud=19200 serial with an explicit baud rate
//   serial:///dev/ttyUSB0?baud=9600
//   tcp://10.0.0.7:4196     RS485-to-Ethernet gateway
import { LockBusError } from '../errors';
import { SerialTransport } from './serial';
import { TcpTransport } from './tcp';
import type { Transport } from './types';

export type ParsedPortUrl = { kind: 'serial'; path: string; baudRate: number | null } | { kind: 'tcp'; host: string; port: number };

export function parsePortUrl(url: string): ParsedPortUrl {
  const s = url.trim();
  if (!s) throw new LockBusError('BAD_URL', 'empty port');
  if (s.startsWith('tcp://')) {
    let u: URL;
    try {
      u = new URL(s);
    } catch {
      throw new LockBusError('BAD_URL', `bad tcp url: ${s}`);
    }
    const port = Number(u.port);
    if (!u.hostname || !Number.isInteger(port) || port <= 0 || port > 65535) throw new LockBusError('BAD_URL', `tcp url needs host and port: ${s}`);
    return { kind: 'tcp', host: u.hostname.replace(/^\[|\]$/g, ''), port };
  }
  let rest = s;
  if (rest.startsWith('serial://')) rest = rest.slice('serial://'.length);
  else if (/^[a-z][a-z0-9+.-]*:\/\//i.test(rest)) throw new LockBusError('BAD_URL', `unknown scheme in ${s}`);
  const q = rest.indexOf('?');
  const path = q >= 0 ? rest.slice(0, q) : rest;
  if (!path) throw new LockBusError('BAD_URL', `no device path in ${s}`);
  let baudRate: number | null = null;
  if (q >= 0) {
    const params = new URLSearchParams(rest.slice(q + 1));
    const b = params.get('baud') ?? params.get('baudRate');
    if (b !== null) {
      baudRate = Number(b);
      if (!Number.isInteger(baudRate) || baudRate <= 0) throw new LockBusError('BAD_URL', `bad baud rate in ${s}`);
    }
  }
  return { kind: 'serial', path, baudRate };
}

/**
 * The one baud rate of a bus: `?baud=` in the port string, else the configured baud rate, else
 * the dialect default. The port opens at it and the driver times the line (gap, wire time) by it.
 * Two different explicit values are a configuration error, not a silent pick.
 */
export function resolveBaudRate(port: string | undefined, configured: number | undefined, fallback: number): number {
  const fromUrl = port ? parsePortUrl(port) : null;
  const urlBaud = fromUrl?.kind === 'serial' ? fromUrl.baudRate : null;
  if (configured !== undefined && (!Number.isInteger(configured) || configured <= 0)) throw new LockBusError('BAD_CONFIG', `bad baud rate ${configured}`);
  if (urlBaud !== null && configured !== undefined && urlBaud !== configured) {
    throw new LockBusError('BAD_CONFIG', `port ${port} says ${urlBaud} baud but ${configured} is configured`);
  }
  return urlBaud ?? configured ?? fallback;
}

export function createTransport(url: string, opts: { baudRate?: number } = {}): Transport {
  const p = parsePortUrl(url);
  if (p.kind === 'tcp') return new TcpTransport({ host: p.host, port: p.port });
  const baudRate = p.baudRate ?? opts.baudRate;
  if (!baudRate) throw new LockBusError('BAD_URL', `no baud rate for ${url}`);
  return new SerialTransport({ path: p.path, baudRate });
}
