// TerminalGateway over MQTT: an unlock becomes a command on the terminal's down/commands topic;
// the terminal executes it at most once and answers on up/acks (docs/edge-protocol.md). The
// command goes to an online terminal of the pick up point; no ack within edge.commandTimeoutMs is
// TERMINAL_TIMEOUT, and the command carries that deadline so a late delivery is not executed.
import type { Kysely } from 'kysely';
import { AckMessage, edgeTopics, parseMessage, type UnlockCommandMessage } from '@locker/common';
import type { Database } from '../db/schema';
import type { MessageBus } from '../mqtt/bus';
import type { Logger } from '../logger';
import { newUid } from '../ids';
import type { TerminalGateway, UnlockCommand, UnlockResult } from '../terminals/gateway';

export interface MqttTerminalGatewayOptions {
  bus: MessageBus;
  db: Kysely<Database>;
  log: Logger;
  timeoutMs: number;
}

export class MqttTerminalGateway implements TerminalGateway {
  private readonly waiters = new Map<string, (ack: AckMessage) => void>();
  private subscribed: Promise<void> | null = null;
  private readonly log: Logger;

  constructor(private readonly opts: MqttTerminalGatewayOptions) {
    this.log = opts.log.child({ ns: 'central.edge.gateway' });
  }

  private ensureSubscribed(): Promise<void> {
    this.subscribed ??= this.opts.bus
      .subscribe(edgeTopics.allUp('acks'), (_topic, payload) => {
        const ack = parseMessage(AckMessage, payload);
        if (!ack) return;
        this.waiters.get(ack.commandId)?.(ack);
      })
      .catch((err) => {
        this.subscribed = null;
        throw err;
      });
    return this.subscribed;
  }

  async unlock(cmd: UnlockCommand): Promise<UnlockResult> {
    const terminals = await this.opts.db
      .selectFrom('terminals as t')
      .leftJoin('edge_terminals as e', 'e.terminal_id', 't.id')
      .select(['t.id', 'e.online', 'e.status_at'])
      .where('t.pup_uid', '=', cmd.pupUid)
      .execute();
    if (!terminals.length) return { ok: false, code: 'TERMINAL_OFFLINE', message: `no terminal is provisioned for pick up point ${cmd.pupUid}` };
    const online = terminals.filter((t) => Number(t.online) === 1).sort((a, b) => String(b.status_at ?? '').localeCompare(String(a.status_at ?? '')));
    if (!online.length) return { ok: false, code: 'TERMINAL_OFFLINE', message: `the terminal of pick up point ${cmd.pupUid} is offline` };
    const terminalId = online[0]!.id;
    await this.ensureSubscribed();
    const commandId = newUid();
    const issued = Date.now(); // the terminal compares with its own (NTP) clock: real time, not the service clock
    const msg: UnlockCommandMessage = {
      v: 1,
      type: 'unlock',
      commandId,
      lockerUid: cmd.lockerUid,
      bus: cmd.bus,
      board: cmd.boardAddress,
      lock: cmd.lockNumber,
      shipmentUid: cmd.shipmentUid,
      reason: cmd.reason,
      issuedAt: new Date(issued).toISOString(),
      expiresAt: new Date(issued + this.opts.timeoutMs).toISOString(),
    };
    let timer: NodeJS.Timeout | undefined;
    const answered = new Promise<AckMessage | null>((resolve) => {
      timer = setTimeout(() => resolve(null), this.opts.timeoutMs);
      this.waiters.set(commandId, resolve);
    });
    try {
      await this.opts.bus.publish(edgeTopics.down(terminalId, 'commands'), JSON.stringify(msg), { qos: 1 });
    } catch (err) {
      clearTimeout(timer);
      this.waiters.delete(commandId);
      this.log.warn({ terminal: terminalId, err: (err as Error).message }, 'unlock command not published');
      return { ok: false, code: 'TERMINAL_OFFLINE', message: 'the unlock command could not be sent to the terminal' };
    }
    const ack = await answered;
    clearTimeout(timer);
    this.waiters.delete(commandId);
    this.log.info({ terminal: terminalId, commandId, locker: cmd.lockerUid, ok: ack?.ok ?? null, error: ack && !ack.ok ? ack.error : undefined }, 'unlock command');
    if (!ack) return { ok: false, code: 'TERMINAL_TIMEOUT', message: `the terminal did not answer within ${this.opts.timeoutMs} ms` };
    if (ack.ok) return { ok: true };
    if (ack.error === 'EXPIRED') return { ok: false, code: 'TERMINAL_TIMEOUT', message: `the terminal received the command too late (${ack.message})` };
    // the terminal's write to the board broke off (or the command was begun before its restart)
    if (ack.error === 'OUTCOME_UNKNOWN') return { ok: false, code: 'OUTCOME_UNKNOWN', message: `the lock may or may not have opened (${ack.message})` };
    return { ok: false, code: 'HARDWARE_FAULT', message: `${ack.error}: ${ack.message}` };
  }
}
