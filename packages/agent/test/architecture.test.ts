// The agent's modules form no import cycle (type imports included): agent.ts is the composition
// root; its features (the diagnostics server, the technician's actions) see it only through the
// TechnicianHost interface (src/host.ts), never by importing agent.ts back (issue 14 item 6).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const SRC = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../src');

function sources(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? sources(path.join(dir, e.name)) : e.name.endsWith('.ts') ? [path.join(dir, e.name)] : []));
}

/** relative imports of a file (import and export ... from, type-only ones too), as absolute .ts paths */
function imports(file: string): string[] {
  const text = fs.readFileSync(file, 'utf8');
  const out: string[] = [];
  for (const m of text.matchAll(/^\s*(?:import|export)\b[^'"]*?from\s+['"](\.{1,2}\/[^'"]+)['"]/gm)) {
    const base = path.resolve(path.dirname(file), m[1]!);
    const cand = [base, `${base}.ts`, path.join(base, 'index.ts')].find((p) => fs.existsSync(p) && fs.statSync(p).isFile());
    if (cand) out.push(cand);
  }
  return out;
}

function findCycle(files: string[]): string[] | null {
  const graph = new Map(files.map((f) => [f, imports(f)]));
  const state = new Map<string, 'visiting' | 'done'>();
  const stack: string[] = [];
  const visit = (f: string): string[] | null => {
    if (state.get(f) === 'done') return null;
    if (state.get(f) === 'visiting') return [...stack.slice(stack.indexOf(f)), f];
    state.set(f, 'visiting');
    stack.push(f);
    for (const g of graph.get(f) ?? []) {
      const c = visit(g);
      if (c) return c;
    }
    stack.pop();
    state.set(f, 'done');
    return null;
  };
  for (const f of files) {
    const c = visit(f);
    if (c) return c.map((x) => path.relative(SRC, x));
  }
  return null;
}

describe('agent module structure', () => {
  it('no import cycle among the agent sources (type imports included)', () => {
    expect(findCycle(sources(SRC))).toBeNull();
  });
  it('the cycle check finds one when there is one', () => {
    const dir = fs.mkdtempSync(path.join(fs.realpathSync(SRC), '..', '.cycle-'));
    try {
      fs.writeFileSync(path.join(dir, 'a.ts'), "import type { B } from './b';\nexport type A = B;\n");
      fs.writeFileSync(path.join(dir, 'b.ts'), "import type { A } from './a';\nexport type B = A | 1;\n");
      expect(findCycle(sources(dir))?.map((f) => path.basename(f))).toEqual(['a.ts', 'b.ts', 'a.ts']);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
  it('the diagnostics server and the technician actions do not import agent.ts', () => {
    const agent = path.join(SRC, 'agent.ts');
    for (const f of [path.join(SRC, 'diagnostics.ts'), ...sources(path.join(SRC, 'technician'))]) expect(imports(f), path.relative(SRC, f)).not.toContain(agent);
  });
});
