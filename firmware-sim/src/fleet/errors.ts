/** Errors of the fleet simulator (`locker-sim fleet`): a string code tests and callers can match on. */
export type FleetErrorCode =
  | 'FLEET_ARGS_INVALID'
  | 'FLEET_PROVISIONING_UNREADABLE'
  | 'FLEET_PROVISIONING_INVALID'
  | 'FLEET_NO_SECRET'
  | 'FLEET_BROKER_URL_INVALID'
  | 'FLEET_CA_UNREADABLE'
  | 'FLEET_OUT_EXISTS';

export class FleetError extends Error {
  constructor(
    readonly code: FleetErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'FleetError';
  }
}
