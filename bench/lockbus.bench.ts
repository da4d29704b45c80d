// Lock bus and scanner latency, and the CPU cost of polling.
//
// 1. Unlock: from LockBus.unlock() being called to the last byte of the frame leaving the port
//    (the write drained: tcdrain returned), 1000 runs on a socat pseudo-terminal, CU16 at 19200.
// 2. Scanner: from the simulated scanner writing a line (code + CR) to the `credential` event,
//    1000 runs on a pseudo-terminal; and the same without a suffix (the read ends on the
//    inter-byte timeout), fewer runs.
// 3. CPU: the driver polling 10 CU16 boards at 2 Hz, as a share of one core (process.cpuUsage
//    over a measured window). The simulator runs in a CHILD process so its work is not counted;
//    an idle window of the same length in this process is the baseline.
//
// Each latency sits beside the wire time of the frame at the configured baud rate: the physical
// floor on a real RS485 line. A pty does not clock bytes out at the baud rate, so the driver's
// own overhead can come out below that floor here; on hardware, add the wire time.
import { spawn } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import readline from 'node:readline';
import pino from 'pino';
import { Simulator } from '@locker/firmware-sim';
import { LockBus, ScannerReader, wireTimeMs, type Credential } from '@locker/lockbus';

const logger = pino({ level: 'silent' });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}
function stats(xs: number[]) {
  const s = [...xs].sort((a, b) => a - b);
  return { p50: pct(s, 50), p99: pct(s, 99), max: s[s.length - 1]!, n: s.length };
}
const f = (ms: number) => ms.toFixed(3);

async function unlockLatency(runs: number) {
  const sim = new Simulator({ buses: [{ name: 'bench', link: { kind: 'pty' }, dialect: 'kerong-cu16', boards: [{ address: 0 }] }] });
  await sim.start();
  const bus = new LockBus({ name: 'bench', port: sim.bus('bench').path!, dialect: 'kerong-cu16', boards: [{ address: 0 }], polling: false, logger });
  await bus.start();
  const samples: number[] = [];
  let t0 = 0;
  let t1 = 0;
  bus.on('unlockSent', () => (t1 = performance.now()));
  try {
    for (let i = 0; i < runs + 20; i++) {
      const lock = (i % 16) + 1;
      sim.bus('bench').lock(0, lock).closeDoor();
      await sleep(4); // past the inter-frame gap: an isolated unlock, not a back-to-back one
      t0 = performance.now();
      await bus.unlock(0, lock);
      if (i >= 20) samples.push(t1 - t0); // 20 warm-up runs
    }
  } finally {
    await bus.stop();
    await sim.stop();
  }
  return stats(samples);
}

async function scannerLatency(runs: number, suffix: '\r' | '', interByteTimeoutMs: number) {
  const sim = new Simulator({ buses: [], scanners: [{ name: 'scan', link: { kind: 'pty' }, suffix }] });
  await sim.start();
  const sc = sim.scanner('scan');
  const reader = new ScannerReader({ port: `${sc.path}?baud=9600`, dedupeWindowMs: 0, interByteTimeoutMs, logger });
  await reader.start();
  const samples: number[] = [];
  const code = 'PICKUP-0000-123456';
  try {
    for (let i = 0; i < runs + 20; i++) {
      const got = new Promise<Credential>((resolve) => reader.once('credential', resolve));
      const t0 = performance.now();
      await sc.scan(code);
      await got;
      const dt = performance.now() - t0;
      if (i >= 20) samples.push(dt);
      await sleep(2);
    }
  } finally {
    await reader.stop();
    await sim.stop();
  }
  return { ...stats(samples), bytes: code.length + suffix.length };
}

async function cpuPolling(windowMs: number) {
  const script = `
    import { Simulator } from '@locker/firmware-sim';
    const sim = new Simulator({ buses: [{ name: 'cpu', link: { kind: 'pty' }, dialect: 'kerong-cu16',
      boards: Array.from({ length: 10 }, (_, i) => ({ address: i })) }] });
    await sim.start();
    let c0 = process.cpuUsage(), t0 = performance.now();
    process.stdout.write(JSON.stringify({ path: sim.bus('cpu').path }) + '\\n');
    process.stdin.setEncoding('utf8');
    let buf = '';
    process.stdin.on('data', async (d) => {
      buf += d;
      if (buf.includes('mark\\n')) { buf = ''; c0 = process.cpuUsage(); t0 = performance.now(); }
      if (buf.includes('report\\n')) {
        const c = process.cpuUsage(c0);
        process.stdout.write(JSON.stringify({ share: (c.user + c.system) / 1000 / (performance.now() - t0) }) + '\\n');
        await sim.stop();
        process.exit(0);
      }
    });
  `;
  const child = spawn(process.execPath, ['--conditions=@locker/source', '--import', 'tsx', '--input-type=module', '-e', script], { cwd: process.cwd(), stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = readline.createInterface({ input: child.stdout! });
  const it = lines[Symbol.asyncIterator]();
  const next = async () => JSON.parse(((await it.next()).value as string) ?? '{}');
  try {
    const { path } = await next();
    // idle baseline: this process, same window, nothing running
    let c0 = process.cpuUsage();
    let t0 = performance.now();
    await sleep(windowMs / 2);
    let c = process.cpuUsage(c0);
    const idle = (c.user + c.system) / 1000 / (performance.now() - t0);

    const boards = Array.from({ length: 10 }, (_, i) => ({ address: i }));
    const bus = new LockBus({ name: 'cpu', port: path, dialect: 'kerong-cu16', boards, pollIntervalMs: 500, logger });
    let cycles = 0;
    bus.on('pollCycle', () => cycles++);
    await bus.start();
    await sleep(1000); // settle: every board online
    const startCycles = cycles;
    child.stdin!.write('mark\n');
    c0 = process.cpuUsage();
    t0 = performance.now();
    await sleep(windowMs);
    c = process.cpuUsage(c0);
    const wall = performance.now() - t0;
    const share = (c.user + c.system) / 1000 / wall;
    const measuredCycles = cycles - startCycles;
    await bus.stop();
    child.stdin!.write('report\n');
    const simShare = (await next()).share as number;
    return { share, idle, wall, measuredCycles, simShare };
  } finally {
    child.kill();
  }
}

export default async function run(): Promise<{ title: string; markdown: string }> {
  const unlock = await unlockLatency(1000);
  const scanCr = await scannerLatency(1000, '\r', 60);
  const scanNone = await scannerLatency(100, '', 60);
  const cpu = await cpuPolling(8000);
  const unlockWire = wireTimeMs(5, 19200);
  const md = [
    'Pseudo-terminals made by socat, the real `serialport` package on both ends, simulator from `@locker/firmware-sim`.',
    '',
    '| path | runs | p50 ms | p99 ms | max ms | wire time of the frame (floor on real RS485) |',
    '|---|---|---|---|---|---|',
    `| unlock() call -> CU16 unlock frame drained from the port | ${unlock.n} | ${f(unlock.p50)} | ${f(unlock.p99)} | ${f(unlock.max)} | ${f(unlockWire)} ms (5 bytes at 19200 baud) |`,
    `| scanner writes code + CR -> \`credential\` event | ${scanCr.n} | ${f(scanCr.p50)} | ${f(scanCr.p99)} | ${f(scanCr.max)} | ${f(wireTimeMs(scanCr.bytes, 9600))} ms (${scanCr.bytes} bytes at 9600 baud) |`,
    `| scanner writes code, no suffix -> \`credential\` (60 ms inter-byte timeout) | ${scanNone.n} | ${f(scanNone.p50)} | ${f(scanNone.p99)} | ${f(scanNone.max)} | ${f(wireTimeMs(scanNone.bytes, 9600))} ms + the 60 ms timeout |`,
    '',
    'A pty hands bytes over at memory speed, so these figures are the software path only; on a real',
    'adapter the unlock frame needs its wire time on top (tcdrain waits for the UART), and a USB-CDC',
    'scanner delivers at USB speed whatever its nominal baud rate.',
    '',
    `CPU, driver polling 10 CU16 boards every 500 ms (2 Hz, ${cpu.measuredCycles} poll cycles = ${cpu.measuredCycles * 10} status transactions in ${(cpu.wall / 1000).toFixed(1)} s):`,
    '',
    '| process | share of one core |',
    '|---|---|',
    `| this process, idle (baseline, before the driver starts) | ${(cpu.idle * 100).toFixed(2)} % |`,
    `| this process, driver polling (simulator in a child process, not counted) | ${(cpu.share * 100).toFixed(2)} % |`,
    `| the simulator child process, same window (for reference) | ${(cpu.simShare * 100).toFixed(2)} % |`,
  ].join('\n');
  return { title: 'Lock bus: unlock and scanner latency, polling CPU', markdown: md };
}
