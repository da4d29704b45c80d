// `npm run generate:client`: writes packages/client/src/generated/api.ts from the OpenAPI document
// of the central service in this tree (scripts/openapi.ts). Commit the result; the staleness test
// compares the committed file with a fresh generation. `--check` only compares (exit 1 when stale).
import fs from 'node:fs';
import path from 'node:path';
import { expectedTypes, GENERATED_FILE } from './openapi';

const check = process.argv.includes('--check');
const text = await expectedTypes();
const current = fs.existsSync(GENERATED_FILE) ? fs.readFileSync(GENERATED_FILE, 'utf8') : null;
const rel = path.relative(process.cwd(), GENERATED_FILE);
if (check) {
  if (current !== text) {
    process.stderr.write(`${rel} is stale: run npm run generate:client and commit the result\n`);
    process.exit(1);
  }
  process.stdout.write(`${rel} is up to date\n`);
} else if (current === text) {
  process.stdout.write(`${rel} is up to date\n`);
} else {
  fs.mkdirSync(path.dirname(GENERATED_FILE), { recursive: true });
  fs.writeFileSync(GENERATED_FILE, text);
  process.stdout.write(`wrote ${rel}\n`);
}
