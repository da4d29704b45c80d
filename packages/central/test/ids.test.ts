import { describe, expect, it } from 'vitest';
import { newSeqUid, newUid, randomBytes } from '../src/ids';

describe('uids', () => {
  it('newUid: 32 lower-case hex characters, no repeats over several pool refills', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 5000; i++) seen.add(newUid()); // 5000 x 16 bytes = about 20 refills of the 4 KiB pool
    expect(seen.size).toBe(5000);
    for (const u of [...seen].slice(0, 50)) expect(u).toMatch(/^[0-9a-f]{32}$/);
  });

  it('newSeqUid: 32 hex, sorts by its millisecond (a later one sorts after), random below it', () => {
    const a = newSeqUid(Date.parse('2026-01-01T00:00:00.000Z'));
    const b = newSeqUid(Date.parse('2026-01-01T00:00:00.001Z'));
    expect(a).toMatch(/^[0-9a-f]{32}$/);
    expect(a < b).toBe(true);
    expect(a.slice(0, 12)).toBe(Date.parse('2026-01-01T00:00:00.000Z').toString(16).padStart(12, '0'));
    const same = new Set(Array.from({ length: 1000 }, () => newSeqUid(1_700_000_000_000)));
    expect(same.size).toBe(1000); // 80 random bits below the same millisecond
  });

  it('randomBytes hands out each pooled byte once (copies, the pool slice is wiped)', () => {
    const x = randomBytes(32);
    const copy = Buffer.from(x);
    const y = randomBytes(32);
    expect(x.equals(copy)).toBe(true); // a later draw does not change an earlier one
    expect(x.equals(y)).toBe(false);
    expect(randomBytes(5000).length).toBe(5000); // larger than the pool: straight from crypto
  });
});
