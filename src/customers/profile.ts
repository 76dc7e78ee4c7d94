/**
 * PATCH /v1/customers/{id}: changes name, email or metadata after creation (a deposit
 * sets them only when it creates the customer). PostgreSQL is written first, after the
 * customer's outbox is drained so that its row exists; Redis, the copy the API reads,
 * second. A crash between the two leaves drift that reconcile repairs from PostgreSQL.
 */
import type { Router } from 'express';
import { exactRouter } from '../http/router.js';
import type { RedisClient } from '../redis/client.js';
import type { Logger } from 'pino';
import { z } from 'zod';
import { ApiError } from '../errors/catalogue.js';
import { authOf, requireKeyType } from '../http/auth.js';
import { strictBody } from '../http/validate.js';
import type { LedgerQueries } from '../ledger/queries.js';
import { createCustomerQueries } from '../ledger/queries.js';
import type { LedgerService } from '../ledger/service.js';
import { LedgerOutbox } from '../ledger/outbox.js';
import { describeRoute } from '../openapi/registry.js';
import { customerProfileSchema } from './routes.js';
import type { DatabasePool } from 'slonik';

const patchSchema = z.object({
  name: z.string().max(256).nullable().optional(),
  email: z.string().max(320).email().nullable().optional(),
  metadata: z.record(z.unknown()).nullable().optional(),
});

describeRoute({
  method: 'PATCH',
  path: '/v1/customers/:customer_id',
  tag: 'Customers',
  callers: ['project'],
  summary: "Change a customer's name, email or metadata",
  description: 'Any of the fields; null clears one.',
  body: patchSchema.strict(),
  responses: { 200: { description: 'The profile', schema: customerProfileSchema.openapi('CustomerProfile') } },
  errors: ['customer_not_found'],
});

export function profileRoutes(deps: { ledger: LedgerService; redis: RedisClient; db: DatabasePool; ledgerQueries: LedgerQueries; prefix: string; logger: Logger }): Router {
  const r = exactRouter();
  const customers = createCustomerQueries(deps.db);
  const outbox = new LedgerOutbox(deps.redis, deps.ledgerQueries, deps.prefix, deps.logger);

  r.patch('/v1/customers/:customer_id', requireKeyType('project'), async (req, res) => {
    const id = String(req.params.customer_id);
    const patch = strictBody(req, patchSchema);
    const { scope } = authOf(res);
    const k = deps.ledger.keys(scope, id);
    if (!(await deps.redis.hexists(k.meta, 'created_at'))) throw new ApiError('customer_not_found');
    await outbox.drain(k.base);
    if (!(await customers.updateProfile(scope.projectId, id, patch))) throw new ApiError('customer_not_found');
    const tx = deps.redis.multi();
    for (const field of ['name', 'email'] as const) {
      const v = patch[field];
      if (v === null) tx.hdel(k.meta, field);
      else if (v !== undefined) tx.hset(k.meta, field, v);
    }
    if (patch.metadata === null) tx.hdel(k.meta, 'metadata');
    else if (patch.metadata !== undefined) tx.hset(k.meta, 'metadata', JSON.stringify(patch.metadata));
    await tx.exec();
    const view = await deps.ledger.view(scope, id);
    res.json({
      id,
      name: view!.profile.name,
      email: view!.profile.email,
      metadata: view!.profile.metadata === null ? {} : JSON.parse(view!.profile.metadata),
      created_at: new Date(Number(view!.profile.created_at)).toISOString(),
    });
  });
  return r;
}
