// Routes of this area are registered here (placeholder until the area lands).
import type { FastifyInstance } from 'fastify';
import type { AppContext } from '../context';

export async function accountRoutes(_app: FastifyInstance, _ctx: AppContext): Promise<void> {}
