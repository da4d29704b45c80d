// Summarises `perf script` output of a Node process (recorded with `perf record -g`, the process
// started with NODE_OPTIONS=--perf-basic-prof so JIT frames have names) as microseconds per request:
// on-CPU time including the kernel's, which V8's own sampling profiler attributes by wall clock.
// Not part of `npm run bench`. Typical use, with bench/profile-endpoint.ts:
//
//   NODE_OPTIONS=--perf-basic-prof BENCH_PROFILE_PERF=1 BENCH_PROFILE_SECONDS=12 npx tsx --conditions=@locker/source bench/profile-endpoint.ts GetLockers &
//   perf record -F 1999 -g -p <the pid it prints> -o /tmp/p.data -- sleep 8
//   perf script -i /tmp/p.data > /tmp/p.txt
//   node bench/perf-report.mjs /tmp/p.txt --us 58                  # the CPU us per request it printed
//   node bench/perf-report.mjs /tmp/p.txt --us 58 --under JS_all   # what the frames under one frame do
//
// Prints the innermost JavaScript frame (or native entry) each sample was in ("self"), and the
// inclusive share of every JavaScript frame and a few kernel entries ("inclusive"); with --under,
// the leaf functions and direct callees of the samples that pass through the named frame.
import fs from 'node:fs';

const args = process.argv.slice(2);
const file = args[0];
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : dflt;
};
if (!file || file.startsWith('--')) {
  console.error('usage: perf-report.mjs <perf script output> [--us <CPU us per request>] [--top N] [--under <frame substring>]');
  process.exit(1);
}
const us = Number(opt('--us', '0'));
const top = Number(opt('--top', '40'));
const under = opt('--under', null);

/** a frame line of `perf script`: "addr symbol+0xoff (dso)" -> symbol */
const frameName = (line) => {
  const t = line.trim();
  const sp = t.indexOf(' ');
  return (sp >= 0 ? t.slice(sp + 1) : t).replace(/\+0x[0-9a-f]+ \(.*\)$/, '').replace(/ \(.*\)$/, '');
};
const samples = fs
  .readFileSync(file, 'utf8')
  .split('\n\n')
  .map((block) => block.split('\n').slice(1).filter((l) => l.trim()).map(frameName))
  .filter((frames) => frames.length > 0);
const total = samples.length;
const fmt = (n) => `${((100 * n) / total).toFixed(1).padStart(5)} %${us ? `  ${((us * n) / total).toFixed(1).padStart(6)} us` : ''}`;
const isJs = (f) => f.startsWith('JS:') || f.startsWith('Statement::') || f.startsWith('RegExp:');
const KERNEL = ['do_writev', 'ksys_read', 'do_epoll_wait', '__x64_sys_fsync', '__x64_sys_fdatasync', 'sock_def_readable'];
const print = (title, counts, of = total) => {
  console.log(`\n${title}`);
  for (const [k, n] of [...counts].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${of === total ? fmt(n) : `${((100 * n) / of).toFixed(1).padStart(5)} %`}  ${k.slice(0, 140)}`);
};
const bump = (m, k) => m.set(k, (m.get(k) ?? 0) + 1);

console.log(`${total} samples${us ? `, ${us} us of CPU per request` : ''}`);
if (under) {
  const leaf = new Map();
  const callee = new Map();
  let hit = 0;
  for (const frames of samples) {
    const i = frames.findLastIndex((f) => f.includes(under));
    if (i < 0) continue;
    hit++;
    bump(leaf, frames[0]);
    if (i > 0) bump(callee, frames[i - 1]);
  }
  console.log(`${hit} samples under ${under}: ${fmt(hit)}`);
  print(`leaf functions under ${under} (share of those samples)`, leaf, hit);
  print(`direct callees of ${under} (share of those samples)`, callee, hit);
} else {
  const self = new Map();
  const incl = new Map();
  for (const frames of samples) {
    bump(self, frames.find(isJs) ?? `native: ${frames.find((f) => KERNEL.includes(f)) ?? frames.at(-1)}`);
    for (const f of new Set(frames)) if (isJs(f) || KERNEL.includes(f)) bump(incl, f);
  }
  print('self: the innermost JavaScript frame of each sample (native and kernel time inside it included)', self);
  print('inclusive: JavaScript frames and kernel entries', incl);
}
