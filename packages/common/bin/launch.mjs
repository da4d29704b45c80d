// The launcher behind every bin (locker-central, locker-agent, locker-lockbus, locker-sim): runs the
// build (dist/cli.js, made by `npm run build`) with plain node, so production needs neither tsx nor
// the sources; runs the TypeScript sources through tsx instead when there is no build (a fresh
// clone) or when the sources are asked for with the source condition (`--conditions=@locker/source`
// in the node options, as the tests and `npm start` set): a stale build never hides a source change.
// Plain JavaScript, not built: it is what starts the build.
import { existsSync } from 'node:fs';

const CONDITION = '@locker/source';

function wantsSources() {
  const args = [...process.execArgv, ...(process.env.NODE_OPTIONS ?? '').split(/\s+/)];
  return args.some((a, i) => a === `--conditions=${CONDITION}` || a === `-C=${CONDITION}` || ((a === '--conditions' || a === '-C') && args[i + 1] === CONDITION));
}

async function loadSources(name, built, source) {
  try {
    const { register } = await import('tsx/esm/api');
    register();
  } catch {
    const why = existsSync(built) ? 'the sources were asked for (--conditions=@locker/source)' : `there is no build (${built.pathname})`;
    console.error(`${name}: ${why} and tsx, which runs the sources, is not installed: run \`npm run build\` where the dev dependencies are, then run without the source condition`);
    process.exit(1);
  }
  // the workspace packages (@locker/*) resolve to their sources too
  const { register } = await import('node:module');
  register(`data:text/javascript,export async function resolve(s,c,n){return n(s,{...c,conditions:[...c.conditions,${JSON.stringify(CONDITION)}]})}`);
  return import(source.href);
}

/**
 * Starts a CLI. `binUrl`: the bin's import.meta.url (its package holds dist/cli.js and src/cli.ts).
 * `callMain`: the CLI exports main(argv) to call; otherwise the module runs itself when imported.
 */
export async function launch(name, binUrl, { callMain = true } = {}) {
  const built = new URL('../dist/cli.js', binUrl);
  const source = new URL('../src/cli.ts', binUrl);
  const mod = !wantsSources() && existsSync(built) ? await import(built.href) : await loadSources(name, built, source);
  if (callMain) await mod.main(process.argv.slice(2));
}
