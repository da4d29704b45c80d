// How the central service reaches a PUP's terminal (to unlock a door). The edge-sync work
// implements this over MQTT; until a terminal is connected, unlocking answers "not connected".
export interface UnlockCommand {
  pupUid: string;
  lockerUid: string;
  bus: string;
  boardAddress: number;
  lockNumber: number;
  shipmentUid: string | null;
  reason: 'api' | 'simulate';
}

export type UnlockResult = { ok: true } | { ok: false; code: 'TERMINAL_OFFLINE' | 'TERMINAL_TIMEOUT' | 'HARDWARE_FAULT' | 'OUTCOME_UNKNOWN'; message: string };

export interface TerminalGateway {
  unlock(cmd: UnlockCommand): Promise<UnlockResult>;
}

/** No terminal connected: every unlock that would reach hardware fails (-> UnlockFailed). */
export class DisconnectedTerminalGateway implements TerminalGateway {
  async unlock(cmd: UnlockCommand): Promise<UnlockResult> {
    return { ok: false, code: 'TERMINAL_OFFLINE', message: `no terminal connected for pick up point ${cmd.pupUid}` };
  }
}

/** In-memory terminal for unit tests: records unlocks, answers as told. */
export class FakeTerminalGateway implements TerminalGateway {
  readonly unlocks: UnlockCommand[] = [];
  result: UnlockResult = { ok: true };
  async unlock(cmd: UnlockCommand): Promise<UnlockResult> {
    this.unlocks.push(cmd);
    return this.result;
  }
}
