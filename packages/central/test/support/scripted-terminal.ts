// A terminal played by a raw MQTT client on the central's embedded broker (edge.test.ts,
// code-push.test.ts): it logs in with its provisioned secret, subscribes to its down/ topics and
// records what the central sends, newest last.
import crypto from 'node:crypto';
import mqtt, { type MqttClient } from 'mqtt';
import type { TestService } from './harness';

export interface ScriptedTerminal {
  term: MqttClient;
  /** the terminal's topic prefix, e.g. locker/v1/t/term-a1 */
  prefix: string;
  /** every message received on down/#: its last topic level (codes, commands, ...) and JSON body */
  got: { kind: string; body: any }[];
  /** the newest codes message (snapshot or delta), if any */
  lastCodes(): any;
  close(): void;
}

export async function connectScriptedTerminal(t: TestService, id = 'term-a1', secret = 'terminal-secret-a1'): Promise<ScriptedTerminal> {
  const prefix = `locker/v1/t/${id}`;
  const got: { kind: string; body: any }[] = [];
  const term = mqtt.connect(t.ctx.bus!.address()!, { clientId: id, username: id, password: secret, reconnectPeriod: 0 });
  await new Promise<void>((resolve, reject) => {
    term.once('connect', () => resolve());
    term.once('error', reject);
  });
  term.on('message', (topic, payload) => got.push({ kind: topic.split('/').pop()!, body: JSON.parse(payload.toString()) }));
  await term.subscribeAsync(`${prefix}/down/#`, { qos: 1 });
  return { term, prefix, got, lastCodes: () => [...got].reverse().find((g) => g.kind === 'codes')?.body, close: () => void term.end(true) };
}

/** An up/status message of a terminal holding this code version. */
export function terminalStatus(version: number, epoch: string | null, terminalId = 'term-a1') {
  return {
    v: 1, state: 'online', terminalId, agentVersion: 'test', startedAt: new Date().toISOString(), at: new Date().toISOString(),
    codes: { epoch, version, count: 0 }, journal: { unsent: 0, lastSeq: 0 }, buses: [],
  };
}

/**
 * An online up/status naming `journalId` as the journal the terminal writes (null: an agent that
 * names none), retained, made at `at` on the terminal's clock (default: the real clock).
 */
export async function publishJournalStatus(tt: ScriptedTerminal, journalId: string | null, at?: Date): Promise<void> {
  const terminalId = tt.prefix.split('/').pop()!;
  const base = { ...terminalStatus(0, null, terminalId), ...(at ? { at: at.toISOString() } : {}) };
  await tt.term.publishAsync(`${tt.prefix}/up/status`, JSON.stringify({ ...base, journal: { ...base.journal, ...(journalId ? { id: journalId } : {}) } }), { qos: 1, retain: true });
}

/** One up/events message of `journalId` (null: an agent older than journal ids) at `at`; its eventId. `fields` may override `at`. */
export async function publishEvent(tt: ScriptedTerminal, journalId: string | null, seq: number, type: string, fields: Record<string, unknown>, at: Date): Promise<string> {
  const eventId = crypto.randomUUID();
  const terminalId = tt.prefix.split('/').pop()!;
  await tt.term.publishAsync(`${tt.prefix}/up/events`, JSON.stringify({ v: 1, eventId, seq, terminalId, ...(journalId ? { journalId } : {}), at: at.toISOString(), type, ...fields }), { qos: 1 });
  return eventId;
}

/** The down/eventAcks the terminal received, oldest first. */
export function eventAcks(tt: ScriptedTerminal): { journalId: string; upTo: number; resendFrom?: number }[] {
  return tt.got.filter((g) => g.kind === 'eventAcks').map((g) => g.body);
}
