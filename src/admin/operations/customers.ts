/**
 * The management operations on a project's customers: list them with their balances,
 * create one without a deposit (as POST /v1/customers does), read one with its metadata,
 * sources, budget and alert settings, change those (PATCH, as PATCH /v1/customers/{id}
 * does: both through src/customers/patch.ts), read its ledger, deposit credits to it.
 */
import type { Request } from 'express';
import { z } from 'zod';
import { allSources, customerPatchedSchema, customerProfileSchema, ledgerPage, ledgerPageSchema, ledgerQuery, sourceSchema, walletAmountsSchema, walletsOf } from '../../customers/routes.js';
import { alertSettingsAnswerShape, alertSettingsOfMeta } from '../../customers/alerts.js';
import { CustomerProfiles, customerCreateSchema, customerUpdateSchema, storedMetadata } from '../../customers/patch.js';
import { budgetStateSchema } from '../../ledger/budgets.js';
import { ApiError } from '../../errors/catalogue.js';
import { jsonBody, onlyQuery, parseWith, strictBody } from '../../http/validate.js';
import { amount_credits_max, creditsToUsd, readAmount } from '../../ledger/amounts.js';
import { depositResultSchema, identifierSchema, readWindow, walletNameSchema } from '../../ledger/schemas.js';
import { describeOperation } from '../../openapi/registry.js';
import { jsonFault } from '../../schema/json.js';
import { extended, listOf, timestamp } from '../../schema/zod.js';
import type { CustomerListRow, ListingQueries } from '../listings.js';
import { encodeCursor, type ProjectRow } from '../queries.js';
import { created, listQuery, ok, operation, pageOf, projectParams, scopeOf, type ManagementDeps, type Operation, type ProjectLookup } from './shared.js';
import { customerNotFound } from '../../errors/not-found.js';

/** A deposit from the management API: integer credits, into `wallet` (the project's default wallet when omitted). */
const depositSchema = z.object({
  amount: z.unknown(),
  wallet: walletNameSchema.optional(),
  source: z.string().trim().min(1).max(128).optional(),
  description: z.string().max(1024).optional(),
  starts_at: z.unknown(),
  expires_at: z.unknown(),
  idempotency_key: identifierSchema.optional(),
});

const search_chars_max = 256;
const customerListQuery = listQuery.extend({ search: z.string().trim().min(1).max(search_chars_max).optional() });

const walletSums = z.record(walletAmountsSchema).nullable();
const customerListEntrySchema = z
  .object({
    id: z.string(),
    project_id: z.string(),
    name: z.string().nullable(),
    email: z.string().nullable(),
    created_at: timestamp,
    balance: z
      .object({ total: z.number().int(), used: z.number().int(), frozen: z.number().int(), available: z.number().int(), available_usd: z.string() })
      .strict()
      .nullable()
      .openapi({ description: 'Over the sources active now; null when Redis does not hold the customer.' }),
    wallets: walletSums,
  })
  .strict()
  .openapi('CustomerListEntry');
const customerDetailSchema = extended(customerListEntrySchema, {
  metadata: z.record(z.unknown()).nullable().openapi({ description: '`{}` when none was given; null when Redis does not hold the customer.' }),
  sources: z.array(sourceSchema).nullable().openapi({ description: 'Every source, archived ones included.' }),
  // Inline, not the BudgetState reference: a nullable reference loses its null in the document.
  budget: z.object(budgetStateSchema.shape).strict().nullable().openapi({ description: 'The customer budget with this period\'s counters (docs/API.md, "Budgets"); null when none is set or Redis does not hold the customer.' }),
  ...alertSettingsAnswerShape,
}).openapi('CustomerDetail');
const depositDoc = depositSchema.extend({
  amount: z.number().int().min(1).max(amount_credits_max).openapi({ description: 'Integer credits, whatever the contract variant.' }),
  wallet: walletNameSchema.optional().openapi({ description: "Default: the project's default wallet (`credits` for contract B, `default` for A)." }),
  starts_at: z.string().optional(),
  expires_at: z.string().optional(),
});

describeOperation({
  method: 'GET',
  path: '/projects/:project_id/customers',
  role: 'viewer',
  tag: 'Customers',
  summary: "The project's customers, with their balances",
  query: customerListQuery,
  responses: ok('A page of customers', listOf(customerListEntrySchema)),
  errors: [projectParams],
});
describeOperation({
  method: 'POST',
  path: '/projects/:project_id/customers',
  role: 'admin',
  tag: 'Customers',
  summary: 'Create a customer without a deposit',
  description:
    'As `POST /v1/customers`: 201 and the profile; an id that exists already answers 200 with the profile when every field given matches it, else 409 `customer_exists` naming the first field that differs (nothing changed).',
  body: customerCreateSchema.strict(),
  responses: { ...created('The customer, created', customerProfileSchema), ...ok('The customer existed already with the same fields', customerProfileSchema) },
  errors: [projectParams, 'customer_exists', 'project_deactivated'],
});
describeOperation({
  method: 'GET',
  path: '/projects/:project_id/customers/:customer_id',
  role: 'viewer',
  tag: 'Customers',
  summary: 'A customer, with its balance and sources',
  responses: ok('The customer', customerDetailSchema),
  errors: [projectParams, 'customer_not_found'],
});
describeOperation({
  method: 'PATCH',
  path: '/projects/:project_id/customers/:customer_id',
  role: 'admin',
  tag: 'Customers',
  summary: "Change a customer's profile, alert settings or budget",
  description:
    'As `PATCH /v1/customers/{id}`: any of the fields, null clears one; `budget` is `{limit, period}` (docs/API.md, "Budgets"), `low_balance_threshold` and `auto_top_up` the balance alert settings. A bad field is 400 and changes nothing.',
  body: customerUpdateSchema.strict(),
  responses: ok('The profile and the budget', customerPatchedSchema),
  errors: [projectParams, 'customer_not_found', 'project_deactivated'],
});
describeOperation({
  method: 'GET',
  path: '/projects/:project_id/customers/:customer_id/ledger',
  role: 'viewer',
  tag: 'Customers',
  summary: "A customer's ledger",
  query: ledgerQuery,
  responses: ok('A page of ledger entries', ledgerPageSchema),
  errors: [projectParams, 'customer_not_found'],
});
describeOperation({
  method: 'POST',
  path: '/projects/:project_id/customers/:customer_id/deposits',
  role: 'admin',
  tag: 'Customers',
  summary: 'Deposit credits to a customer',
  description: 'As `POST /v1/customers/deposit`, with `amount` in integer credits in both variants. 200 for a replay of the same `idempotency_key`.',
  body: depositDoc.pick({ amount: true, wallet: true, description: true, starts_at: true, expires_at: true, idempotency_key: true, source: true }).strict(),
  responses: { ...created('The deposit', depositResultSchema), ...ok('A replay of the deposit', depositResultSchema) },
  errors: [projectParams, 'invalid_amount', 'invalid_starts_at', 'invalid_expires_at', 'transaction_conflict', 'project_deactivated'],
});

/** A customer id from the path, held to what a deposit body's customer_id may be (PostgreSQL stores it). */
function customerIdParam(req: Request): string {
  const id = parseWith(identifierSchema, String(req.params.customer_id));
  if (jsonFault(id) !== null) throw new ApiError('invalid_request', { param: 'customer_id', message: 'customer_id must not contain U+0000 or unpaired surrogates' });
  return id;
}

interface CustomerDeps extends Pick<ManagementDeps, 'config' | 'db' | 'ledger' | 'ledgerQueries' | 'logger' | 'redis'> {
  listings: Pick<ListingQueries, 'customers' | 'customer'>;
  projects: ProjectLookup;
}

export function customerOperations(deps: CustomerDeps): Operation[] {
  const { listings } = deps;
  const { projectOr404, writableProject } = deps.projects;
  const customerReads = { ledger: deps.ledger, redis: deps.redis, queries: deps.ledgerQueries };
  const profiles = new CustomerProfiles({ ...deps, prefix: deps.config.REDIS_PREFIX });

  /** A listed customer with its balance now, read from Redis (null when Redis does not hold it). */
  async function customerEntry(project: ProjectRow, c: CustomerListRow) {
    const view = await deps.ledger.view(scopeOf(project), c.id);
    const wallets = view === null ? null : walletsOf(view);
    return {
      id: c.id,
      project_id: project.id,
      // The live profile (a PATCH changes Redis too), else the ledger's copy.
      name: view === null ? c.name : view.profile.name,
      email: view === null ? c.email : view.profile.email,
      created_at: new Date(c.created_at).toISOString(),
      balance: wallets === null ? null : { ...wallets.totals, available_usd: creditsToUsd(wallets.totals.available) },
      wallets:
        wallets === null
          ? null
          : Object.fromEntries(Object.entries(wallets.wallets).map(([name, w]) => [name, { total: w.total, used: w.used, frozen: w.frozen, available: w.available }])),
    };
  }

  return [
    operation('GET', '/projects/:project_id/customers', 'viewer', async (req, res) => {
      const project = await projectOr404(req, res);
      onlyQuery(req, Object.keys(customerListQuery.shape));
      const q = parseWith(customerListQuery, req.query);
      const page = await listings.customers(project.id, q.search ?? null, pageOf(q));
      const data = await Promise.all(page.rows.map((c) => customerEntry(project, c)));
      res.json({ object: 'list', data, has_more: page.next !== null, next_cursor: page.next && encodeCursor(page.next) });
    }),

    operation('POST', '/projects/:project_id/customers', 'admin', async (req, res) => {
      const project = await writableProject(req, res);
      const { created: made, profile } = await profiles.create(scopeOf(project), strictBody(req, customerCreateSchema), 'PATCH /projects/{id}/customers/{customer}');
      res.status(made ? 201 : 200).json(profile);
    }),

    operation('GET', '/projects/:project_id/customers/:customer_id', 'viewer', async (req, res) => {
      onlyQuery(req);
      const project = await projectOr404(req, res);
      const customer = await listings.customer(project.id, String(req.params.customer_id));
      if (!customer) throw customerNotFound(String(req.params.customer_id));
      // Every source with its window, archived ones included, as the customer's own profile lists them.
      const view = await deps.ledger.view(scopeOf(project), customer.id, true);
      const sources = view === null ? null : Object.values(walletsOf(view, await allSources(customerReads, scopeOf(project), customer.id, view)).wallets).flatMap((w) => w.sources);
      res.json({ ...(await customerEntry(project, customer)), metadata: view === null ? null : storedMetadata(view.profile.metadata), sources, budget: view?.budget ?? null, ...alertSettingsOfMeta(view?.profile.alerts) });
    }),

    operation('PATCH', '/projects/:project_id/customers/:customer_id', 'admin', async (req, res) => {
      const project = await writableProject(req, res);
      const patch = strictBody(req, customerUpdateSchema);
      res.json(await profiles.patch(scopeOf(project), String(req.params.customer_id), patch));
    }),

    operation('GET', '/projects/:project_id/customers/:customer_id/ledger', 'viewer', async (req, res) => {
      const project = await projectOr404(req, res);
      onlyQuery(req, Object.keys(ledgerQuery.shape));
      res.json(await ledgerPage(customerReads, scopeOf(project), String(req.params.customer_id), parseWith(ledgerQuery, req.query)));
    }),

    operation('POST', '/projects/:project_id/customers/:customer_id/deposits', 'admin', async (req, res) => {
      const project = await writableProject(req, res);
      const fields = strictBody(req, depositSchema);
      const body = jsonBody(req);
      const amount = readAmount(body, 'B')!;
      const { startsAtMs, expiresAtMs } = readWindow(body);
      const result = await deps.ledger.deposit(scopeOf(project), {
        customerId: customerIdParam(req),
        amount,
        wallet: fields.wallet ?? (project.contract === 'A' ? 'default' : 'credits'),
        label: fields.source ?? fields.description ?? 'deposit',
        startsAtMs,
        expiresAtMs,
        idempotencyKey: fields.idempotency_key ?? null,
        description: fields.description ?? null,
      });
      res.status(result.replay ? 200 : 201).json({ ...result.body, is_idempotent_replay: result.replay });
    }),
  ];
}
