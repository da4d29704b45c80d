// Probes the external services the scale-out suites need (PostgreSQL, Mosquitto) once per run and
// hands the answer to every test file through vitest's provide/inject. Without them the suites
// that need them are skipped and say so; with LOCKER_REQUIRE_SERVICES=1 (set by .ci/run) a
// missing service fails the run instead.
import net from 'node:net';
import type { TestProject } from 'vitest/node';

export const PG_URL = process.env.LOCKER_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
export const MQTT_URL = process.env.LOCKER_TEST_MQTT_URL ?? 'mqtt://127.0.0.1:1883';

function reachableOnce(host: string, port: number, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect({ host, port });
    const done = (ok: boolean) => {
      s.destroy();
      resolve(ok);
    };
    s.setTimeout(timeoutMs, () => done(false));
    s.once('connect', () => done(true));
    s.once('error', () => done(false));
  });
}


// A loaded machine can be slow to accept: try a few times before calling a service absent.
async function reachable(host: string, port: number): Promise<boolean> {
  for (let i = 0; i < 4; i++) {
    if (await reachableOnce(host, port, 3000)) return true;
    await new Promise((r) => setTimeout(r, 500));
  }
  return false;
}

export default async function setup(project: TestProject) {
  const pg = new URL(PG_URL);
  const mq = new URL(MQTT_URL);
  const pgOk = await reachable(pg.hostname, Number(pg.port || 5432));
  const mqOk = await reachable(mq.hostname, Number(mq.port || 1883));
  const require = process.env.LOCKER_REQUIRE_SERVICES === '1';
  if (!pgOk) {
    const msg = `PostgreSQL not reachable at ${pg.host}: the PostgreSQL suites are SKIPPED`;
    if (require) throw new Error(msg + ' (LOCKER_REQUIRE_SERVICES=1)');
    console.warn('\n*** ' + msg + ' ***\n');
  }
  if (!mqOk) {
    const msg = `MQTT broker not reachable at ${mq.host}: the external-broker suites are SKIPPED`;
    if (require) throw new Error(msg + ' (LOCKER_REQUIRE_SERVICES=1)');
    console.warn('\n*** ' + msg + ' ***\n');
  }
  project.provide('pgUrl', pgOk ? PG_URL : null);
  project.provide('mqttUrl', mqOk ? MQTT_URL : null);
}
