import { generic8a80 } from './generic-8a80';
import { kerong48 } from './kerong-48';
import { kerongCu16 } from './kerong-cu16';
import type { Dialect, DialectName } from './types';

export * from './types';
export { kerongCu16, CU16 } from './kerong-cu16';
export { kerong48, K48 } from './kerong-48';
export { generic8a80, G8A80 } from './generic-8a80';
export { StreamParser, sum8, xor8 } from './framing';
export { encodeScannerTrigger, isScannerFamily, type ScannerFamily, type TriggerAction } from './scanner-trigger';

export const dialects: Record<DialectName, Dialect> = {
  'kerong-cu16': kerongCu16,
  'kerong-48': kerong48,
  'generic-8a80': generic8a80,
};

export function isDialectName(s: string): s is DialectName {
  return Object.prototype.hasOwnProperty.call(dialects, s);
}
