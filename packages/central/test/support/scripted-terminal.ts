// A terminal played by a raw MQTT client on the central's embedded broker (edge.test.ts,
// code-push.test.ts): it logs in with its provisioned secret, subscribes to its down/ topics and
// records what the central sends, newest last.
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
