import type { DialectName } from '@locker/lockbus';
import type { Logger } from 'pino';

export type Polarity = 'closed-high' | 'closed-low';
export type ScannerSuffix = '\r' | '\n' | '\r\n' | '';

export type BusLink = { kind: 'pty'; path?: string } | { kind: 'tcp'; port?: number; host?: string };

export interface BoardOptions {
  address: number;
  /** Number of locks; default: the dialect's locksPerBoard. */
  locks?: number;
}

export interface BusOptions {
  name: string;
  link: BusLink;
  dialect: DialectName;
  /** Default: the dialect's default baud rate. */
  baudRate?: number;
  /** How a lock bit reads when the latch is engaged. Default 'closed-high' (bit 1 = closed). */
  polarity?: Polarity;
  boards: BoardOptions[];
  /** Doors close by themselves this long after opening; null/undefined = only when told. */
  autoCloseMs?: number | null;
  /** Board turnaround between the end of a request and the start of its reply, in ms. Default 1. */
  turnaroundMs?: number;
}

export interface ScannerOptions {
  name: string;
  link: { kind: 'pty'; path?: string };
  /** Suffix sent after each code. Default '\r' (Honeywell factory setting). */
  suffix?: ScannerSuffix;
  /** Pause between chunks of a chunked scan, and between keypad keystrokes, in ms. Default 15. */
  chunkGapMs?: number;
}

export interface SimulatorOptions {
  buses: BusOptions[];
  scanners?: ScannerOptions[];
  /** Default true: bytes are paced at the configured baud rate (10 bits a byte, 8N1). */
  realTiming?: boolean;
  /** Where pty links without an explicit path go. Default: a fresh temporary directory. */
  dir?: string;
  /** Parent logger; the simulator logs under `sim.bus.<name>` / `sim.scanner.<name>`. Default silent. */
  logger?: Logger;
}

export interface FrameEvent {
  bus: string;
  dir: 'rx' | 'tx';
  hex: string;
  meaning: string;
}

export interface DoorChangeEvent {
  bus: string;
  board: number;
  lock: number;
  event: string;
  state: { latched: boolean; doorOpen: boolean; item: boolean };
}
