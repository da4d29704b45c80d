import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['packages/*/test/**/*.test.ts', 'firmware-sim/test/**/*.test.ts'],
    globalSetup: ['./test-support/global-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: 'forks',
    poolOptions: { forks: { maxForks: 2, minForks: 1 } },
    reporters: ['default'],
    // Serial and broker tests run against real ptys, sockets and timers; on a loaded CI machine one
    // retry absorbs a scheduling hiccup. A real fault fails both tries.
    retry: process.env.CI ? 1 : 0,
  },
});
