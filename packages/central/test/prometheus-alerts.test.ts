// Issue 13 part 5: the shipped Prometheus alert rules (deploy/prometheus-alerts.yml) and Grafana
// dashboard (deploy/grafana-dashboard.json) parse, cover the required alerts, and name only
// metrics that exist: the names are collected from the real registries of the central service
// and the agent (histograms with their _bucket/_count/_sum series). `promtool check rules` runs
// too when promtool is installed (Debian's `prometheus` package); without it that check is
// skipped visibly. The metric names follow the Prometheus conventions.
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { Counter, Histogram } from 'prom-client';
import { centralMetricNames, metricsRegistry } from '../src/ops/metrics';
import '../src/edge/observations'; // registers locker_lock_disagreements
import { AgentMetrics } from '../../agent/src/metrics';

const ROOT = path.resolve(__dirname, '../../..');
const RULES = path.join(ROOT, 'deploy/prometheus-alerts.yml');
const DASHBOARD = path.join(ROOT, 'deploy/grafana-dashboard.json');

const agent = new AgentMetrics({ journalUnsent: () => 0, mqttConnected: () => true, codesHeld: () => 0, codesAgeSeconds: () => 0, boards: () => [] });

/** Every series name the services can expose (Node's process metrics included: both registries collect them when served). */
function exposedSeries(): Set<string> {
  const out = new Set<string>();
  const add = (metrics: unknown[]) => {
    for (const m of metrics) {
      const name = (m as { name: string }).name;
      if (m instanceof Histogram) for (const s of ['_bucket', '_count', '_sum']) out.add(name + s);
      else out.add(name);
    }
  };
  add(metricsRegistry.getMetricsAsArray());
  add(agent.registry.getMetricsAsArray());
  for (const n of centralMetricNames()) if (!out.has(`${n}_count`)) out.add(n);
  for (const n of ['process_cpu_seconds_total', 'process_resident_memory_bytes', 'nodejs_eventloop_lag_p99_seconds', 'nodejs_heap_size_used_bytes']) out.add(n);
  return out;
}

const KEYWORDS = new Set(['and', 'or', 'unless', 'by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'bool', 'offset', 'inf', 'nan']);

/** The metric names a PromQL expression reads: identifiers that are not functions, keywords, label names or durations. */
export function metricNamesIn(expr: string): string[] {
  const s = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""') // strings
    .replace(/\{[^}]*\}/g, ' ') // label matchers
    .replace(/\[[^\]]*\]/g, ' ') // ranges
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' '); // label lists
  const names: string[] = [];
  for (const m of s.matchAll(/[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?/g)) {
    if (m[1]) continue; // a function call
    const id = m[0].trim();
    if (KEYWORDS.has(id.toLowerCase())) continue;
    // a number like 1e3 cannot start an identifier here; durations only occur inside [] (stripped)
    names.push(id);
  }
  return names;
}

interface Rule {
  alert?: string;
  record?: string;
  expr: string;
  for?: string;
}

const rules = (): Rule[] => (parseYaml(fs.readFileSync(RULES, 'utf8')) as { groups: { name: string; rules: Rule[] }[] }).groups.flatMap((g) => g.rules);

describe('Prometheus alert rules (deploy/prometheus-alerts.yml)', () => {
  it('parse as rule groups, each rule an alert with an expression and a summary', () => {
    const doc = parseYaml(fs.readFileSync(RULES, 'utf8')) as { groups: { name: string; rules: (Rule & { annotations?: { summary?: string } })[] }[] };
    expect(doc.groups.length).toBeGreaterThan(0);
    for (const g of doc.groups) {
      expect(typeof g.name).toBe('string');
      for (const r of g.rules) {
        expect(typeof r.alert, JSON.stringify(r)).toBe('string');
        expect(typeof r.expr).toBe('string');
        expect(r.annotations?.summary, r.alert).toBeTruthy();
      }
    }
  });

  it('reference only metrics the central service and the agent expose', () => {
    const exposed = exposedSeries();
    for (const r of rules()) {
      const names = metricNamesIn(r.expr);
      expect(names.length, `${r.alert}: ${r.expr}`).toBeGreaterThan(0);
      for (const n of names) expect(exposed.has(n), `${r.alert} reads ${n}, which no registry exposes`).toBe(true);
    }
  });

  it('cover terminal offline > 5 min, callback backlog older than 10 min, journal backlog growing, board offline, door left open', () => {
    const byName = new Map(rules().map((r) => [r.alert!, r]));
    expect(byName.get('LockerTerminalOffline')).toMatchObject({ expr: 'locker_terminal_online == 0', for: '5m' });
    expect(byName.get('LockerCallbackBacklogOld')?.expr).toBe('locker_callback_outbox_oldest_pending_age_seconds > 600');
    expect(byName.get('LockerEdgeEventsStuck')).toMatchObject({ expr: 'locker_edge_events_oldest_unprocessed_age_seconds > 1200', for: '5m' });
    expect(byName.get('LockerTerminalJournalBacklogGrowing')?.expr).toMatch(/locker_terminal_journal_unsent/);
    expect(byName.get('LockerAgentJournalBacklogGrowing')?.expr).toMatch(/deriv\(locker_agent_journal_unsent/);
    expect(byName.get('LockerBoardOffline')?.expr).toBe('locker_lock_disagreements{kind="board-offline"} > 0');
    expect(byName.get('LockerAgentBoardOffline')?.expr).toBe('locker_agent_board_online == 0');
    expect(byName.get('LockerDoorLeftOpen')?.expr).toBe('locker_lock_disagreements{kind="door-left-open"} > 0');
    expect(byName.get('LockerAgentDoorLeftOpen')?.expr).toBe('locker_agent_doors_left_open > 0');
  });

  const promtool = spawnSync('promtool', ['--version'], { encoding: 'utf8' }).status === 0;
  (promtool ? it : it.skip)(`promtool check rules accepts them${promtool ? '' : ' (SKIPPED: promtool not installed; apt-get install prometheus)'}`, () => {
    const out = execFileSync('promtool', ['check', 'rules', RULES], { encoding: 'utf8' });
    expect(out).toMatch(/SUCCESS: \d+ rules found/);
  });

  it('a counter an alert reads with increase() by label exports those series from the start (at 0), so the first event after a restart counts', async () => {
    const exported = await metricsRegistry.getSingleMetricAsString('locker_edge_events_irregular_total');
    for (const rule of rules()) {
      for (const m of rule.expr.matchAll(/increase\(locker_edge_events_irregular_total\{kind="(\w+)"\}/g)) expect(exported, rule.alert).toContain(`locker_edge_events_irregular_total{kind="${m[1]}"} 0`);
    }
    expect(exported).toContain('kind="reapply_failed"');
  });

  it('the name checker finds the names of an expression, not its functions, labels or keywords', () => {
    expect(metricNamesIn('sum by (instance, bus) (rate(a_total{outcome!="ok"}[10m])) / sum without (x) (rate(b_total[5m])) > 0.2 and on (bus) c')).toEqual(['a_total', 'b_total', 'c']);
    expect(metricNamesIn('histogram_quantile(0.99, sum by (le) (rate(h_bucket[5m])))')).toEqual(['h_bucket']);
  });
});

describe('Grafana dashboard (deploy/grafana-dashboard.json)', () => {
  it('is JSON with panels whose queries read only exposed metrics', () => {
    const d = JSON.parse(fs.readFileSync(DASHBOARD, 'utf8')) as { title: string; uid: string; panels: { type: string; title: string; targets?: { expr: string }[] }[] };
    expect(d.uid).toBe('locker-platform');
    const exposed = exposedSeries();
    const exprs = d.panels.flatMap((p) => (p.targets ?? []).map((t) => ({ panel: p.title, expr: t.expr })));
    expect(exprs.length).toBeGreaterThan(15);
    const read = new Set<string>();
    for (const { panel, expr } of exprs) {
      for (const n of metricNamesIn(expr)) {
        expect(exposed.has(n), `panel "${panel}" reads ${n}, which no registry exposes`).toBe(true);
        read.add(n);
      }
    }
    // every locker_ metric the services expose is on the dashboard
    for (const n of [...centralMetricNames(), ...agent.names()]) {
      const series = exposed.has(`${n}_count`) ? `${n}_count` : n;
      expect(read.has(series) || read.has(`${n}_bucket`), `${n} is on no panel`).toBe(true);
    }
  });
});

describe('metric names follow the Prometheus conventions', () => {
  it('locker_ prefix, counters end in _total, histograms in _seconds, no label holds a raw URL', () => {
    for (const m of [...metricsRegistry.getMetricsAsArray(), ...agent.registry.getMetricsAsArray()]) {
      const name = (m as unknown as { name: string }).name;
      if (!name.startsWith('locker_')) continue; // Node's process metrics
      expect(name).toMatch(/^locker_[a-z0-9_]+$/);
      if (m instanceof Counter) expect(name).toMatch(/_total$/);
      if (m instanceof Histogram) expect(name).toMatch(/_seconds$/);
      expect((m as unknown as { labelNames: string[] }).labelNames).not.toContain('url');
    }
    for (const n of centralMetricNames()) expect(n).toMatch(/^locker_[a-z0-9_]+$/);
    // the docs list every metric
    const doc = fs.readFileSync(path.join(ROOT, 'docs/metrics.md'), 'utf8');
    for (const n of [...centralMetricNames(), ...agent.names()]) if (n.startsWith('locker_')) expect(doc, `docs/metrics.md misses ${n}`).toContain(`\`${n}\``);
  });
});
