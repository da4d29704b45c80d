// Retry delay after the n-th failed attempt (n >= 1): exponential, capped, with "equal jitter":
// the delay lies in [d/2, d] with d = min(max, initial * 2^(n-1)). Because the next d doubles,
// delays never shrink from one attempt to the next until the cap is reached.
export function backoffMs(failedAttempts: number, initialMs: number, maxMs: number, random: () => number = Math.random): number {
  const n = Math.max(1, Math.floor(failedAttempts));
  const d = Math.min(maxMs, initialMs * 2 ** Math.min(n - 1, 52));
  const r = Math.min(1, Math.max(0, random()));
  return Math.round(d / 2 + (r * d) / 2);
}
