// `locker-central disagreements`: the lock disagreements now, per pick up point, for an operator
// (edge/observations.ts; docs/state-machine.md, "Disagreements").
import type { Config } from '../config';
import { openDatabase } from '../db/database';
import type { Clock } from '../clock';
import { currentDisagreements, type Disagreement } from '../edge/observations';

const WHAT: Record<string, string> = {
  'item-without-dropoff': 'an item is in the locker, the shipment is not dropped off',
  'item-without-shipment': 'an item is in the locker, no active shipment holds it',
  'empty-but-ready-for-pickup': 'the locker is empty, the shipment waits to be picked up',
  'door-left-open': 'the door was left open',
  jammed: 'the lock did not open (jam)',
  'board-offline': 'the lock board does not answer',
};

/** Plain text: a block per pick up point (its name and uid), a line per disagreement. */
export function formatDisagreements(list: readonly Disagreement[], pupUid?: string): string {
  if (!list.length) return pupUid ? `no disagreements at pick up point ${pupUid}\n` : 'no disagreements\n';
  const lines: string[] = [];
  const byPup = new Map<string, Disagreement[]>();
  for (const d of list) byPup.set(d.pupUid, [...(byPup.get(d.pupUid) ?? []), d]);
  const nameW = Math.max(...list.map((d) => d.lockerName.length));
  const kindW = Math.max(...list.map((d) => d.kind.length));
  for (const [pup, ds] of byPup) {
    lines.push(`${ds[0]!.pupName ?? pup} (${pup}): ${ds.length} disagreement${ds.length === 1 ? '' : 's'}`);
    for (const d of ds) {
      const shipment = d.shipmentUid ? `  shipment ${d.shipmentUid} ${d.state}` : '';
      lines.push(`  ${d.lockerName.padEnd(nameW)}  ${d.kind.padEnd(kindW)}  since ${d.since}${shipment}  (${WHAT[d.kind] ?? d.kind})`);
    }
  }
  return `${lines.join('\n')}\n`;
}

export class UnknownPupError extends Error {}

/** Opens the configured database, reads the disagreements, returns the report (text or JSON). */
export async function disagreementsReport(cfg: Config, opts: { pup?: string; json?: boolean; clock: Clock }): Promise<string> {
  const db = await openDatabase({ url: cfg.database.url, sqliteSynchronous: cfg.database.sqliteSynchronous, sqliteCheckpoints: cfg.database.sqliteCheckpoints });
  try {
    await db.migrate();
    if (opts.pup && !(await db.kysely.selectFrom('pups').select('uid').where('uid', '=', opts.pup).executeTakeFirst())) throw new UnknownPupError(`no pick up point ${opts.pup}`);
    const list = await currentDisagreements(db.kysely, { now: opts.clock.now(), graceMs: cfg.edge.disagreementGraceSeconds * 1000, pupUid: opts.pup });
    return opts.json ? `${JSON.stringify(list, null, 2)}\n` : formatDisagreements(list, opts.pup);
  } finally {
    await db.close();
  }
}
