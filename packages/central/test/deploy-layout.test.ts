// The scale-out layout: docker-compose.yml (with the Dockerfile) and deploy/local-layout.ts, the same
// layout without Docker.
// 1. They agree: the script's plan (localPlan(), its data) has, per service of the central image,
//    the compose file's command and the same environment variable names and values; only addresses
//    (the postgres and mosquitto services, the HTTP host and port) and paths inside container mounts
//    differ, and each of those is listed. The compose file itself is checked for what the layout
//    promises: provisioned on the way up by one-shot steps, gated by healthchecks, PostgreSQL not
//    published, the password file in a shared volume, the central users matching deploy/central-users.txt.
// 2. The script works end to end on this machine's PostgreSQL (a database of its own) and a private
//    Mosquitto with deploy/mosquitto.conf: booked on instance A, seen on instance B, and the
//    provisioned terminal, logged in at the broker with its secret, gets the booking's codes.
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import mqtt from 'mqtt';
import { parse as parseYaml } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { COMPOSE_FILE, DOCKERFILE, REPO, dropDatabase, freePort, localPlan, readCompose, readDockerfile, runLayout, type LocalPlan, type RunningLayout } from '../../../deploy/local-layout';
import { pgUrl } from './support/harness';
import { MOSQUITTO } from './support/mosquitto';
import { terminalStatus } from './support/scripted-terminal';

/** the compose file read here on its own (not through the script) */
const compose = parseYaml(fs.readFileSync(COMPOSE_FILE, 'utf8'), { merge: true }) as { services: Record<string, any>; volumes: Record<string, unknown> };
const services = compose.services;
const centralServices = Object.keys(services).filter((n) => services[n].image === 'locker-central');
const instances = centralServices.filter((n) => !services[n].command || services[n].command[0] === 'serve');
const oneshots = centralServices.filter((n) => !instances.includes(n));
/** the values that may differ on one machine: where the database, the broker and the API are */
const ADDRESS_VARS = ['LOCKER_DATABASE_URL', 'LOCKER_MQTT_URL', 'LOCKER_HTTP_HOST', 'LOCKER_HTTP_PORT'];

const ep = { databaseUrl: 'postgres://postgres@127.0.0.1:5432/locker_layout_x', mqttUrl: 'mqtt://127.0.0.1:18830', workDir: '/tmp/layout-work' };

/** Every way the plan differs from the compose file other than the translations it lists and allows. */
function disagreements(plan: LocalPlan): string[] {
  const out: string[] = [];
  const planned = plan.steps.map((s) => s.service).sort();
  if (JSON.stringify(planned) !== JSON.stringify([...centralServices].sort())) out.push(`services: compose ${centralServices} vs script ${planned}`);
  for (const name of centralServices) {
    const svc = services[name];
    const step = plan.steps.find((s) => s.service === name);
    if (!step) continue;
    const kind = oneshots.includes(name) ? 'oneshot' : 'instance';
    if (step.kind !== kind) out.push(`${name}: kind ${step.kind}, compose makes it ${kind}`);
    if (step.user !== svc.user) out.push(`${name}: user ${step.user} vs ${svc.user}`);
    const command: string[] = svc.command ?? ['serve'];
    const mounts = (svc.volumes ?? []).map((v: string) => v.split(':')[1]!);
    if (step.args.length !== command.length) out.push(`${name}: command ${command.join(' ')} vs ${step.args.join(' ')}`);
    command.forEach((a, i) => {
      if (step.args[i] === a) return;
      const t = plan.translations.find((x) => x.service === name && x.what === `arg ${i}`);
      if (!t || t.compose !== a || t.local !== step.args[i]) out.push(`${name}: arg ${i} ${a} vs ${step.args[i]} (not a listed translation)`);
      else if (!mounts.some((m: string) => a.startsWith(`${m}/`))) out.push(`${name}: arg ${i} ${a} translated but not inside a mount`);
    });
    const env: Record<string, string> = Object.fromEntries(Object.entries(svc.environment ?? {}).map(([k, v]) => [k, String(v)]));
    const names = Object.keys(env).sort();
    const localNames = Object.keys(step.env).sort();
    if (JSON.stringify(names) !== JSON.stringify(localNames)) out.push(`${name}: variables ${names} vs ${localNames}`);
    for (const k of names) {
      if (step.env[k] === env[k]) continue;
      const t = plan.translations.find((x) => x.service === name && x.what === `env ${k}`);
      if (!t || t.compose !== env[k] || t.local !== step.env[k]) out.push(`${name}: ${k}=${env[k]} vs ${step.env[k]} (not a listed translation)`);
      else if (!ADDRESS_VARS.includes(k)) out.push(`${name}: ${k} is translated, but it is no address`);
    }
  }
  return out;
}

describe('docker-compose.yml and deploy/local-layout.ts agree', () => {
  const plan = localPlan(readCompose(), ep);

  it('per service: the same command and the same environment variables and values, addresses and mounted paths aside', () => {
    expect(centralServices.sort()).toEqual(['central-1', 'central-2', 'mqtt-passwd', 'provision']);
    expect(disagreements(plan)).toEqual([]);
    // the translations are exactly these: nothing else is changed on the way
    expect(plan.translations.filter((t) => t.what.startsWith('env')).map((t) => `${t.service} ${t.what}`).sort()).toEqual(
      ['central-1', 'central-2'].flatMap((s) => ADDRESS_VARS.map((v) => `${s} env ${v}`)).concat(['provision env LOCKER_DATABASE_URL']).sort(),
    );
    expect(plan.steps.find((s) => s.service === 'central-1')!.env.LOCKER_DATABASE_URL).toBe(ep.databaseUrl);
    expect(plan.steps.find((s) => s.service === 'central-2')!.env.LOCKER_MQTT_URL).toBe(ep.mqttUrl);
    // the ports the compose file publishes, one per instance
    expect(plan.steps.filter((s) => s.kind === 'instance').map((s) => s.env.LOCKER_HTTP_PORT)).toEqual(['8081', '8082']);
    // paths in the one-shot commands are the files the compose file mounts from deploy/
    for (const t of plan.translations.filter((x) => x.what.startsWith('arg') && x.compose.startsWith('/etc/locker/'))) expect(fs.existsSync(t.local), t.local).toBe(true);
    expect(plan.replaced).toEqual({ postgres: ep.databaseUrl, mosquitto: ep.mqttUrl });
  });

  it('the comparison finds a difference (a variable dropped, a value or a command changed)', () => {
    const tamper = (f: (p: LocalPlan) => void) => {
      const p = structuredClone(plan);
      f(p);
      return disagreements(p);
    };
    expect(tamper((p) => delete p.steps.find((s) => s.service === 'central-2')!.env.LOCKER_MQTT_SHARED_GROUP)).toContainEqual(expect.stringContaining('central-2: variables'));
    expect(tamper((p) => (p.steps.find((s) => s.service === 'central-1')!.env.LOCKER_MQTT_USERNAME = 'central-x'))).toEqual([expect.stringContaining('LOCKER_MQTT_USERNAME')]);
    expect(tamper((p) => (p.steps.find((s) => s.service === 'mqtt-passwd')!.args[9] = '644'))).toEqual([expect.stringContaining('mqtt-passwd: arg 9')]);
    expect(tamper((p) => p.steps.splice(0, 1))).toEqual([expect.stringContaining('services')]);
    // and the script's plan follows the compose file: a changed value there is a changed value here
    const changed = readCompose();
    changed['central-2']!.environment!.LOCKER_MQTT_SHARED_GROUP = 'other';
    expect(localPlan(changed, ep).steps.find((s) => s.service === 'central-2')!.env.LOCKER_MQTT_SHARED_GROUP).toBe('other');
  });

  it('the script runs the image entrypoint and healthcheck of the Dockerfile', () => {
    const df = readDockerfile(DOCKERFILE);
    expect(df.entrypoint).toEqual(['node', '/opt/locker/packages/central/bin/locker-central.js']);
    expect(plan.entrypoint).toEqual([process.execPath, path.join(REPO, 'packages/central/bin/locker-central.js')]);
    expect(plan.healthcheck).toEqual([process.execPath, path.join(REPO, 'deploy/ready-check.mjs')]);
    expect(fs.readFileSync(path.join(REPO, 'deploy/ready-check.mjs'), 'utf8')).toContain('/ready');
    const text = fs.readFileSync(DOCKERFILE, 'utf8');
    const user = [...text.matchAll(/^USER\s+(\S+)/gm)].map((m) => m[1]);
    expect(user.at(-1)).toBe('node'); // the service does not run as root
    expect(text).toMatch(/^CMD \["serve"\]$/m);
  });

  it('the compose file: provisioned on the way up, gated by healthchecks, PostgreSQL not published, the password file in a shared volume', () => {
    expect(services.postgres.ports).toBeUndefined();
    expect(services.postgres.expose).toBeUndefined();
    expect(services.provision.command).toEqual(['provision', '/etc/locker/site.yaml']);
    expect(services['mqtt-passwd'].command.slice(0, 2)).toEqual(['mqtt-passwd', '/etc/locker/site.yaml']);
    for (const o of oneshots) expect(services[o].volumes).toContain('./deploy:/etc/locker:ro');
    // every gate waits for something that can pass it
    for (const [name, s] of Object.entries(services)) {
      for (const [dep, c] of Object.entries((s as any).depends_on ?? {}) as [string, { condition: string }][]) {
        if (c.condition === 'service_healthy') expect(services[dep].healthcheck ?? (services[dep].image === 'locker-central' ? 'Dockerfile HEALTHCHECK' : undefined), `${name} -> ${dep}`).toBeDefined();
        else expect(c.condition, `${name} -> ${dep}`).toBe('service_completed_successfully');
        if (c.condition === 'service_completed_successfully') expect(oneshots).toContain(dep);
      }
    }
    for (const i of instances) {
      expect(services[i].depends_on).toEqual({ postgres: { condition: 'service_healthy' }, mosquitto: { condition: 'service_healthy' }, provision: { condition: 'service_completed_successfully' } });
      expect(services[i].environment.LOCKER_MQTT_SHARED_GROUP).toBe('central');
    }
    expect(instances).toEqual(['central-1', 'central-2']);
    expect(services.mosquitto.depends_on).toEqual({ 'mqtt-passwd': { condition: 'service_completed_successfully' } });
    // mqtt-passwd writes into the volume the broker reads its password file from; no host file
    const out = services['mqtt-passwd'].command[services['mqtt-passwd'].command.indexOf('--out') + 1] as string;
    const written = (services['mqtt-passwd'].volumes as string[]).map((v) => v.split(':')).find(([, target]) => out.startsWith(`${target}/`))!;
    expect(Object.keys(compose.volumes)).toContain(written[0]);
    const conf = fs.readFileSync(path.join(REPO, 'deploy/mosquitto.conf'), 'utf8');
    const passwordFile = /^password_file\s+(\S+)/m.exec(conf)![1]!;
    const read = (services.mosquitto.volumes as string[]).map((v) => v.split(':')).find(([src]) => src === written[0])!;
    expect(read[2]).toBe('ro');
    expect(path.join(read[1]!, path.basename(out))).toBe(passwordFile);
    expect((services.mosquitto.volumes as string[]).some((v) => v.includes('deploy/passwd'))).toBe(false);
    // the central users of the password file are the instances' MQTT users, each with an ACL block
    const users = fs.readFileSync(path.join(REPO, 'deploy/central-users.txt'), 'utf8').split('\n').filter((l) => l.trim() && !l.startsWith('#')).sort();
    expect(users).toEqual(instances.map((i) => `${services[i].environment.LOCKER_MQTT_USERNAME}:${services[i].environment.LOCKER_MQTT_PASSWORD}`).sort());
    const acl = fs.readFileSync(path.join(REPO, 'deploy/mosquitto.acl'), 'utf8');
    for (const i of instances) expect(acl).toMatch(new RegExp(`^user ${services[i].environment.LOCKER_MQTT_USERNAME}$`, 'm'));
  });
});

const pg = pgUrl();
const required = process.env.LOCKER_REQUIRE_SERVICES === '1';
const runnable = !!pg && !!MOSQUITTO;
const e2e = runnable || required ? describe : describe.skip;

e2e(`deploy/local-layout.ts end to end (this machine's PostgreSQL, a private Mosquitto)${runnable ? '' : ' (SKIPPED: PostgreSQL or mosquitto missing)'}`, () => {
  let layout: RunningLayout;
  let databaseUrl: string;
  let workDir: string;
  const site = parseYaml(fs.readFileSync(path.join(REPO, 'deploy/site.yaml'), 'utf8'));
  const tenant = site.tenants[0];
  const terminal = site.terminals[0];
  const pup = site.pickupPoints[0];

  beforeAll(async () => {
    // The ports are picked free here and bound later by the child processes; in between, another
    // test file's socket may take one (a CI run failed once: the instance exited on EADDRINUSE).
    // Such a start is thrown away whole (its database and folder) and made again with new ports.
    for (let attempt = 1; ; attempt++) {
      const u = new URL(pg!);
      u.pathname = `/locker_layout_${crypto.randomBytes(5).toString('hex')}`;
      databaseUrl = u.toString();
      workDir = fs.mkdtempSync(path.join(os.tmpdir(), 'local-layout-'));
      fs.chmodSync(workDir, 0o755);
      try {
        layout = await runLayout({ databaseUrl, workDir, httpPorts: { 'central-1': await freePort(), 'central-2': await freePort() }, readyTimeoutMs: 90_000 });
        return;
      } catch (e) {
        if (attempt >= 3 || !/EADDRINUSE|Address already in use/.test((e as Error).message)) throw e;
        await dropDatabase(databaseUrl).catch(() => undefined);
        fs.rmSync(workDir, { recursive: true, force: true });
      }
    }
  }, 300_000);

  afterAll(async () => {
    await layout?.stop();
    if (databaseUrl) await dropDatabase(databaseUrl).catch(() => undefined);
    if (workDir) fs.rmSync(workDir, { recursive: true, force: true });
  }, 60_000);

  const api = async (base: string, token: string, p: string, body: unknown) => {
    const res = await fetch(`${base}${p}`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` }, body: JSON.stringify(body) });
    const json = (await res.json()) as any;
    if (res.status !== 200 || json.success !== true) throw new Error(`${p}: ${res.status} ${JSON.stringify(json)}`);
    return json;
  };

  it('comes up provisioned: the one-shot steps ran, the password file is the broker user\'s (mode 600), both instances are ready', async () => {
    expect(Object.keys(layout.instances)).toEqual(['central-1', 'central-2']);
    expect(layout.plan).toEqual(localPlan(readCompose(), { databaseUrl, mqttUrl: layout.mqttUrl, workDir, httpPorts: layout.plan.steps.reduce((a, s) => (s.kind === 'instance' ? { ...a, [s.service]: Number(s.env.LOCKER_HTTP_PORT) } : a), {}) }));
    expect(fs.readFileSync(path.join(layout.logs, 'provision.log'), 'utf8')).toMatch(/\d+ created, \d+ updated, \d+ unchanged/);
    const st = fs.statSync(layout.passwdFile!);
    expect(st.mode & 0o777).toBe(0o600);
    if (process.getuid?.() === 0) expect(st.uid).not.toBe(0); // written as the compose file's user: (mosquitto)
    const users = fs.readFileSync(layout.passwdFile!, 'utf8').split('\n').filter(Boolean).map((l) => l.split(':')[0]).sort();
    expect(users).toEqual(['central-1', 'central-2', terminal.id].sort());
    for (const base of Object.values(layout.instances)) {
      const r = await fetch(`${base}/ready`);
      expect(r.status).toBe(200);
      expect(await r.json()).toMatchObject({ success: true, checks: { database: 'ok', broker: 'ok' } });
    }
  });

  it('a shipment booked on instance A is seen on instance B; the terminal, logged in with its provisioned secret, gets its codes as hashes', async () => {
    const [a, b] = [layout.instances['central-1']!, layout.instances['central-2']!];
    const tok = await fetch(`${a}/connect/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ grant_type: 'client_credentials', client_id: tenant.clientId, client_secret: tenant.clientSecret, scope: 'integration_api' }),
    });
    expect(tok.status).toBe(200);
    const token = ((await tok.json()) as { access_token: string }).access_token;

    // the terminal is online first (its status asks for a snapshot), then the booking arrives as an update
    const prefix = `locker/v1/t/${terminal.id}`;
    const got: any[] = [];
    const term = mqtt.connect(layout.mqttUrl, { clientId: terminal.id, username: terminal.id, password: terminal.secret, reconnectPeriod: 0, clean: true });
    await new Promise<void>((resolve, reject) => {
      term.once('connect', () => resolve());
      term.once('error', reject);
    });
    try {
      term.on('message', (topic, payload) => {
        if (topic === `${prefix}/down/codes`) got.push(JSON.parse(payload.toString()));
      });
      await term.subscribeAsync(`${prefix}/down/#`, { qos: 1 });

      // booked on A (a token A issued), read on B with the same token: one database, one signing key
      const account = await api(a, token, '/v1/Account/CreateAccount', { emailAddress: 'layout@example.test', firstName: 'Lay', lastName: 'Out', pickUpPointUid: pup.uid });
      const created = await api(a, token, '/v1/Logistics/CreateLocalShipment', { ToUserUid: account.userUid, PupUid: pup.uid, Dimension: { width: 30, height: 10, length: 40 }, AllowLargerLockers: true, AllowOverflowLockers: false, LockerUid: null });
      const uid = created.shipmentUid as string;
      const seen = await api(b, token, '/v1/Logistics/GetShipments', { pageNo: 1, pageSize: 10, shipmentUid: uid });
      expect(seen.items).toHaveLength(1);
      expect(seen.items[0]).toMatchObject({ shipmentUid: uid, stateCode: 'ReadyForDropoff' });
      const codes = (await api(b, token, '/v1/Logistics/GetShipmentAccessConfig', { shipmentUid: uid })).items as { usage: string; type: string; value: string }[];
      const opening = codes.filter((c) => c.usage === 'DropOff');
      expect(opening.length).toBeGreaterThan(0);

      await term.publishAsync(`${prefix}/up/status`, JSON.stringify(terminalStatus(0, null, terminal.id)), { qos: 1, retain: true });
      const hash = (v: string) => crypto.createHash('sha256').update(`locker-code:v1:${v}`).digest('hex');
      const deadline = Date.now() + 30_000;
      let snapshot: any;
      while (!(snapshot = got.find((m) => m.type === 'snapshot' && m.codes.some((c: any) => c.shipmentUid === uid)))) {
        if (Date.now() > deadline) throw new Error(`no snapshot with the booking's codes; got ${JSON.stringify(got).slice(0, 500)}`);
        await new Promise((r) => setTimeout(r, 100));
      }
      const mine = snapshot.codes.filter((c: any) => c.shipmentUid === uid);
      for (const c of opening) expect(mine).toContainEqual(expect.objectContaining({ usage: 'DropOff', type: c.type, hash: hash(c.value) }));
      // hashes only: no code value travels in clear
      for (const c of codes) expect(JSON.stringify(snapshot)).not.toContain(`"${c.value}"`);
    } finally {
      await term.endAsync();
    }
  }, 60_000);
});
