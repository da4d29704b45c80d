// Reads a Prometheus text exposition (what a scrape returns) into samples, for the metrics tests.
export interface PromSample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const LINE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

export function parsePromText(text: string): PromSample[] {
  const out: PromSample[] = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = LINE.exec(line);
    if (!m) throw new Error(`not a sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(LABEL)) labels[l[1]!] = l[2]!.replace(/\\n/g, '\n').replace(/\\"/g, '"').replace(/\\\\/g, '\\');
    out.push({ name: m[1]!, labels, value: m[3] === '+Inf' ? Infinity : m[3] === '-Inf' ? -Infinity : Number(m[3]) });
  }
  return out;
}

/** The sum of the samples of `name` whose labels include `match` (0 when there is none). */
export function sumOf(samples: PromSample[], name: string, match: Record<string, string> = {}): number {
  return samples.filter((s) => s.name === name && Object.entries(match).every(([k, v]) => s.labels[k] === v)).reduce((a, s) => a + s.value, 0);
}

/** Whether any sample of `name` matches `match`. */
export function has(samples: PromSample[], name: string, match: Record<string, string> = {}): boolean {
  return samples.some((s) => s.name === name && Object.entries(match).every(([k, v]) => s.labels[k] === v));
}

/** The metric families (# TYPE lines) of a scrape: name -> type. */
export function familiesOf(text: string): Map<string, string> {
  const m = new Map<string, string>();
  for (const line of text.split('\n')) {
    const t = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (t) m.set(t[1]!, t[2]!);
  }
  return m;
}
