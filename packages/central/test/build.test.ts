// The build (issue 13 item 1): `npm run build` (scripts/build.mjs) into a temp dir laid out as a
// production install: each package's package.json, bin/ and non-source files with its dist/ (no
// src/), and a node_modules holding only what the lock file installs without dev dependencies
// (`npm ci --omit=dev`), the workspace packages linked to their built copies. tsx is a dev
// dependency, so it is not there, and there are no TypeScript sources to run: the bins can only
// run the build, with plain node (NODE_OPTIONS cleared, so no loader and no source condition).
// Each CLI answers --help; the central service provisions the demo site into a SQLite file (the
// database driver, the migrations, the provisioning file beside dist/); locker-lockbus reaches the
// serial port binding. Asked for the sources (the source condition) without tsx, a bin says so in
// one line.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const SKIP = new Set(['src', 'test', 'dist', 'node_modules', 'scripts']);

interface LockEntry {
  dev?: boolean;
  devOptional?: boolean;
  link?: boolean;
  resolved?: string;
}

let out = '';

/** Links each package the lock installs without dev dependencies, at the same place under `to`. */
function productionNodeModules(to: string) {
  const lock = JSON.parse(fs.readFileSync(path.join(ROOT, 'package-lock.json'), 'utf8')) as { packages: Record<string, LockEntry> };
  for (const [where, e] of Object.entries(lock.packages)) {
    if (!where.includes('node_modules/') || e.dev || e.devOptional) continue;
    // nested ones (a/node_modules/b) come with their parent's link
    const parts = where.split('node_modules/');
    if (parts.length > 2) continue;
    const dest = path.join(to, where);
    fs.mkdirSync(path.dirname(dest), { recursive: true });
    if (e.link) fs.symlinkSync(path.join(to, e.resolved!), dest, 'dir');
    else if (fs.existsSync(path.join(ROOT, where))) fs.symlinkSync(path.join(ROOT, where), dest, 'dir'); // other platforms' optional packages are absent
  }
}

function runBuilt(rel: string, args: string[], extraEnv: Record<string, string> = {}) {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('LOCKER_') && k !== 'NODE_OPTIONS' && k !== 'NODE_PATH') env[k] = v;
  const r = spawnSync(process.execPath, [path.join(out, rel), ...args], { cwd: out, env: { ...env, ...extraEnv }, encoding: 'utf8', timeout: 60_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('npm run build: the CLIs run from the build with production dependencies only', () => {
  beforeAll(() => {
    out = fs.mkdtempSync(path.join(os.tmpdir(), 'locker-build-'));
    const b = spawnSync(process.execPath, [path.join(ROOT, 'scripts/build.mjs'), '--out', out], { cwd: ROOT, encoding: 'utf8', timeout: 120_000 });
    expect(b.stderr).toBe('');
    expect(b.status).toBe(0);
    const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { workspaces: string[] };
    fs.copyFileSync(path.join(ROOT, 'package.json'), path.join(out, 'package.json'));
    for (const pattern of pkg.workspaces) {
      const dirs = pattern.endsWith('/*') ? fs.readdirSync(path.join(ROOT, pattern.slice(0, -2))).map((d) => `${pattern.slice(0, -2)}/${d}`) : [pattern];
      for (const dir of dirs) {
        if (!fs.existsSync(path.join(ROOT, dir, 'package.json'))) continue;
        for (const e of fs.readdirSync(path.join(ROOT, dir))) {
          if (!SKIP.has(e)) fs.cpSync(path.join(ROOT, dir, e), path.join(out, dir, e), { recursive: true });
        }
      }
    }
    productionNodeModules(out);
  }, 120_000);
  afterAll(() => {
    if (out) fs.rmSync(out, { recursive: true, force: true });
  });

  it('the layout: dist/ mirrors src/ with its assets, no sources, no tsx, no dev dependencies', () => {
    expect(fs.existsSync(path.join(out, 'packages/central/dist/cli.js'))).toBe(true);
    expect(fs.existsSync(path.join(out, 'packages/central/dist/accounts/suggestions/workbook-worker.mjs'))).toBe(true);
    expect(fs.existsSync(path.join(out, 'packages/central/dist/accounts/suggestions/sheet-rows.mjs'))).toBe(true);
    expect(fs.existsSync(path.join(out, 'packages/central/dist/db/checkpoint-worker.mjs'))).toBe(true);
    expect(fs.existsSync(path.join(out, 'packages/central/dist/db/read-worker.mjs'))).toBe(true);
    expect(fs.existsSync(path.join(out, 'packages/central/provisioning/demo-site.yaml'))).toBe(true);
    for (const d of ['packages/agent', 'packages/common', 'packages/lockbus', 'firmware-sim']) expect(fs.existsSync(path.join(out, d, 'dist/index.js'))).toBe(true);
    expect(fs.existsSync(path.join(out, 'packages/central/src'))).toBe(false);
    for (const dev of ['tsx', 'typescript', 'vitest', 'esbuild']) expect(fs.existsSync(path.join(out, 'node_modules', dev))).toBe(false);
    expect(fs.existsSync(path.join(out, 'node_modules/fastify'))).toBe(true);
    expect(fs.realpathSync(path.join(out, 'node_modules/@locker/common'))).toBe(fs.realpathSync(path.join(out, 'packages/common')));
    // the built imports carry their extensions (Node's ESM loader needs them)
    expect(fs.readFileSync(path.join(out, 'packages/central/dist/cli.js'), 'utf8')).toMatch(/from "\.\/config\.js"/);
  });

  it.each([
    ['packages/central/bin/locker-central.js', /locker-central serve/],
    ['packages/agent/bin/locker-agent.js', /locker-agent/],
    ['packages/lockbus/bin/locker-lockbus.js', /locker-lockbus scan/],
    ['firmware-sim/bin/locker-sim.js', /Usage: locker-sim/],
  ])('node %s --help from the build: exit 0', (bin, usage) => {
    const r = runBuilt(bin, ['--help']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(usage);
  });

  it('locker-central provisions the demo site from the build (SQLite, migrations, the provisioning file)', () => {
    const db = path.join(out, 'central.db');
    const r = runBuilt('packages/central/bin/locker-central.js', ['provision', 'packages/central/provisioning/demo-site.yaml'], { LOCKER_DATABASE_URL: db });
    expect(r.stderr).not.toMatch(/\n\s+at /);
    expect(r.code).toBe(0);
    expect(fs.existsSync(db)).toBe(true);
  });

  it('the WAL checkpoint thread runs from the build (its worker file beside the built module)', () => {
    const script = path.join(out, 'checkpoint-probe.mjs');
    fs.writeFileSync(
      script,
      `import { openDatabase } from './packages/central/dist/db/database.js';
const failures = [];
const db = await openDatabase({ url: process.argv[2], onCheckpointerFailure: (e) => failures.push(e.message) });
await db.kysely.schema.createTable('t').addColumn('v', 'text').execute();
const r = await db.walCheckpointer.checkpoint();
await db.close();
console.log(JSON.stringify({ r, failures }));`,
    );
    const r = runBuilt('checkpoint-probe.mjs', [path.join(out, 'probe.db')]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const { r: result, failures } = JSON.parse(r.stdout) as { r: { log: number; checkpointed: number } | null; failures: string[] };
    expect(failures).toEqual([]);
    expect(result).not.toBeNull();
    expect(result!.checkpointed).toBe(result!.log);
  });

  it('a SQLite read thread runs from the build (its worker file beside the built module)', () => {
    const script = path.join(out, 'read-probe.mjs');
    fs.writeFileSync(
      script,
      `import { openDatabase } from './packages/central/dist/db/database.js';
const lost = [];
const db = await openDatabase({ url: process.argv[2], sqliteReadThreads: 1, onReadThreadLost: (e) => lost.push(e.message) });
await db.kysely.schema.createTable('t').addColumn('v', 'text').execute();
await db.kysely.insertInto('t').values([{ v: 'a' }, { v: 'b' }, { v: 'c' }]).execute();
const r = await db.readPool.page({ key: 'k', count: 'select count(*) from t', page: 'select v from t order by v limit ? offset ?', params: [], offset: 1, size: 5 });
const stats = db.readPool.stats;
await db.close();
console.log(JSON.stringify({ r, lost, stats }));`,
    );
    const r = runBuilt('read-probe.mjs', [path.join(out, 'read-probe.db')]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const { r: result, lost, stats } = JSON.parse(r.stdout) as { r: { total: number; rows: string[] }; lost: string[]; stats: { reads: number } };
    expect(lost).toEqual([]);
    expect(result).toMatchObject({ total: 3, rows: ['b', 'c'] });
    expect(stats.reads).toBe(1);
  });

  it('locker-lockbus from the build reaches the serial binding: a missing port is exit 1, PORT_OPEN_FAILED', () => {
    const r = runBuilt('packages/lockbus/bin/locker-lockbus.js', ['scan', '--port', '/dev/does-not-exist-lockbus', '--dialect', 'kerong-cu16', '--boards', '0']);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain('PORT_OPEN_FAILED');
  });

  it('asked for the sources (the source condition) where tsx is missing: one line, exit 1', () => {
    const r = runBuilt('packages/agent/bin/locker-agent.js', ['--help'], { NODE_OPTIONS: '--conditions=@locker/source' });
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/^locker-agent: .*tsx.*npm run build/);
  });
});
