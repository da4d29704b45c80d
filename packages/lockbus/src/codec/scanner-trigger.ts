// Software trigger commands of serial (USB-CDC) scanners, spec section 5. Pure: bytes out only.
//   Honeywell: SYN T CR (16 54 0D) start, SYN U CR (16 55 0D) stop
//   Datalogic: 'T' (54) start, 'X' (58) stop
import { CodecError } from './types';

export type ScannerFamily = 'honeywell' | 'datalogic';
export type TriggerAction = 'start' | 'stop';

const TRIGGERS: Record<ScannerFamily, Record<TriggerAction, readonly number[]>> = {
  honeywell: { start: [0x16, 0x54, 0x0d], stop: [0x16, 0x55, 0x0d] },
  datalogic: { start: [0x54], stop: [0x58] },
};

export function isScannerFamily(s: string): s is ScannerFamily {
  return Object.prototype.hasOwnProperty.call(TRIGGERS, s);
}

export function encodeScannerTrigger(family: ScannerFamily, action: TriggerAction): Buffer {
  const bytes = isScannerFamily(family) ? TRIGGERS[family][action] : undefined;
  if (!bytes) throw new CodecError('UNSUPPORTED', `no ${String(action)} trigger for scanner family ${String(family)}`);
  return Buffer.from(bytes);
}
