export type { Transport, TransportEvents } from './types';
export { SerialTransport, type SerialTransportOptions } from './serial';
export { TcpTransport, type TcpTransportOptions } from './tcp';
export { MemoryTransport } from './memory';
export { createTransport, parsePortUrl, resolveBaudRate, type ParsedPortUrl } from './factory';
