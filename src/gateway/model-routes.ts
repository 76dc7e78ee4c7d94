/**
 * GET /v1/models: the project's active models (CONTRACT.md section 5); a customer-scoped
 * key with an allowed_models list sees only those. Not billed, needs no customer.
 */
import type { Router } from 'express';
import { exactRouter } from '../http/router.js';
import { modelEntry, type ModelQueries } from '../admin/models.js';
import { authOf, requireKeyType } from '../http/auth.js';

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
