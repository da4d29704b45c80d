// locker-central: the central service's command line.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseCliArgs } from '@locker/common';
import { ConfigError, loadConfig, type Config } from './config';
import { openDatabase } from './db/database';
import { systemClock } from './clock';
import { terminalDigestKey } from './auth/terminal-secret-digest';
import { applyProvisioning, parseProvisioning, ProvisioningError, readProvisioningFile } from './provisioning/apply';
import { provisioningJsonSchema } from './provisioning/schema';
import { aclUsers, buildPasswdFile, MqttPasswdError, parsePasswdFile, parseUserPasswords, writePasswdFile } from './mqtt/passwd';
import { runServer } from './server';
import { disagreementsReport, UnknownPupError } from './ops/disagreements-report';

export const DEMO_SITE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../provisioning/demo-site.yaml');

const HELP = `locker-central: the central service of the parcel-locker platform

Usage:
  locker-central serve [--config FILE] [--demo]   run the API (and the embedded MQTT broker)
  locker-central provision FILE [--config FILE]   apply a provisioning file (JSON or YAML); idempotent
  locker-central provisioning-schema              print the JSON Schema of provisioning files
  locker-central mqtt-passwd FILE --out PASSWD [--central USERS] [--acl ACL] [--mode 600]
                                                  write the Mosquitto password file of the scale-out
                                                  layout from a provisioning file's terminals and the
                                                  central users (USERS: user:password lines)
  locker-central check-config [--config FILE]     validate the configuration and print it (secrets hidden)
  locker-central disagreements [--pup UID] [--json] [--config FILE]
                                                  where the locks and the shipments disagree, per pick up
                                                  point (docs/state-machine.md, "Disagreements")
  locker-central --help

Options:
  --config FILE   configuration file (JSON or YAML); LOCKER_CONFIG does the same.
                  Environment variables LOCKER_* override it (see docs/configuration.md).
  --out, --central, --acl, --mode   mqtt-passwd only; see docs/provisioning.md
  --demo          load the demo site (${path.relative(process.cwd(), DEMO_SITE)}) and print demo credentials.
                  Runs on staging unless LOCKER_ENVIRONMENT says otherwise.
`;

function fail(msg: string, code = 2): never {
  console.error(`locker-central: ${msg}`);
  process.exit(code);
}

function config(file: string | undefined, overrides: Record<string, unknown> = {}): Config {
  try {
    return loadConfig({ file, overrides: overrides as never });
  } catch (e) {
    if (e instanceof ConfigError) fail(e.message);
    throw e;
  }
}

async function provision(cfg: Config, file: string) {
  let parsed;
  try {
    parsed = parseProvisioning(readProvisioningFile(file));
  } catch (e) {
    if (e instanceof ProvisioningError) fail(`${e.code}: ${e.message}`);
    throw e;
  }
  const db = await openDatabase({ url: cfg.database.url, sqliteSynchronous: cfg.database.sqliteSynchronous, sqliteCheckpoints: cfg.database.sqliteCheckpoints });
  try {
    await db.migrate();
    return await applyProvisioning(db.kysely, parsed, systemClock, {
      terminalDigestKey: terminalDigestKey({ pepper: cfg.mqtt.terminalSecretPepper, tokenSigningKey: cfg.auth.tokenSigningKey }),
      log: { warn: (o, msg) => console.error(`locker-central: ${msg} (${JSON.stringify(o)})`) },
    });
  } catch (e) {
    if (e instanceof ProvisioningError) fail(`${e.code}: ${e.message}`);
    throw e;
  } finally {
    await db.close();
  }
}

/** locker-central mqtt-passwd: the password file from the provisioning file's terminals and the central users. */
export function mqttPasswd(file: string, out: string, opts: { central?: string; acl?: string; mode?: number } = {}) {
  const read = (f: string) => {
    try {
      return fs.readFileSync(f, 'utf8');
    } catch (e) {
      throw new MqttPasswdError(`cannot read ${f}: ${(e as Error).message}`);
    }
  };
  const prov = parseProvisioning(readProvisioningFile(file));
  const result = buildPasswdFile({
    terminals: prov.terminals,
    centrals: opts.central ? parseUserPasswords(read(opts.central), opts.central) : [],
    existing: fs.existsSync(out) ? parsePasswdFile(read(out)) : new Map(),
    reserved: opts.acl ? aclUsers(read(opts.acl)) : undefined,
  });
  writePasswdFile(out, result.text, opts.mode ?? 0o600);
  return result;
}

export async function main(argv: string[]) {
  const { values, positionals } = parseCliArgs({
    args: argv,
    allowPositionals: true,
    options: {
      config: { type: 'string' },
      demo: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
      out: { type: 'string' },
      central: { type: 'string' },
      acl: { type: 'string' },
      mode: { type: 'string' },
      pup: { type: 'string' },
      json: { type: 'boolean' },
    },
  }, fail);
  const [cmd, ...rest] = positionals;
  if (values.help || !cmd || cmd === 'help') {
    console.log(HELP);
    return;
  }
  switch (cmd) {
    case 'serve': {
      const demo = !!values.demo;
      const cfg = config(values.config, demo && !process.env.LOCKER_ENVIRONMENT ? { environment: 'staging' } : {});
      if (demo) {
        const report = await provision(cfg, DEMO_SITE);
        console.log(`demo site loaded: ${report.created} created, ${report.updated} updated, ${report.unchanged} unchanged`);
      }
      await runServer(cfg, {
        mqttPortFallback: demo,
        afterStart: (svc, address) => {
          if (!demo) return;
          const demoFile = parseProvisioning(readProvisioningFile(DEMO_SITE));
          const lines = [
            '',
            `  Locker central is running (${cfg.environment}, ${cfg.database.url.startsWith('postgres') ? 'PostgreSQL' : `SQLite ${cfg.database.url}`})`,
            `  API:        ${address}/v1/   (token: POST ${address}/connect/token)`,
            `  API docs:   ${address}/docs`,
            `  MQTT:       ${svc.ctx.bus ? `${svc.ctx.bus.kind} broker ${svc.ctx.bus.address()}` : 'off'}   (terminals connect here)`,
            `  Demo tenants (client_id / client_secret):`,
            ...demoFile.tenants.map((t) => `    ${t.clientId} / ${t.clientSecret}`),
            `  Try:  curl -s -d grant_type=client_credentials -d client_id=${demoFile.tenants[0]?.clientId} -d client_secret=${demoFile.tenants[0]?.clientSecret} -d scope=integration_api ${address}/connect/token`,
            '',
          ];
          console.log(lines.join('\n'));
        },
      });
      return;
    }
    case 'provision': {
      const file = rest[0];
      if (!file) fail('provision needs a FILE');
      const report = await provision(config(values.config), file);
      for (const c of report.changes) console.log(c);
      console.log(`${report.created} created, ${report.updated} updated, ${report.unchanged} unchanged`);
      return;
    }
    case 'mqtt-passwd': {
      const file = rest[0];
      if (!file || !values.out) fail('mqtt-passwd needs a provisioning FILE and --out PASSWD');
      const mode = values.mode ? Number.parseInt(values.mode, 8) : 0o600;
      if (!Number.isInteger(mode) || mode < 0 || mode > 0o777) fail(`--mode ${values.mode}: expected an octal file mode such as 600`);
      try {
        const { changes } = mqttPasswd(file, values.out, { central: values.central, acl: values.acl, mode });
        for (const c of changes) console.log(c);
        console.log(`wrote ${values.out}; reload Mosquitto to apply it (SIGHUP, e.g. docker compose kill -s HUP mosquitto)`);
      } catch (e) {
        if (e instanceof MqttPasswdError) fail(e.message);
        if (e instanceof ProvisioningError) fail(`${e.code}: ${e.message}`);
        throw e;
      }
      return;
    }
    case 'disagreements': {
      try {
        process.stdout.write(await disagreementsReport(config(values.config), { pup: values.pup, json: !!values.json, clock: systemClock }));
      } catch (e) {
        if (e instanceof UnknownPupError) fail(e.message);
        throw e;
      }
      return;
    }
    case 'provisioning-schema':
      console.log(JSON.stringify(provisioningJsonSchema(), null, 2));
      return;
    case 'check-config': {
      const cfg = config(values.config);
      const hideUrl = (u: string) => u.replace(/\/\/([^:@/]+):[^@/]+@/, '//$1:***@');
      const shown = {
        ...cfg,
        auth: { ...cfg.auth, tokenSigningKey: cfg.auth.tokenSigningKey ? '[set]' : undefined },
        database: { ...cfg.database, url: hideUrl(cfg.database.url) },
        mqtt: { ...cfg.mqtt, url: hideUrl(cfg.mqtt.url), password: cfg.mqtt.password ? '[set]' : undefined, terminalSecretPepper: cfg.mqtt.terminalSecretPepper ? '[set]' : undefined },
      };
      console.log(JSON.stringify(shown, null, 2));
      return;
    }
    default:
      fail(`unknown command ${cmd}; see --help`);
  }
}

const isMain = process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url);
if (isMain || process.env.LOCKER_CLI_MAIN === '1') {
  main(process.argv.slice(2)).catch((e) => {
    console.error(e);
    process.exit(1);
  });
}
