// A pino destination that keeps every line written to it: `lines` as written, `entries` parsed.
import { Writable } from 'node:stream';

export function captureLog(): { destination: Writable; lines: string[]; entries: any[] } {
  const lines: string[] = [];
  const entries: any[] = [];
  const destination = new Writable({
    write(chunk, _enc, cb) {
      for (const l of String(chunk).split('\n').filter(Boolean)) {
        lines.push(l);
        entries.push(JSON.parse(l));
      }
      cb();
    },
  });
  return { destination, lines, entries };
}
