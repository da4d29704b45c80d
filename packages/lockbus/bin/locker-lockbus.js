#!/usr/bin/env node
// Runs the TypeScript wiring-check CLI (packages/lockbus/src/cli.ts) through tsx, in this process.
import { register } from 'tsx/esm/api';

register();
await import(new URL('../src/cli.ts', import.meta.url).href);
