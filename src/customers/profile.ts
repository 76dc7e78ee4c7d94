/**
 * A customer's profile outside deposits. POST /v1/customers creates a customer with no
 * deposit; PATCH /v1/customers/{id} changes name, email or metadata after creation (a
 * deposit sets them only when it creates the customer). Both write PostgreSQL first (for
 * PATCH after the customer's outbox is drained so that its row exists) and Redis, the
 * copy the API reads, second. A crash between the two leaves drift that reconcile repairs
 * from PostgreSQL.
 */
import type { Router } from 'express';
import { exactRouter } from '../http/router.js';
import type { RedisClient } from '../redis/client.js';
import type { Logger } from 'pino';
import { authOf, requireKeyType } from '../http/auth.js';
import { strictBody } from '../http/validate.js';
import type { LedgerQueries } from '../ledger/queries.js';
import type { LedgerService } from '../ledger/service.js';
import { describeRoute } from '../openapi/registry.js';
import { customerPatchedSchema, customerProfileSchema } from './routes.js';
import { key_budgets_max } from './key-budgets.js';
import { CustomerProfiles, customerCreateSchema, customerUpdateSchema } from './patch.js';
import type { DatabasePool } from 'slonik';

const profileDoc = customerProfileSchema.openapi('CustomerProfile');

describeRoute({
  method: 'POST',
  path: '/v1/customers',
  tag: 'Customers',
  callers: ['project'],
  summary: 'Create a customer without a deposit',
  description:
    'The customer starts with no wallet; a deposit funds it. A `customer_id` that exists already (made by a deposit or an earlier POST) answers 200 with the profile as it is when every field the request gives matches it (a retried creation is safe), else 409 `customer_exists` naming the first field that differs in `param`: nothing is changed (PATCH changes the profile).',
  body: customerCreateSchema.strict(),
  responses: {
    201: { description: 'The customer, created', schema: profileDoc },
    200: { description: 'The customer existed already with the same fields', schema: profileDoc },
  },
  errors: ['customer_exists'],
});

describeRoute({
  method: 'PATCH',
  path: '/v1/customers/:customer_id',
  tag: 'Customers',
  callers: ['project'],
  summary: "Change a customer's name, email, metadata, alert settings or budgets",
  description:
    'Any of the fields; null clears one. `low_balance_threshold` and `auto_top_up` drive the `balance.low`, `balance.depleted` and `balance.top_up_requested` events (see "Events and webhooks"). `budget` is `{limit, period}` (credits, `day` | `week` | `month` | `total`): deducts, consumes and gateway calls past it are refused `budget_exceeded` (docs/API.md, "Budgets"). A new limit keeps the period\'s counters; a new period starts them over. `key_budgets` (`{"<project key id>": {limit, period} | null}`, merged by key id, null removes one) sets budgets for the calls a project key makes for this customer (deducts, freezes, gateway calls); a key id that is not a live project key of this project is refused (400 `invalid_request`, param `key_budgets.<id>`), and so is a customer past ' + `${key_budgets_max}` + ' key budgets (param `key_budgets`).',
  body: customerUpdateSchema.strict(),
  responses: { 200: { description: 'The profile and the budgets', schema: customerPatchedSchema } },
  errors: ['customer_not_found'],
});

export function profileRoutes(deps: { ledger: LedgerService; redis: RedisClient; db: DatabasePool; ledgerQueries: LedgerQueries; prefix: string; logger: Logger }): Router {
  const r = exactRouter();
  const profiles = new CustomerProfiles(deps);

  /** Creates a customer without a deposit: 201 and its profile, or 200 for a retried creation (CustomerProfiles.create). */
  r.post('/v1/customers', requireKeyType('project'), async (req, res) => {
    const { created, profile } = await profiles.create(authOf(res).scope, strictBody(req, customerCreateSchema), 'PATCH /v1/customers/{id}');
    res.status(created ? 201 : 200).json(profile);
  });

  r.patch('/v1/customers/:customer_id', requireKeyType('project'), async (req, res) => {
    const patch = strictBody(req, customerUpdateSchema);
    res.json(await profiles.patch(authOf(res).scope, String(req.params.customer_id), patch));
  });
  return r;
}
