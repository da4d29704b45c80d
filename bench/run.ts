// npm run bench: runs every bench/<area>.bench.ts in one process, one after the other, and prints
// their Markdown sections; the whole report is also written to bench/last-run.md. Figures are
// ratios against baselines measured in the same run (the machines are noisy).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const dir = path.dirname(fileURLToPath(import.meta.url));
const only = process.argv.slice(2);
const files = fs
  .readdirSync(dir)
  .filter((f) => f.endsWith('.bench.ts'))
  .filter((f) => only.length === 0 || only.some((o) => f.includes(o)))
  .sort();

const out: string[] = [
  `# Benchmark run ${new Date().toISOString()}`,
  '',
  `Machine: ${os.cpus().length} x ${os.cpus()[0]?.model ?? 'cpu'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, Node ${process.version}, ${os.platform()} ${os.release()}`,
  '',
];
for (const f of files) {
  const mod = await import(pathToFileURL(path.join(dir, f)).href);
  const started = Date.now();
  console.error(`[bench] ${f} ...`);
  const res: { title: string; markdown: string } = await mod.default();
  out.push(`## ${res.title}`, '', res.markdown.trim(), '', `_(${f}, ${((Date.now() - started) / 1000).toFixed(1)} s)_`, '');
  console.log(`\n## ${res.title}\n\n${res.markdown.trim()}\n`);
}
fs.writeFileSync(path.join(dir, 'last-run.md'), out.join('\n'));
console.error(`[bench] report written to bench/last-run.md`);
process.exit(0);
