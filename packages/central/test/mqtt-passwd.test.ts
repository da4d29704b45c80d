// `locker-central mqtt-passwd`: the Mosquitto password file written from the provisioning file's
// terminals and the central users. Checked against a real Mosquitto (deploy/mosquitto.conf as
// shipped): a terminal written there logs in, one removed from the file cannot after a reload.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { mqttPasswd } from '../src/cli';
import { hashSecret } from '../src/auth/secrets';
import { MqttPasswdError, mosquittoHash, mosquittoHashMatches, parsePasswdFile } from '../src/mqtt/passwd';
import { DEPLOY_ACL, MOSQUITTO, MOSQUITTO_PASSWD, connect, startMosquitto, type TestMosquitto } from './support/mosquitto';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const TSX = path.join(ROOT, 'node_modules/.bin/tsx');
const available = !!MOSQUITTO && !!MOSQUITTO_PASSWD;
const d = available || process.env.LOCKER_REQUIRE_SERVICES === '1' ? describe : describe.skip;

const PUP = 'pup-1';
function provisioning(terminals: { id: string; secret: string }[]) {
  return {
    pickupPoints: [{ uid: PUP, name: 'PUP 1', locationAddress: { countryIso2: 'NL' } }],
    terminals: terminals.map((t) => ({ ...t, pupUid: PUP })),
  };
}

let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mqtt-passwd-'));
  fs.chmodSync(dir, 0o755); // the broker (dropped to its own user) reads the password file here
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('mosquittoHash', () => {
  it('writes $7$ PBKDF2-SHA512 hashes and recognises mosquitto_passwd ones', () => {
    const h = mosquittoHash('secret-1');
    expect(h).toMatch(/^\$7\$1000\$[A-Za-z0-9+/]{16}\$[A-Za-z0-9+/]{86}==$/);
    expect(mosquittoHashMatches('secret-1', h)).toBe(true);
    expect(mosquittoHashMatches('secret-2', h)).toBe(false);
    if (MOSQUITTO_PASSWD) {
      const f = path.join(dir, 'by-mosquitto-passwd');
      fs.writeFileSync(f, '');
      execFileSync(MOSQUITTO_PASSWD, ['-b', f, 'u1', 'pw-of-u1']);
      expect(mosquittoHashMatches('pw-of-u1', parsePasswdFile(fs.readFileSync(f, 'utf8')).get('u1')!)).toBe(true);
    }
  });
});

describe('mqttPasswd (the command)', () => {
  const prov = (name: string, terminals: { id: string; secret: string }[]) => {
    const f = path.join(dir, name);
    fs.writeFileSync(f, stringify(provisioning(terminals)));
    return f;
  };

  it('keeps unchanged lines as they are, so running it again changes nothing', () => {
    const f = prov('same.yaml', [{ id: 'term-x1', secret: 'terminal-secret-x1' }]);
    const out = path.join(dir, 'same.passwd');
    expect(mqttPasswd(f, out).changes).toEqual(['added terminal term-x1']);
    const first = fs.readFileSync(out, 'utf8');
    expect(mqttPasswd(f, out).changes).toEqual(['unchanged terminal term-x1']);
    expect(fs.readFileSync(out, 'utf8')).toBe(first);
    expect(fs.statSync(out).mode & 0o777).toBe(0o600);
  });

  it('refuses a terminal with only a hashed secret unless the password file already has its line (then keeps it)', () => {
    const f = prov('hashed.yaml', [{ id: 'term-h1', secret: hashSecret('terminal-secret-h1') }]);
    const out = path.join(dir, 'hashed.passwd');
    expect(() => mqttPasswd(f, out)).toThrow(MqttPasswdError);
    expect(() => mqttPasswd(f, out)).toThrow(/term-h1: the provisioning file holds only a hash/);
    expect(fs.existsSync(out)).toBe(false);
    const line = `term-h1:${mosquittoHash('terminal-secret-h1')}\n`;
    fs.writeFileSync(out, line);
    expect(mqttPasswd(f, out).changes).toEqual(['kept terminal term-h1 (hashed secret in the provisioning file; its line is carried over)']);
    expect(fs.readFileSync(out, 'utf8')).toBe(line);
  });

  it("refuses a terminal named like a central user (the central's file or the ACL's user entries)", () => {
    const users = path.join(dir, 'users-clash');
    fs.writeFileSync(users, 'central-1:central-secret-1\n');
    const clash = prov('clash.yaml', [{ id: 'central-1', secret: 'terminal-secret-c1' }]);
    expect(() => mqttPasswd(clash, path.join(dir, 'clash.passwd'), { central: users })).toThrow(/taken twice/);
    const aclClash = prov('acl-clash.yaml', [{ id: 'central-2', secret: 'terminal-secret-c2' }]);
    expect(() => mqttPasswd(aclClash, path.join(dir, 'clash.passwd'), { central: users, acl: DEPLOY_ACL })).toThrow(/the ACL gives this user name the central's rights/);
    expect(fs.existsSync(path.join(dir, 'clash.passwd'))).toBe(false);
  });
});

d(`locker-central mqtt-passwd against a private Mosquitto${available ? '' : ' (SKIPPED: mosquitto not installed)'}`, () => {
  let broker: TestMosquitto;
  let passwd: string;
  let users: string;
  const cli = (...args: string[]) => execFileSync(TSX, ['packages/central/src/cli.ts', 'mqtt-passwd', ...args], { cwd: ROOT, encoding: 'utf8', env: { ...process.env, LOCKER_CLI_MAIN: '' } });

  beforeAll(async () => {
    passwd = path.join(dir, 'passwd');
    users = path.join(dir, 'central-users');
    fs.writeFileSync(users, '# the central instances\ncentral-1:central-secret-1\ncentral-2:central-secret-2\n');
    const first = path.join(dir, 'site.yaml');
    fs.writeFileSync(first, stringify(provisioning([{ id: 'term-a1', secret: 'terminal-secret-a1' }, { id: 'term-b1', secret: 'terminal-secret-b1' }])));
    const out = cli(first, '--central', users, '--acl', DEPLOY_ACL, '--out', passwd, '--mode', '644');
    expect(out).toContain('added terminal term-a1');
    expect(out).toContain('added central user central-2');
    broker = await startMosquitto({ passwdFile: () => passwd });
  }, 60_000);
  afterAll(async () => {
    await broker?.cleanup();
  });

  it('lets the terminals and central users written there log in (with their secrets only)', async () => {
    for (const [u, p] of [['term-a1', 'terminal-secret-a1'], ['term-b1', 'terminal-secret-b1'], ['central-1', 'central-secret-1'], ['central-2', 'central-secret-2']] as const) {
      const c = await connect(broker.url, { clientId: u, username: u, password: p });
      await c.endAsync();
    }
    await expect(connect(broker.url, { clientId: 'term-a1', username: 'term-a1', password: 'terminal-secret-b1' })).rejects.toThrow();
  });

  it('shuts a terminal out once it is removed from the provisioning file (after a reload; a connected one is dropped)', async () => {
    const connected = await connect(broker.url, { clientId: 'term-b1', username: 'term-b1', password: 'terminal-secret-b1' });
    let dropped = false;
    connected.on('close', () => (dropped = true));
    const second = path.join(dir, 'site-2.yaml');
    fs.writeFileSync(second, stringify(provisioning([{ id: 'term-a1', secret: 'terminal-secret-a1' }])));
    const out = cli(second, '--central', users, '--out', passwd, '--mode', '644');
    expect(out).toContain('removed term-b1');
    expect(out).toContain('unchanged terminal term-a1');
    broker.reload();
    for (let i = 0; i < 40 && !dropped; i++) await new Promise((r) => setTimeout(r, 50));
    expect(dropped).toBe(true);
    await expect(connect(broker.url, { clientId: 'term-b1', username: 'term-b1', password: 'terminal-secret-b1' })).rejects.toThrow();
    const a = await connect(broker.url, { clientId: 'term-a1', username: 'term-a1', password: 'terminal-secret-a1' });
    await a.endAsync();
  });
});
