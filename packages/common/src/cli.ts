// Command-line manners shared by every CLI: a bad flag is one clear line and exit 2, never a stack.
import { parseArgs, type ParseArgsConfig } from 'node:util';

/**
 * node:util parseArgs, with its errors (an unknown option, a missing value, a value where none is
 * taken) turned into one line for `fail` ("unknown option --bogus (see --help)").
 */
export function parseCliArgs<T extends ParseArgsConfig>(config: T, fail: (msg: string) => never): ReturnType<typeof parseArgs<T>> {
  try {
    return parseArgs(config);
  } catch (err) {
    const e = err as Error & { code?: string };
    if (!e.code?.startsWith('ERR_PARSE_ARGS')) throw err;
    const unknown = /^Unknown option '([^']+)'/.exec(e.message);
    const first = e.message.split('. ')[0]!.replace(/\.$/, '');
    return fail(`${unknown ? `unknown option ${unknown[1]}` : first} (see --help)`);
  }
}
