// A late or redelivered code snapshot must not roll the terminal's cache back (src/codes.ts).
import { describe, expect, it } from 'vitest';
import type { CodesMessage } from '@locker/common';
import { decideCodes } from '../src/codes';

const snapshot = (epoch: string, version: number): CodesMessage => ({ v: 1, type: 'snapshot', epoch, version, at: '2026-01-01T00:00:00.000Z', codes: [] });

describe('code snapshots', () => {
  const held = { epoch: 'e1', version: 7 };
  it('an older snapshot of the held epoch is ignored', () => {
    expect(decideCodes(held, snapshot('e1', 6))).toEqual({ action: 'ignore', why: 'stale-snapshot' });
    expect(decideCodes(held, snapshot('e1', 0))).toEqual({ action: 'ignore', why: 'stale-snapshot' });
  });
  it('a snapshot of the held epoch with the same or a higher version replaces', () => {
    expect(decideCodes(held, snapshot('e1', 7))).toEqual({ action: 'replace' });
    expect(decideCodes(held, snapshot('e1', 8))).toEqual({ action: 'replace' });
  });
  it('a snapshot of a new epoch replaces whatever its version', () => {
    expect(decideCodes(held, snapshot('e2', 1))).toEqual({ action: 'replace' });
    expect(decideCodes({ epoch: null, version: 0 }, snapshot('e1', 3))).toEqual({ action: 'replace' });
  });
});
