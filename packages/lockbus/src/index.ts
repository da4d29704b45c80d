export * from './codec/index';
export * from './errors';
export * from './transport/index';
export * from './driver/board-state';
export * from './driver/lock-bus';
export { LockBusManager } from './driver/manager';
export { ScannerReader, KeypadInput, type Credential, type ScannerReaderOptions, type ScannerReaderEvents } from './scanner/scanner-reader';
export { claimPorts, findPortHolder, portKey, claimAlive, DEFAULT_AGENT_STATE_DIRS, CLAIMS_SUBDIR, type PortClaim } from './port-claim';
