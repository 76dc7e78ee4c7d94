/**
 * The management operations on a project's API keys: create a project or customer-scoped
 * key (its secret shown once), list them, set a customer-scoped key's budget, revoke one.
 */
import { z } from 'zod';
import { ApiError } from '../../errors/catalogue.js';
import { jsonBody, strictBody } from '../../http/validate.js';
import { expiredWhenSent, identifierSchema, readTimestamp } from '../../ledger/schemas.js';
import { describeOperation } from '../../openapi/registry.js';
import { listOf } from '../../schema/zod.js';
import { createdKeySchema, keyEntry, keySchema, type KeyAdmin } from '../keys.js';
import { modelIdSchema } from '../models.js';
import { budgetSchema } from '../../ledger/budgets.js';
import { created, listQuery, ok, operation, orgOf, pageRequest, projectParams, sendList, type Operation, type ProjectLookup } from './shared.js';

const key_name_chars_max = 128;
export const allowed_models_max = 1000;

const keyCreateSchema = z.object({
  type: z.enum(['project', 'customer']),
  name: z.string().trim().min(1).max(key_name_chars_max).nullish(),
  customer_id: identifierSchema.nullish(),
  allowed_models: z.array(modelIdSchema).min(1).max(allowed_models_max).nullish(),
  expires_at: z.unknown(),
  budget: budgetSchema.nullish(),
});

/** PATCH of a key: its budget (null clears it). */
const keyPatchSchema = z.object({ budget: budgetSchema.nullable() });

/** A budget asked of a key that is not customer-scoped. */
const notCustomerScoped = () =>
  new ApiError('invalid_request', {
    param: 'budget',
    message: 'budget is only for customer-scoped keys (type customer, bound to one customer); a project key\'s calls answer to the customer\'s own budget (PATCH /v1/customers/{id})',
  });

const keyCreateDoc = keyCreateSchema.extend({ expires_at: z.string().nullish().openapi({ description: 'ISO 8601, later than now.' }) });

describeOperation({
  method: 'POST',
  path: '/projects/:project_id/keys',
  role: 'admin',
  tag: 'Keys',
  summary: 'Create a project or customer-scoped key',
  body: keyCreateDoc.strict(),
  responses: created('The key, with its secret (shown once)', createdKeySchema),
  errors: [projectParams, 'invalid_expires_at', 'plan_limit_reached', 'project_deactivated'],
});
describeOperation({ method: 'GET', path: '/projects/:project_id/keys', role: 'viewer', tag: 'Keys', summary: "The project's keys", query: listQuery, responses: ok('A page of keys', listOf(keySchema)), errors: [projectParams] });
describeOperation({
  method: 'PATCH',
  path: '/projects/:project_id/keys/:key_id',
  role: 'admin',
  tag: 'Keys',
  summary: "Set or clear a customer-scoped key's budget",
  description:
    'The budget (`{limit, period}`, or null to clear it) applies to gateway calls made with this key (docs/API.md, "Budgets"); only customer-scoped keys take one (400 `invalid_request`, param `budget`, otherwise). Every API process uses the new budget at once.',
  body: keyPatchSchema.strict(),
  responses: ok('The key', keySchema),
  errors: [projectParams],
});
describeOperation({
  method: 'POST',
  path: '/projects/:project_id/keys/:key_id/revoke',
  role: 'admin',
  tag: 'Keys',
  summary: 'Revoke a key',
  description: 'Revoking again answers the first `revoked_at`. The body may be omitted.',
  body: z.object({}).strict(),
  bodyOptional: true,
  responses: ok('The key', keySchema),
  errors: [projectParams],
});

export function keyOperations(deps: { keys: KeyAdmin; projects: ProjectLookup }): Operation[] {
  const { keys } = deps;
  const { projectOr404 } = deps.projects;

  return [
    operation('POST', '/projects/:project_id/keys', 'admin', async (req, res) => {
      const body = strictBody(req, keyCreateSchema);
      const customerId = body.customer_id ?? null;
      const allowedModels = body.allowed_models ? [...new Set(body.allowed_models)] : null;
      if (body.type === 'customer' && customerId === null) {
        throw new ApiError('invalid_request', { param: 'customer_id', message: 'customer_id is required for customer keys' });
      }
      if (body.type === 'project' && customerId !== null) {
        throw new ApiError('invalid_request', { param: 'customer_id', message: 'customer_id is only for customer keys' });
      }
      if (body.type === 'project' && body.budget != null) throw notCustomerScoped();
      if (body.type === 'project' && allowedModels !== null) {
        throw new ApiError('invalid_request', { param: 'allowed_models', message: 'allowed_models is only for customer keys' });
      }
      // Compared with the clock the API processes check keys against (wall time).
      const expiresAtMs = readTimestamp(jsonBody(req), 'expires_at');
      if (expiresAtMs !== null && expiresAtMs <= Date.now()) {
        throw expiredWhenSent(expiresAtMs, 'a key');
      }
      const { key, secret } = await keys.create(orgOf(res), String(req.params.project_id), {
        type: body.type,
        name: body.name ?? null,
        customerId,
        allowedModels,
        expiresAtMs,
        budget: body.budget ?? null,
      });
      res.status(201).json({ ...keyEntry(key), key: secret });
    }),

    operation('GET', '/projects/:project_id/keys', 'viewer', async (req, res) => {
      const project = await projectOr404(req, res);
      sendList(res, await keys.list(project.id, pageRequest(req)), keyEntry);
    }),

    operation('PATCH', '/projects/:project_id/keys/:key_id', 'admin', async (req, res) => {
      const body = strictBody(req, keyPatchSchema);
      const project = await projectOr404(req, res);
      const keyId = String(req.params.key_id);
      const type = await keys.typeOf(project.id, keyId);
      if (type === null) throw new ApiError('not_found', { message: 'key not found' });
      if (type !== 'customer') throw notCustomerScoped();
      const key = await keys.setBudget(project.id, keyId, body.budget);
      if (!key) throw new ApiError('not_found', { message: 'key not found' });
      res.json(keyEntry(key));
    }),

    operation('POST', '/projects/:project_id/keys/:key_id/revoke', 'admin', async (req, res) => {
      strictBody(req, z.object({}), { optional: true });
      const project = await projectOr404(req, res);
      const key = await keys.revoke(project.id, String(req.params.key_id));
      if (!key) throw new ApiError('not_found', { message: 'key not found' });
      res.json(keyEntry(key));
    }),
  ];
}
