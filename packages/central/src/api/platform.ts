// /v1/Platform/: callback registration (product.md, Callbacks). Importing this module also
// registers the callback delivery worker, the idempotency-key sweeper and the provisioning hook
// that applies a tenant's `callback` entry, so they exist wherever the app is built.
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { AppContext } from '../context';
import { v1Post } from '../http/route';
import { envelope } from '../http/envelope';
import { toDbTime } from '../ids';
import { registerWorkerFactory } from '../workers';
import { OutboxPurger } from '../callbacks/purge';
import { registerTenantProvisioningHook } from '../provisioning/apply';
import { AUTH_KEY_RE, AUTH_TYPES, applyProvisionedCallback, callbackTargetProblem, callbackUrlProblem, configureCallback, loggableOrigin } from '../callbacks/registration';
import { resolverFor } from '../net/resolve';
import { invalidRequest } from '../errors';
import { CallbackDeliveryWorker } from '../callbacks/worker';
import { IdempotencySweeper } from '../http/idempotency';

export const ConfigureCallbackRequest = z.object({
  url: z
    .string()
    .nullable()
    .superRefine((v, c) => {
      const p = v == null ? null : callbackUrlProblem(v);
      if (p) c.addIssue({ code: 'custom', message: p });
    })
    .describe(
      'http(s) URL the ShipmentStatusUpdate messages are POSTed to; null disables callbacks. Its host must be, and resolve to, public internet addresses only (no loopback, private, link-local or cloud metadata targets; see docs/callbacks.md "Allowed targets")',
    ),
  authType: z.enum(AUTH_TYPES).nullish().describe('None, HMAC or ApiKey; omitted keeps the current one (HMAC the first time)'),
  resetKey: z.boolean().nullish().describe('true makes a new key (unless authKey is given)'),
  authKey: z
    .string()
    .regex(AUTH_KEY_RE, 'must be 16 to 256 printable ASCII characters without spaces')
    .nullish()
    .describe('use this key instead of a generated one'),
});

export const ConfigureCallbackResponse = envelope({
  authKey: z.string().optional().describe('the key, present only when it changed (a new one was made or the given one was stored)'),
  changed: z.boolean().describe('true when the registration changed'),
});

export async function platformRoutes(app: FastifyInstance, ctx: AppContext): Promise<void> {
  const log = ctx.log.child({ ns: 'central.callbacks' });
  v1Post(
    app,
    {
      path: '/v1/Platform/ConfigureCallback',
      summary: 'Register, change or disable the callback URL for shipment status updates',
      description:
        'The first call with a url enables callbacks and generates a key; a call with only a new url keeps the key; a new authType or resetKey makes a new key unless authKey is given; url null disables. See docs/callbacks.md.',
      tags: ['Platform'],
      body: ConfigureCallbackRequest,
      response: ConfigureCallbackResponse,
      handler: async (body, req) => {
        if (body.url != null) {
          // The host, in every spelling, and each address it resolves to now (the worker checks again
          // on every connection: DNS rebinding).
          const problem = await callbackTargetProblem(body.url, { allowPrivateNetworks: ctx.config.callbacks.allowPrivateNetworks }, resolverFor(ctx));
          if (problem) {
            log.info({ tenantUid: req.tenant.uid, to: loggableOrigin(body.url), problem }, 'callback url refused');
            throw invalidRequest(`url: ${problem}`);
          }
        }
        const out = await configureCallback(ctx.db.kysely, req.tenant.uid, body, toDbTime(ctx.clock.now()), ctx.db.engine);
        if (out.changed) {
          log.info(
            { tenantUid: req.tenant.uid, enabled: out.next.url != null, to: loggableOrigin(out.next.url), authType: out.next.authType, keyChanged: out.newKey != null },
            'callback registration changed',
          );
        }
        return { changed: out.changed, ...(out.newKey ? { authKey: out.newKey } : {}) };
      },
    },
    { environment: ctx.config.environment },
  );
}

registerWorkerFactory((ctx) => (ctx.config.callbacks.enabled ? new CallbackDeliveryWorker(ctx) : null));
registerWorkerFactory((ctx) => new IdempotencySweeper(ctx));
registerWorkerFactory((ctx) => new OutboxPurger(ctx));
registerTenantProvisioningHook(async (trx, tenantUid, tenant, now) => applyProvisionedCallback(trx, tenantUid, tenant.callback, now));
