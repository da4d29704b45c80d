// Load generator process for the HTTP benchmarks (bench/support.ts forks it): runs autocannon in
// this separate Node process, so the server under test owns its own process and event loop, and
// prints the autocannon result as one JSON line on stdout. Options arrive as JSON on stdin.
import autocannon from 'autocannon';

let input = '';
for await (const chunk of process.stdin) input += chunk;
const opts = JSON.parse(input);
const r = await autocannon(opts);
process.stdout.write(
  JSON.stringify({ ok: r['2xx'], non2xx: r.non2xx, errors: r.errors, timeouts: r.timeouts, duration: r.duration, p50: r.latency.p50, p99: r.latency.p99 }) + '\n',
);
