#!/usr/bin/env node
// `npm run build`: compiles every workspace package's TypeScript (src/**/*.ts) to JavaScript in its
// dist/, one output file per source file at the same relative path (dist/ mirrors src/), so
// relative file URLs (`new URL('./workbook-worker.mjs', import.meta.url)`, `../package.json`,
// `../provisioning/...`) mean the same from the build as from the sources. Non-TypeScript files
// under src/ (e.g. the .mjs workers of the suggestion upload) are copied beside them.
//
// esbuild, not tsc (docs/dependencies.md "Build"): our imports are extensionless (moduleResolution
// Bundler), which tsc would emit as they are and Node's ESM loader refuses; here each relative
// import is resolved at build time and written with its .js extension. Nothing is bundled: every
// import stays an import (package imports such as `@locker/common` resolve at run time through the
// package's `exports`, i.e. its dist/). Types are checked by `npm run typecheck` (tsc --noEmit).
//
//   node scripts/build.mjs [--out DIR] [--clean] [PACKAGE_DIR...]
//
// --out DIR writes DIR/<package dir>/dist instead of <package dir>/dist (a test builds into a temp
// dir this way); --clean removes each dist first. Without package dirs: every workspace.
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** The workspace package dirs (relative to the root) that have TypeScript sources. */
export function workspacePackages() {
  const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
  const dirs = [];
  for (const pattern of pkg.workspaces) {
    if (pattern.endsWith('/*')) {
      const parent = pattern.slice(0, -2);
      for (const d of fs.readdirSync(path.join(ROOT, parent)).sort()) dirs.push(`${parent}/${d}`);
    } else dirs.push(pattern);
  }
  return dirs.filter((d) => fs.existsSync(path.join(ROOT, d, 'package.json')) && fs.existsSync(path.join(ROOT, d, 'src')));
}

function walk(dir) {
  const out = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...walk(p));
    else out.push(p);
  }
  return out;
}

const isDeclaration = (f) => /\.d\.[cm]?ts$/.test(f);
const isSource = (f) => /\.[cm]?ts$/.test(f) && !isDeclaration(f);

/** esbuild plugin: every import stays external; a relative one to a .ts file gets the output's .js name. */
function rewriteImports(srcDir) {
  return {
    name: 'rewrite-relative-imports',
    setup(build) {
      build.onResolve({ filter: /.*/ }, (args) => {
        if (args.kind === 'entry-point') return undefined;
        if (!args.path.startsWith('.')) return { path: args.path, external: true };
        const abs = path.resolve(args.resolveDir, args.path);
        const candidates = [
          [abs, args.path],
          [`${abs}.ts`, `${args.path}.js`],
          [path.join(abs, 'index.ts'), `${args.path.replace(/\/$/, '')}/index.js`],
        ];
        for (const [file, spec] of candidates) {
          if (!fs.existsSync(file) || !fs.statSync(file).isFile()) continue;
          if (!file.startsWith(srcDir + path.sep)) return { errors: [{ text: `${args.path} is outside ${srcDir}: the build only compiles src/` }] };
          if (/\.ts$/.test(file) && !isDeclaration(file)) return { path: spec.replace(/\.ts$/, '.js'), external: true };
          return { path: spec, external: true };
        }
        return { errors: [{ text: `cannot resolve ${args.path} from ${args.importer}` }] };
      });
    },
  };
}

export async function buildPackage(pkgDir, outRoot = ROOT, { clean = false } = {}) {
  const srcDir = path.join(ROOT, pkgDir, 'src');
  const distDir = path.join(outRoot, pkgDir, 'dist');
  if (clean) fs.rmSync(distDir, { recursive: true, force: true });
  const files = walk(srcDir);
  const entryPoints = files.filter(isSource);
  await esbuild.build({
    absWorkingDir: ROOT,
    entryPoints,
    outbase: srcDir,
    outdir: distDir,
    bundle: true, // only so that the plugin sees every import; each one is external
    plugins: [rewriteImports(srcDir)],
    format: 'esm',
    platform: 'node',
    target: 'node20',
    sourcemap: 'linked',
    sourcesContent: false,
    logLevel: 'warning',
  });
  // assets: every non-TypeScript file under src/ (workers, templates), at the same relative path
  for (const f of files) {
    if (isSource(f) || isDeclaration(f)) continue;
    const to = path.join(distDir, path.relative(srcDir, f));
    fs.mkdirSync(path.dirname(to), { recursive: true });
    fs.copyFileSync(f, to);
  }
  return { pkgDir, distDir, files: entryPoints.length };
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const { values, positionals } = parseArgs({ options: { out: { type: 'string' }, clean: { type: 'boolean' } }, allowPositionals: true });
  const outRoot = values.out ? path.resolve(values.out) : ROOT;
  const dirs = positionals.length ? positionals : workspacePackages();
  const t0 = Date.now();
  for (const d of dirs) {
    const r = await buildPackage(d, outRoot, { clean: values.clean });
    console.log(`built ${d}: ${r.files} files -> ${path.relative(process.cwd(), r.distDir) || '.'}`);
  }
  console.log(`build done in ${Date.now() - t0} ms`);
}
