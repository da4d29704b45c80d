#!/usr/bin/env node
// Runs the TypeScript CLI (firmware-sim/src/cli.ts) through tsx, in this same process.
import { register } from 'tsx/esm/api';

register();
await import(new URL('../src/cli.ts', import.meta.url).href);
