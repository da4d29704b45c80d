// locker-central: the central service's command line.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { ConfigError, loadConfig, type Config } from './config';
import { openDatabase } from './db/database';
import { systemClock } from './clock';
import { applyProvisioning, parseProvisioning, ProvisioningError, readProvisioningFile } from './provisioning/apply';
import { provisioningJsonSchema } from './provisioning/schema';
import { runServer } from './server';

export const DEMO_SITE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../provisioning/demo-site.yaml');

const HELP = `locker-central: the central service of the parcel-locker platform

Usage:
  locker-central serve [--config FILE] [--demo]   run the API (and the embedded MQTT broker)
  locker-central provision FILE [--config FILE]   apply a provisioning file (JSON or YAML); idempotent
  locker-central provisioning-schema              print the JSON Schema of provisioning files
  locker-central check-config [--config FILE]     validate the configuration and print it (secrets hidden)
  locker-central --help

Options:
  --config FILE   configuration file (JSON or YAML); LOCKER_CONFIG does the same.
                  Environment variables LOCKER_* override it (see docs/configuration.md).
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
  const db = await openDatabase({ url: cfg.database.url, sqliteSynchronous: cfg.database.sqliteSynchronous });
  try {
    await db.migrate();
    return await applyProvisioning(db.kysely, parsed, systemClock);
  } catch (e) {
    if (e instanceof ProvisioningError) fail(`${e.code}: ${e.message}`);
    throw e;
  } finally {
    await db.close();
  }
}

export async function main(argv: string[]) {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { config: { type: 'string' }, demo: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
  });
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
        mqtt: { ...cfg.mqtt, url: hideUrl(cfg.mqtt.url), password: cfg.mqtt.password ? '[set]' : undefined },
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
