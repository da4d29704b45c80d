// npm run bench: runs every bench/<area>.bench.ts, one after the other, each in a fresh child
// process of its own, and prints their Markdown sections; the whole report is also written to
// bench/last-run.md. Figures are ratios against baselines measured in the same run (the machines
// are noisy).
//
// One process per area: an area's servers run in the bench's own process, so in one shared process
// an area was measured on the heap, the JIT state and whatever timers and sockets the areas before
// it left behind (the twenty-seventh session saw PostgreSQL's GetShipments p99 at 53 / 61 ms in the
// full bench against 22-49 ms in area runs). Now every area starts as it does when run alone.
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

interface AreaResult {
  title: string;
  markdown: string;
}

const dir = path.dirname(fileURLToPath(import.meta.url));
const child = process.env.BENCH_AREA_CHILD;

if (child) {
  // the child: run one area, hand its result back through a file, and exit (an area that leaves a
  // handle open must not hold the run up)
  const mod = await import(pathToFileURL(path.join(dir, child)).href);
  const res: AreaResult = await mod.default();
  fs.writeFileSync(process.env.BENCH_AREA_OUT!, JSON.stringify({ title: res.title, markdown: res.markdown }));
  process.exit(0);
}

const only = process.argv.slice(2);
const files = fs
  .readdirSync(dir)
  .filter((f) => f.endsWith('.bench.ts'))
  .filter((f) => only.length === 0 || only.some((o) => f.includes(o)))
  .sort();

/**
 * The area's process while one runs, in a process group of its own with whatever it starts
 * (central services, the fleet simulator, Mosquitto, load generators, pgbench): a SIGTERM or
 * SIGINT of the run goes to that whole group, and the run ends when the area has (at most 10 s).
 */
let running: ChildProcess | null = null;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    const code = signal === 'SIGINT' ? 130 : 143;
    const p = running;
    if (!p?.pid) process.exit(code);
    try {
      process.kill(-p.pid, signal);
    } catch {
      // the group is gone already
    }
    p.once('exit', () => process.exit(code));
    setTimeout(() => {
      try {
        process.kill(-p.pid!, 'SIGKILL');
      } catch {
        // gone
      }
      process.exit(code);
    }, 10_000).unref();
  });
}

/** One area in a child process with this process's loader flags (tsx, --conditions). */
function runArea(file: string): Promise<AreaResult> {
  const out = path.join(os.tmpdir(), `locker-bench-${process.pid}-${file}.json`);
  fs.rmSync(out, { force: true });
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [...process.execArgv, fileURLToPath(import.meta.url)], {
      env: { ...process.env, BENCH_AREA_CHILD: file, BENCH_AREA_OUT: out },
      stdio: ['ignore', 'inherit', 'inherit'],
      detached: true,
    });
    running = p;
    p.on('error', reject);
    p.on('exit', (code, signal) => {
      running = null;
      let res: AreaResult | undefined;
      try {
        res = JSON.parse(fs.readFileSync(out, 'utf8')) as AreaResult;
      } catch {
        // no result: reported below
      }
      fs.rmSync(out, { force: true });
      if (code === 0 && res) resolve(res);
      else reject(new Error(`bench area ${file} failed (exit ${code ?? signal}${res ? '' : ', no result'})`));
    });
  });
}

const out: string[] = [
  `# Benchmark run ${new Date().toISOString()}`,
  '',
  `Machine: ${os.cpus().length} x ${os.cpus()[0]?.model ?? 'cpu'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, Node ${process.version}, ${os.platform()} ${os.release()}`,
  '',
];
for (const f of files) {
  const started = Date.now();
  console.error(`[bench] ${f} ...`);
  const res = await runArea(f);
  out.push(`## ${res.title}`, '', res.markdown.trim(), '', `_(${f}, ${((Date.now() - started) / 1000).toFixed(1)} s)_`, '');
  console.log(`\n## ${res.title}\n\n${res.markdown.trim()}\n`);
}
fs.writeFileSync(path.join(dir, 'last-run.md'), out.join('\n'));
console.error(`[bench] report written to bench/last-run.md`);
process.exit(0);
