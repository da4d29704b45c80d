// Idempotency-Key support for create and cancel calls (owned by the callbacks/idempotency area).
// Registered by app.ts; routes opt in with `idempotent: true`.
import type { FastifyInstance } from 'fastify';
import type { AppContext } from '../context';

export async function idempotencyPlugin(_app: FastifyInstance, _ctx: AppContext): Promise<void> {}
