// The central side of the edge sync. Importing this module registers the EdgeSync worker (it runs
// whenever the service has an MQTT bus).
import { registerWorkerFactory } from '../workers';
import { EdgeSync } from './sync';

export { EdgeSync, notifyCodesChanged } from './sync';
export { MqttTerminalGateway, type MqttTerminalGatewayOptions } from './gateway';
export { currentCodes, diffCodes, entryDigest } from './codes';

registerWorkerFactory((ctx) => (ctx.bus ? new EdgeSync(ctx, ctx.bus) : null));
