// @locker/firmware-sim: a lock-board and scanner simulator reachable over real serial devices
// (socat pseudo-terminals) or TCP. See firmware-sim/README.md.
export { Simulator, validateOptions } from './simulator';
export { SimBus, describeRequest, describeReply, hex } from './bus';
export { SimLock, SimBoard } from './board';
export { SimScanner, SUFFIXES } from './scanner';
export { SimError, type SimErrorCode } from './errors';
export { noFaults, GARBAGE_BYTES, type Faults, type LockRef } from './faults';
export { doorStep, initialDoor, type DoorState, type DoorInput, type DoorEffect, type DoorEvent } from './door';
export { charTimeMs, wireTimeMs, WirePacer } from './wire';
export { liveSocatCount } from './pty';
export type * from './types';
export { runCommand, busStatus, HELP, type CommandContext } from './commands';
export { parseArgs, parseBusSpec, parseScannerSpec, loadConfigFile, defaultOptions, USAGE, DEFAULT_DIR, type CliConfig } from './config';
export { ControlServer, parseControlSpec, type ControlReply, type ControlServerOptions } from './control';
export { Fleet, percentile, type FleetOptions, type FleetMetrics } from './fleet/fleet';
export { SimTerminal, EVENT_WINDOW, type TerminalCredentials, type TerminalOptions, type TerminalObserver } from './fleet/terminal';
export { generateFleetSite, generateSecret, readFleetTerminals, siteToYaml, type FleetSite, type GenerateOptions } from './fleet/provisioning';
export { FleetError, type FleetErrorCode } from './fleet/errors';
export { parseFleetArgs, fleetMain, FLEET_USAGE, type FleetArgs, type FleetRunArgs, type FleetGenerateArgs } from './fleet/cli';
