// Access-code sync rules on the terminal (docs/edge-protocol.md, "down/codes"), as a pure
// decision: given what the cache holds and a message, what to do. The agent carries it out.
import type { CodesMessage } from '@locker/common';
import type { CodesMeta } from './store';

export type CodesDecision =
  | { action: 'replace' }
  | { action: 'apply' }
  | { action: 'ignore'; why: 'already-applied' | 'stale-snapshot' }
  | { action: 'requestSnapshot'; reason: 'gap' | 'epoch' };

export function decideCodes(held: Pick<CodesMeta, 'epoch' | 'version'>, msg: CodesMessage): CodesDecision {
  if (msg.type === 'snapshot') {
    // a late or redelivered snapshot of the same epoch would roll the cache back (revoked codes
    // open again); a new epoch (central database reset) always replaces
    if (held.epoch === msg.epoch && msg.version < held.version) return { action: 'ignore', why: 'stale-snapshot' };
    return { action: 'replace' };
  }
  if (held.epoch !== msg.epoch) return { action: 'requestSnapshot', reason: 'epoch' };
  if (msg.version <= held.version) return { action: 'ignore', why: 'already-applied' };
  if (msg.baseVersion === held.version) return { action: 'apply' };
  return { action: 'requestSnapshot', reason: 'gap' };
}
