/** Errors thrown by the simulator carry a string code that tests and callers can match on. */
export type SimErrorCode =
  | 'SIM_CONFIG_INVALID'
  | 'SIM_UNKNOWN_BUS'
  | 'SIM_UNKNOWN_SCANNER'
  | 'SIM_UNKNOWN_BOARD'
  | 'SIM_UNKNOWN_LOCK'
  | 'SIM_NOT_STARTED'
  | 'SIM_ALREADY_STARTED'
  | 'SIM_SOCAT_MISSING'
  | 'SIM_SOCAT_FAILED'
  | 'SIM_PATH_IN_USE'
  | 'SIM_UNPLUGGED'
  | 'SIM_BAD_COMMAND';

export class SimError extends Error {
  constructor(
    readonly code: SimErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'SimError';
  }
}
