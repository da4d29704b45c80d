// The client lines `npm start` prints (demo/start.ts) run demo/client-example.ts: here its
// runExample goes against the real service (in process, on a free port, the test site) and makes
// an account, a shipment with its DropOff PIN, in state ReadyForDropoff. And the command line as
// printed runs (tsx with the source condition, as the banner says) and exits 0.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestService, type TestService } from '../../central/test/support/harness';
import { PUP_A1, TENANT_A } from '../../central/test/support/fixtures';
import { runExample } from '../../../demo/client-example';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

describe('demo/client-example.ts (the client steps npm start prints)', () => {
  let t: TestService;
  let api: string;
  beforeAll(async () => {
    t = await createTestService('sqlite', { config: { http: { host: '127.0.0.1', port: 0 } } });
    api = await t.svc.listen();
  });
  afterAll(async () => {
    await t?.close();
  });

  it('runExample: account, shipment, its codes and state', async () => {
    const lines: string[] = [];
    const r = await runExample({ api, clientId: TENANT_A.clientId, clientSecret: TENANT_A.clientSecret, pupUid: PUP_A1, print: (s) => lines.push(s) });
    expect(r.shipmentUid).toMatch(/^[0-9a-f]{32}$/);
    expect(r.dropOffPin).toMatch(/^\d+$/);
    expect(r.stateCode).toBe('ReadyForDropoff');
    expect(lines.join('\n')).toContain(`shipment ${r.shipmentUid}`);
  });

  it('the printed command line runs and exits 0', async () => {
    const args = ['--conditions=@locker/source', 'demo/client-example.ts', '--api', api, '--client-id', TENANT_A.clientId, '--client-secret', TENANT_A.clientSecret, '--pup', PUP_A1];
    const out = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
      const child = spawn(path.join(ROOT, 'node_modules/.bin/tsx'), args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d) => (stdout += d));
      child.stderr.on('data', (d) => (stderr += d));
      child.on('error', reject);
      child.on('exit', (code) => resolve({ code, stdout, stderr }));
    });
    expect(out.code, out.stderr).toBe(0);
    expect(out.stdout).toMatch(/shipment [0-9a-f]{32} in locker /);
    expect(out.stdout).toMatch(/DropOff Code: \d+/);
  });
});
