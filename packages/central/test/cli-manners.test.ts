// CLI manners (issue 13 item 6, for the two service CLIs): --help exits 0; an unknown flag or a
// flag without its value is one clear line on stderr and exit 2, never a Node stack; the agent run
// without a configuration says what to pass.
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const CENTRAL = path.join(ROOT, 'packages/central/bin/locker-central.js');
const AGENT = path.join(ROOT, 'packages/agent/bin/locker-agent.js');

function run(bin: string, args: string[]) {
  const env = { ...process.env };
  for (const k of Object.keys(env)) if (k.startsWith('LOCKER_')) delete env[k];
  const r = spawnSync(process.execPath, [bin, ...args], { env, encoding: 'utf8', timeout: 30_000 });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

describe('CLI manners', () => {
  it.each([
    [CENTRAL, ['--help']],
    [AGENT, ['--help']],
  ])('%s --help: usage on stdout, exit 0', (bin, args) => {
    const r = run(bin, args);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/usage|Usage|commands/);
    expect(r.err).toBe('');
  });

  it.each([
    [CENTRAL, ['--bogus'], 'locker-central: unknown option --bogus (see --help)'],
    [CENTRAL, ['serve', '--nope'], 'locker-central: unknown option --nope (see --help)'],
    [AGENT, ['run', '--bogus'], 'locker-agent: unknown option --bogus (see --help)'],
    [AGENT, ['run'], 'locker-agent: no configuration: pass --config FILE (the packaged one is /etc/locker/agent.yaml) or set LOCKER_AGENT_CONFIG; see --help'],
  ])('%s %j: one clear line, exit 2', (bin, args, line) => {
    const r = run(bin, args);
    expect(r.code).toBe(2);
    expect(r.err.trim()).toBe(line);
    expect(r.err).not.toMatch(/\n\s+at /); // no stack
  });

  it('a flag that needs a value and got none: one line, exit 2', () => {
    const r = run(AGENT, ['run', '--config']);
    expect(r.code).toBe(2);
    expect(r.err.trim().split('\n')).toHaveLength(1);
    expect(r.err).toMatch(/^locker-agent: Option '--config <value>' argument missing \(see --help\)/);
  });
});
