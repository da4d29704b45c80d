import { defineConfig } from 'vitest/config';

// Tests run on the TypeScript sources: the source condition picks each workspace package's
// src/index.ts over its dist/ (package.json `exports`). The child processes the tests start
// (bin/*.js, tsx) get it through NODE_OPTIONS: a bin then runs the sources through tsx even when a
// build exists, so a stale dist/ never stands in for the code under test.
const SOURCE = '@locker/source';
if (!(process.env.NODE_OPTIONS ?? '').includes(`--conditions=${SOURCE}`)) {
  process.env.NODE_OPTIONS = `${process.env.NODE_OPTIONS ?? ''} --conditions=${SOURCE}`.trim();
}

// Vite's own defaults for server code follow the source condition.
const conditions = [SOURCE, 'module', 'node', 'development|production'];

export default defineConfig({
  resolve: { conditions },
  ssr: { resolve: { conditions } },
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
