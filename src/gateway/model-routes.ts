/**
 * GET /v1/models: the project's active models (docs/API.md, "GET /v1/models"); a customer-scoped
 * key with an allowed_models list sees only those. Not billed, needs no customer.
 */
import type { Router } from 'express';
import { exactRouter } from '../http/router.js';
import { z } from 'zod';
import { modelEntry, modelEntrySchema, type ModelQueries } from '../admin/models.js';
import { describeRoute } from '../openapi/registry.js';
import { authOf, requireKeyType } from '../http/auth.js';

describeRoute({
  method: 'GET',
  path: '/v1/models',
  tag: 'Gateway',
  callers: ['project', 'customer'],
  summary: "The project's active models",
  description: 'A customer-scoped key with `allowed_models` sees only those.',
  responses: { 200: { description: 'The models', schema: z.object({ object: z.literal('list'), data: z.array(modelEntrySchema) }).strict() } },
});

export function modelRoutes(models: ModelQueries): Router {
  const r = exactRouter();
  r.get('/v1/models', requireKeyType('project', 'customer'), async (_req, res) => {
    const { key, scope } = authOf(res);
    const rows = await models.listActiveModels(scope.projectId);
    const visible = key.allowed_models ? rows.filter((m) => key.allowed_models!.includes(m.id)) : rows;
    res.json({ object: 'list', data: visible.map(modelEntry) });
  });
  return r;
}
