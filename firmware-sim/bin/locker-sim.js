#!/usr/bin/env node
// locker-sim (the lock-board and scanner simulator; cli.js runs itself on import).
// Runs the build (dist/cli.js, made by `npm run build`) with plain node: production needs neither
// tsx nor the sources. Runs the TypeScript sources through tsx instead when there is
// no build (a fresh clone) or when the sources are asked for with the source condition
// (`--conditions=@locker/source` in the node options, as the tests and `npm start` set): a stale
// build never hides a source change there. Keep the four bins/*.js launchers alike.
import { existsSync } from 'node:fs';

const NAME = 'locker-sim';
const CONDITION = '@locker/source';
const built = new URL('../dist/cli.js', import.meta.url);

function wantsSources() {
  const args = [...process.execArgv, ...(process.env.NODE_OPTIONS ?? '').split(/\s+/)];
  return args.some((a, i) => a === `--conditions=${CONDITION}` || a === `-C=${CONDITION}` || ((a === '--conditions' || a === '-C') && args[i + 1] === CONDITION));
}

async function loadSources() {
  try {
    const { register } = await import('tsx/esm/api');
    register();
  } catch {
    const why = existsSync(built) ? 'the sources were asked for (--conditions=@locker/source)' : `there is no build (${built.pathname})`;
    console.error(`${NAME}: ${why} and tsx, which runs the sources, is not installed: run \`npm run build\` where the dev dependencies are, then run without the source condition`);
    process.exit(1);
  }
  // the workspace packages (@locker/*) resolve to their sources too
  const { register } = await import('node:module');
  register(`data:text/javascript,export async function resolve(s,c,n){return n(s,{...c,conditions:[...c.conditions,${JSON.stringify(CONDITION)}]})}`);
  return import(new URL('../src/cli.ts', import.meta.url).href);
}

if (!wantsSources() && existsSync(built)) await import(built.href);
else await loadSources();
