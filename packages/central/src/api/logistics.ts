// The Logistics endpoints (shipments): creating (logistics/create.ts), managing
// (logistics/manage.ts) and reading (logistics/read.ts). Registers the expiry worker, and on
// PostgreSQL the refresh of stored items for changed names.
import type { FastifyInstance } from 'fastify';
import type { AppContext } from '../context';
import { registerWorkerFactory } from '../workers';
import { ExpiryWorker } from '../shipments/expiry';
import { ShipmentItemRefresher } from '../shipments/item-refresh';
import { createRoutes } from './logistics/create';
import { manageRoutes } from './logistics/manage';
import { readRoutes } from './logistics/read';

export const expiryWorkerFactory = (ctx: AppContext) => new ExpiryWorker(ctx);

export async function logisticsRoutes(app: FastifyInstance, ctx: AppContext): Promise<void> {
  await createRoutes(app, ctx);
  await manageRoutes(app, ctx);
  await readRoutes(app, ctx);
}

registerWorkerFactory(expiryWorkerFactory);
registerWorkerFactory((ctx) => (ctx.db.engine === 'postgres' ? new ShipmentItemRefresher(ctx) : null));
