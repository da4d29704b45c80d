// CLI manners (issue 13 item 6, for every CLI: locker-central, locker-agent, locker-lockbus,
// locker-sim): --help exits 0; an unknown flag or a flag without its value is one clear line on
// stderr and exit 2, never a Node stack; the agent run without a configuration says what to pass.
// The bins run here as the tests run them everywhere: on the sources (vitest.config.ts).
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const CENTRAL = path.join(ROOT, 'packages/central/bin/locker-central.js');
const AGENT = path.join(ROOT, 'packages/agent/bin/locker-agent.js');
const LOCKBUS = path.join(ROOT, 'packages/lockbus/bin/locker-lockbus.js');
const SIM = path.join(ROOT, 'firmware-sim/bin/locker-sim.js');

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
    [LOCKBUS, ['--help']],
    [LOCKBUS, ['scan', '--help']],
    [SIM, ['--help']],
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
    [LOCKBUS, ['--bogus'], 'locker-lockbus: unknown option --bogus (see --help)'],
    [LOCKBUS, [], 'locker-lockbus: a command is required: scan or unlock (see --help)'],
    [LOCKBUS, ['scan', '--port', '/dev/null', '--dialect', 'kerong-cu16', '--bogus'], 'locker-lockbus: unknown option --bogus (see --help)'],
    [LOCKBUS, ['scan', '--port', '/dev/null', '--dialect', 'nope'], 'locker-lockbus: unknown dialect nope: one of kerong-cu16, kerong-48, generic-8a80 (see --help)'],
    [LOCKBUS, ['unlock', '--port', '/dev/null', '--dialect', 'kerong-cu16', '--board', 'x', '--lock', '1'], 'locker-lockbus: --board must be an integer 0..14, got "x" (see --help)'],
    [SIM, ['--bogus'], 'locker-sim: unknown option --bogus (see --help)'],
    [SIM, ['--bus', 'nope:1'], 'locker-sim: --bus nope:1: unknown dialect "nope" (kerong-cu16, kerong-48, generic-8a80)'],
  ])('%s %j: one clear line, exit 2', (bin, args, line) => {
    const r = run(bin, args);
    expect(r.code).toBe(2);
    expect(r.err.trim()).toBe(line);
    expect(r.err).not.toMatch(/\n\s+at /); // no stack
  });

  it.each([
    [AGENT, ['run', '--config'], /^locker-agent: Option '--config <value>' argument missing \(see --help\)/],
    [LOCKBUS, ['scan', '--port'], /^locker-lockbus: Option '--port <value>' argument missing \(see --help\)/],
    [SIM, ['--bus'], /^locker-sim: --bus needs a value/],
  ])('%s %j, a flag that needs a value and got none: one line, exit 2', (bin, args, line) => {
    const r = run(bin, args);
    expect(r.code).toBe(2);
    expect(r.err.trim().split('\n')).toHaveLength(1);
    expect(r.err).toMatch(line);
  });
});
