// The registry of background-worker factories. Kept free of imports so any area module can
// register at load time without an import cycle through service.ts -> app.ts -> api/*.
import type { AppContext, Worker } from './context';

export type WorkerFactory = (ctx: AppContext) => Worker | null;
const workerFactories: WorkerFactory[] = [];

export function registerWorkerFactory(f: WorkerFactory): void {
  if (!workerFactories.includes(f)) workerFactories.push(f);
}

export function workerFactoryList(): readonly WorkerFactory[] {
  return workerFactories;
}
