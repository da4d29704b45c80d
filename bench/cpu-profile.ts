// A CPU profile's self time summed by area (a package in node_modules, a folder of packages/*/src,
// node's own code) and by function, printed as shares of the busy time (idle left out). Used by
// bench/profile-endpoint.ts and bench/edge-ingest.ts.
import pg from 'pg';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string };
}
export interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** where a function's code lives, for the summary by area */
export function area(url: string): string {
  if (!url) return '(native / V8)';
  const nm = url.lastIndexOf('node_modules/');
  if (nm >= 0) {
    const parts = url.slice(nm + 'node_modules/'.length).split('/');
    return parts[0]!.startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0]!;
  }
  const src = /packages\/([^/]+)\/src\/(?:([^/]+)\/)?/.exec(url);
  if (src) return `${src[1]}/${src[2] && !src[2].includes('.') ? src[2] : url.split('/').pop()}`;
  if (url.startsWith('node:')) return 'node';
  return url.split('/').slice(-2).join('/');
}

/** prints the busy share, then the top areas and functions by self time, through `print` */
export function summariseProfile(profile: Profile, print: (line: string) => void, top = { areas: 25, functions: 30 }): void {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map<string, number>();
  const byArea = new Map<string, number>();
  let total = 0;
  let idle = 0;
  profile.samples.forEach((id, i) => {
    const f = byId.get(id)!.callFrame;
    const key = `${f.functionName || '(anonymous)'} ${f.url ? f.url.split('/').slice(-2).join('/') : ''}`.trim();
    const dt = profile.timeDeltas[i] ?? 0;
    self.set(key, (self.get(key) ?? 0) + dt);
    const a = f.functionName === '(idle)' || f.functionName === '(program)' || f.functionName === '(garbage collector)' ? f.functionName : area(f.url);
    byArea.set(a, (byArea.get(a) ?? 0) + dt);
    if (f.functionName === '(idle)') idle += dt;
    total += dt;
  });
  const busy = total - idle;
  print(`\nbusy ${((busy / total) * 100).toFixed(1)} % of the ${(total / 1e6).toFixed(1)} s profiled; shares below are of the busy time`);
  print('\nself time   area');
  for (const [k, v] of [...byArea].filter(([k]) => k !== '(idle)').sort((a, b) => b[1] - a[1]).slice(0, top.areas)) print(`${((v / busy) * 100).toFixed(1).padStart(6)} %   ${k}`);
  print('\nself time   function');
  for (const [k, v] of [...self].filter(([k]) => !k.startsWith('(idle)')).sort((a, b) => b[1] - a[1]).slice(0, top.functions)) print(`${((v / busy) * 100).toFixed(1).padStart(6)} %   ${k}`);
}

/** drops a bench's PostgreSQL schema (the benches run each service in a fresh one) */
export async function dropPgSchema(url: string, schema: string | undefined): Promise<void> {
  if (!schema) return;
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await c.end();
}

/**
 * Counts the queries the process sends to PostgreSQL through pg's Client.query (nearly its round
 * trips: a text of two statements counts once; the read pipelines, which queue on the client
 * directly, are not counted), by text, while `on` is true. Patches pg's Client for the process.
 */
export function countPgQueries(): { counts: Map<string, number>; on: boolean } {
  const counter = { counts: new Map<string, number>(), on: true };
  const proto = pg.Client.prototype as unknown as { query: (...a: unknown[]) => unknown };
  const orig = proto.query;
  proto.query = function (this: unknown, ...a: unknown[]) {
    if (counter.on) {
      const q = a[0] as string | { text?: string };
      const text = typeof q === 'string' ? q : (q?.text ?? '?');
      counter.counts.set(text, (counter.counts.get(text) ?? 0) + 1);
    }
    return orig.apply(this, a);
  };
  return counter;
}
