/**
 * The management operations (CONTRACT.md section 7 and the dashboard's): one set of
 * handlers, each with the least role that may call it, mounted twice by src/admin/routes.ts:
 * under /v1/admin for an organization admin key, and under /dashboard/api for a member's
 * session. A handler reads the caller's organization from its Actor (src/admin/actor.ts),
 * never from a key, so both authentications reach exactly the same operations. Every
 * operation is scoped to that organization: another organization's project, key, model,
 * customer, member or invoice reads as 404 not_found, exactly like an unknown one.
 */
import type { Request, RequestHandler, Response } from 'express';
import { z } from 'zod';
import { quoteEntry } from '../billing/proration.js';
import { invoiceEntry, Invoicing } from '../billing/invoices.js';
import { allSources, ledgerPage, ledgerQuery, walletsOf } from '../customers/routes.js';
import { ApiError } from '../errors/catalogue.js';
import type { Method } from '../http/router.js';
import { jsonBody, onlyQuery, parseWith, strictBody, unstorableStringPath } from '../http/validate.js';
import { publishProjectChange } from '../keys/store.js';
import { creditsToUsd, readAmount } from '../ledger/amounts.js';
import { identifierSchema, readTimestamp, readWindow, walletNameSchema } from '../ledger/schemas.js';
import { generatePassword, hashPassword, password_chars_max, password_chars_min } from '../members/passwords.js';
import { createMemberQueries, memberEntry, roles, type Role } from '../members/store.js';
import { planIds } from '../plans/catalogue.js';
import { readReconcileJob, startReconcileJob } from '../reconcile/jobs.js';
import type { Runtime } from '../runtime.js';
import { findReceipt, usagePage, usageQuery } from '../usage/routes.js';
import { actorOf } from './actor.js';
import { KeyAdmin, keyEntry } from './keys.js';
import { createListingQueries, decodeDayCursor, encodeDayCursor, type CustomerListRow } from './listings.js';
import { adminModelEntry, modelIdSchema, price_per_million_credits_max, token_count_max, upstream_key_chars_max } from './models.js';
import {
  createAdminQueries,
  decodeCursor,
  encodeCursor,
  page_size_default,
  page_size_max,
  type Page,
  type PageRequest,
  type ProjectRow,
} from './queries.js';

/**
 * One management operation: its method, its path below the mount (`/projects/:project_id`),
 * the least role that may call it (an admin key acts as an owner), and its handler.
 */
export interface Operation {
  method: Method;
  path: string;
  role: Role;
  handler: RequestHandler;
}

export const project_name_chars_max = 128;
export const key_name_chars_max = 128;
export const allowed_models_max = 1000;
export const rate_limit_per_minute_max = 1_000_000_000;
export const url_chars_max = 2048;

const rateLimitSchema = z.number().int().positive().max(rate_limit_per_minute_max).nullable();
const projectNameSchema = z.string().trim().min(1).max(project_name_chars_max);

const projectCreateSchema = z.object({
  name: projectNameSchema,
  contract: z.enum(['A', 'B']).default('B'),
  rate_limit_per_minute: rateLimitSchema.default(null),
});

const projectPatchSchema = z.object({
  name: projectNameSchema.optional(),
  contract: z.enum(['A', 'B']).optional(),
  rate_limit_per_minute: rateLimitSchema.optional(),
});

const keyCreateSchema = z.object({
  type: z.enum(['project', 'customer']),
  name: z.string().trim().min(1).max(key_name_chars_max).nullish(),
  customer_id: identifierSchema.nullish(),
  allowed_models: z.array(modelIdSchema).min(1).max(allowed_models_max).nullish(),
  expires_at: z.unknown(),
});

const price = z.number().int().min(0).max(price_per_million_credits_max);
const tokens = z.number().int().positive().max(token_count_max);

/** http(s) with a host, no credentials, query or fragment; stored without a trailing slash. */
const upstreamUrlSchema = z
  .string()
  .max(url_chars_max)
  .url()
  .refine((v) => {
    // zod runs this even after .url() failed, so an unparsable value must not throw here.
    const u = URL.canParse(v) ? new URL(v) : null;
    return u !== null && (u.protocol === 'http:' || u.protocol === 'https:') && !u.username && !u.password && !u.search && !u.hash;
  }, 'upstream_base_url must be an http(s) URL without credentials, query or fragment')
  .transform((v) => v.replace(/\/+$/, ''));

const modelPutSchema = z
  .object({
    provider: z.enum(['openai', 'anthropic']),
    upstream_base_url: upstreamUrlSchema,
    upstream_model: z.string().min(1).max(256),
    upstream_api_key: z.string().min(1).max(upstream_key_chars_max).nullable().optional(),
    display_name: z.string().min(1).max(256).nullable().default(null),
    description: z.string().max(4096).nullable().default(null),
    context_window: tokens,
    max_output_tokens: tokens,
    supports_streaming: z.boolean(),
    active: z.boolean().default(true),
    input_price_per_million_credits: price,
    output_price_per_million_credits: price,
    cache_read_price_per_million_credits: price.default(0),
    cache_write_price_per_million_credits: price.default(0),
  })
  .refine((m) => m.max_output_tokens <= m.context_window, {
    path: ['max_output_tokens'],
    message: 'max_output_tokens may not exceed context_window',
  });

const planSchema = z.object({ plan: z.enum(planIds) });
/** The job states GET /queues counts, in the order a job passes through them. */
export const job_states = ['waiting', 'prioritized', 'delayed', 'waiting-children', 'active', 'completed', 'failed', 'paused'] as const;

const reconcileSchema = z.object({ repair: z.boolean().default(false) });

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

const listQuery = z.object({
  limit: z.coerce.number().int().min(1).max(page_size_max).default(page_size_default),
  cursor: z.string().max(512).optional(),
});

const planPreviewQuery = z.object({ plan: z.enum(planIds) });

export const email_chars_max = 320;
const emailSchema = z.string().trim().max(email_chars_max).email();
const passwordSchema = z.string().min(password_chars_min).max(password_chars_max);

const memberCreateSchema = z.object({
  email: emailSchema,
  role: z.enum(roles),
  /** Omitted: a random one is made and shown once in the answer. */
  password: passwordSchema.optional(),
});
const memberPatchSchema = z.object({ role: z.enum(roles) });

export const search_chars_max = 256;
const customerListQuery = listQuery.extend({ search: z.string().trim().min(1).max(search_chars_max).optional() });

const isoTime = z.string().refine((v) => !Number.isNaN(Date.parse(v)), 'must be an ISO 8601 timestamp');
export const usage_days_default = 30;
export const usage_days_max = 366;
const dailyUsageQuery = z.object({
  project_id: z.string().min(1).max(256).optional(),
  from: isoTime.optional(),
  to: isoTime.optional(),
  limit: z.coerce.number().int().min(1).max(usage_days_max).default(usage_days_default),
  cursor: z.string().max(200).optional(),
});

/** A customer id from the path, held to what a deposit body's customer_id may be (PostgreSQL stores it). */
function customerIdParam(req: Request): string {
  const id = parseWith(identifierSchema, String(req.params.customer_id));
  if (unstorableStringPath(id) !== null) throw new ApiError('invalid_request', { param: 'customer_id', message: 'customer_id must not contain U+0000 or unpaired surrogates' });
  return id;
}

function pageRequest(req: Request): PageRequest {
  onlyQuery(req, Object.keys(listQuery.shape));
  return pageOf(parseWith(listQuery, req.query));
}

function pageOf(q: { limit: number; cursor?: string }): PageRequest {
  return { limit: q.limit, after: q.cursor === undefined ? null : decodeCursor(q.cursor) };
}

function sendList<T>(res: Response, page: Page<T>, entry: (row: T) => unknown): void {
  res.json({ object: 'list', data: page.rows.map(entry), has_more: page.next !== null, next_cursor: page.next && encodeCursor(page.next) });
}

function projectEntry(p: ProjectRow) {
  return {
    id: p.id,
    name: p.name,
    contract: p.contract,
    rate_limit_per_minute: p.rate_limit_per_minute,
    created_at: new Date(p.created_at).toISOString(),
  };
}

/**
 * A model id from the path: one URL-encoded segment (`openai%2Fgpt-4o`) or several raw
 * ones (`openai/gpt-4o`); Express gives the wildcard as its decoded segments.
 */
function modelIdParam(req: Request): string {
  const raw = req.params.model_id as unknown;
  const id = Array.isArray(raw) ? raw.join('/') : String(raw);
  const parsed = modelIdSchema.safeParse(id);
  if (!parsed.success) throw new ApiError('invalid_request', { param: 'model_id', message: `model_id: ${parsed.error.issues[0].message}` });
  return parsed.data;
}


export function managementOperations(rt: Runtime): Operation[] {
  const admin = createAdminQueries(rt.db);
  const models = rt.modelQueries;
  const keys = new KeyAdmin(rt.db, rt.redis, rt.config.REDIS_PREFIX, rt.plans, rt.keyCache);
  const members = createMemberQueries(rt.db);
  const listings = createListingQueries(rt.db);
  const invoices = new Invoicing(rt.db, rt.redis, rt.config.REDIS_PREFIX, rt.config.INVOICE_GRACE_SECONDS * 1000, rt.logger);
  // This process forgets at once; the others when the message reaches them.
  const projectChanged = async (projectId: string) => {
    rt.keyCache.forgetProject(projectId);
    rt.models.forgetProject(projectId);
    await publishProjectChange(rt.redis, rt.config.REDIS_PREFIX, projectId);
  };

  const orgOf = (res: Response) => actorOf(res).organizationId;

  async function projectOr404(req: Request, res: Response, id = String(req.params.project_id)): Promise<ProjectRow> {
    const project = await admin.findProject(orgOf(res), id);
    if (!project) throw new ApiError('not_found', { message: 'project not found' });
    return project;
  }

  const scopeOf = (project: ProjectRow) => ({ projectId: project.id, organizationId: project.organization_id });
  const customerReads = { ledger: rt.ledger, redis: rt.redis, queries: rt.ledgerQueries };

  /** A listed customer with its balance now, read from Redis (null when Redis does not hold it). */
  async function customerEntry(project: ProjectRow, c: CustomerListRow) {
    const view = await rt.ledger.view(scopeOf(project), c.id);
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

  const ops: Operation[] = [];
  const op = (method: Method, path: string, role: Role, handler: RequestHandler) => ops.push({ method, path, role, handler });

  // Organization and plan
  op('GET', '/organization', 'viewer', async (req, res) => {
    onlyQuery(req);
    res.json(await rt.plans.organization(orgOf(res)));
  });

  op('GET', '/organization/plan/preview', 'viewer', async (req, res) => {
    onlyQuery(req, Object.keys(planPreviewQuery.shape));
    const { plan } = parseWith(planPreviewQuery, req.query);
    res.json(quoteEntry(await rt.plans.previewPlan(orgOf(res), plan)));
  });

  op('PUT', '/organization/plan', 'owner', async (req, res) => {
    const { plan } = strictBody(req, planSchema);
    const change = await rt.plans.setPlan(orgOf(res), plan);
    res.json({ ...(await rt.plans.organization(orgOf(res))), change: quoteEntry(change) });
  });

  // Projects
  op('POST', '/projects', 'admin', async (req, res) => {
    const input = strictBody(req, projectCreateSchema);
    const org = orgOf(res);
    const { projectsMax } = await rt.plans.limitsOf(org);
    const project = await admin.createProjectWithinLimit(org, input, projectsMax);
    if (!project) {
      throw new ApiError('plan_limit_reached', {
        message: `the plan allows ${projectsMax} project(s); upgrade the plan to create more`,
        extra: { limit: projectsMax },
      });
    }
    res.status(201).json(projectEntry(project));
  });

  op('GET', '/projects', 'viewer', async (req, res) => {
    sendList(res, await admin.listProjects(orgOf(res), pageRequest(req)), projectEntry);
  });

  op('GET', '/projects/:project_id', 'viewer', async (req, res) => {
    onlyQuery(req);
    res.json(projectEntry(await projectOr404(req, res)));
  });

  op('PATCH', '/projects/:project_id', 'admin', async (req, res) => {
    const patch = strictBody(req, projectPatchSchema);
    const project = await admin.updateProject(orgOf(res), String(req.params.project_id), patch);
    if (!project) throw new ApiError('not_found', { message: 'project not found' });
    // API processes cache key records with their project's contract and rate limit.
    await projectChanged(project.id);
    res.json(projectEntry(project));
  });

  // Reconcile runs as a background job (src/reconcile/jobs.ts): 202 and where to ask.
  op('POST', '/projects/:project_id/reconcile', 'admin', async (req, res) => {
    const project = await projectOr404(req, res);
    const { repair } = strictBody(req, reconcileSchema, { optional: true });
    const job = await startReconcileJob(rt.reconcileQueue, project.id, repair);
    // Over HTTP, the status's address under the mount the call came through.
    const path = req.originalUrl?.split('?')[0];
    if (path) res.setHeader('Location', `${path}/${encodeURIComponent(job.id)}`);
    res.status(202).json(job);
  });

  // An admin started it; its report names customers and their balances, as the customer reads do.
  op('GET', '/projects/:project_id/reconcile/:job_id', 'admin', async (req, res) => {
    onlyQuery(req);
    const project = await projectOr404(req, res);
    const job = await readReconcileJob(rt.reconcileQueue, project.id, String(req.params.job_id));
    if (!job) throw new ApiError('not_found', { message: 'reconcile job not found' });
    res.json(job);
  });

  // Keys
  op('POST', '/projects/:project_id/keys', 'admin', async (req, res) => {
    const body = strictBody(req, keyCreateSchema);
    const customerId = body.customer_id ?? null;
    const allowedModels = body.allowed_models ? [...new Set(body.allowed_models)] : null;
    if (body.type === 'customer' && customerId === null) {
      throw new ApiError('invalid_request', { param: 'customer_id', message: 'customer_id is required for customer keys' });
    }
    if (body.type === 'project' && customerId !== null) {
      throw new ApiError('invalid_request', { param: 'customer_id', message: 'customer_id is only for customer keys' });
    }
    if (body.type === 'project' && allowedModels !== null) {
      throw new ApiError('invalid_request', { param: 'allowed_models', message: 'allowed_models is only for customer keys' });
    }
    // Compared with the clock the API processes check keys against (wall time).
    const expiresAtMs = readTimestamp(jsonBody(req), 'expires_at');
    if (expiresAtMs !== null && expiresAtMs <= Date.now()) {
      throw new ApiError('invalid_expires_at', { param: 'expires_at', message: 'expires_at must be in the future' });
    }
    const { key, secret } = await keys.create(orgOf(res), String(req.params.project_id), {
      type: body.type,
      name: body.name ?? null,
      customerId,
      allowedModels,
      expiresAtMs,
    });
    res.status(201).json({ ...keyEntry(key), key: secret });
  });

  op('GET', '/projects/:project_id/keys', 'viewer', async (req, res) => {
    const project = await projectOr404(req, res);
    sendList(res, await keys.list(project.id, pageRequest(req)), keyEntry);
  });

  op('POST', '/projects/:project_id/keys/:key_id/revoke', 'admin', async (req, res) => {
    strictBody(req, z.object({}), { optional: true });
    const project = await projectOr404(req, res);
    const key = await keys.revoke(project.id, String(req.params.key_id));
    if (!key) throw new ApiError('not_found', { message: 'key not found' });
    res.json(keyEntry(key));
  });

  // Models
  op('GET', '/projects/:project_id/models', 'viewer', async (req, res) => {
    const project = await projectOr404(req, res);
    sendList(res, await models.listModels(project.id, pageRequest(req)), adminModelEntry);
  });

  op('PUT', '/projects/:project_id/models/*model_id', 'admin', async (req, res) => {
    const project = await projectOr404(req, res);
    const modelId = modelIdParam(req);
    const input = strictBody(req, modelPutSchema);
    // An upstream on the service's own network would let a project admin reach it (SSRF).
    const refused = await rt.upstream.baseUrlRefusal(input.upstream_base_url);
    if (refused !== null) throw new ApiError('invalid_request', { param: 'upstream_base_url', message: refused });
    const { model, created } = await models.upsertModel(project.id, modelId, input);
    // Gateway processes cache models per project and drop them on this message.
    await projectChanged(project.id);
    res.status(created ? 201 : 200).json(adminModelEntry(model));
  });

  // Customers
  op('GET', '/projects/:project_id/customers', 'viewer', async (req, res) => {
    const project = await projectOr404(req, res);
    onlyQuery(req, Object.keys(customerListQuery.shape));
    const q = parseWith(customerListQuery, req.query);
    const page = await listings.customers(project.id, q.search ?? null, pageOf(q));
    const data = await Promise.all(page.rows.map((c) => customerEntry(project, c)));
    res.json({ object: 'list', data, has_more: page.next !== null, next_cursor: page.next && encodeCursor(page.next) });
  });

  op('GET', '/projects/:project_id/customers/:customer_id', 'viewer', async (req, res) => {
    onlyQuery(req);
    const project = await projectOr404(req, res);
    const customer = await listings.customer(project.id, String(req.params.customer_id));
    if (!customer) throw new ApiError('customer_not_found');
    // Every source with its window, archived ones included, as the customer's own profile lists them.
    const view = await rt.ledger.view(scopeOf(project), customer.id, true);
    const sources = view === null ? null : Object.values(walletsOf(view, await allSources(customerReads, scopeOf(project), customer.id, view)).wallets).flatMap((w) => w.sources);
    res.json({ ...(await customerEntry(project, customer)), sources });
  });

  op('GET', '/projects/:project_id/customers/:customer_id/ledger', 'viewer', async (req, res) => {
    const project = await projectOr404(req, res);
    onlyQuery(req, Object.keys(ledgerQuery.shape));
    res.json(await ledgerPage(customerReads, scopeOf(project), String(req.params.customer_id), parseWith(ledgerQuery, req.query)));
  });

  op('POST', '/projects/:project_id/customers/:customer_id/deposits', 'admin', async (req, res) => {
    const project = await projectOr404(req, res);
    const fields = strictBody(req, depositSchema);
    const body = jsonBody(req);
    const amount = readAmount(body, 'B')!;
    const { startsAtMs, expiresAtMs } = readWindow(body);
    const result = await rt.ledger.deposit(scopeOf(project), {
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
  });

  // Gateway calls: usage records and receipts
  op('GET', '/projects/:project_id/usage', 'viewer', async (req, res) => {
    const project = await projectOr404(req, res);
    onlyQuery(req, Object.keys(usageQuery.shape));
    res.json(await usagePage(rt.usageQueries, project.id, parseWith(usageQuery, req.query)));
  });

  op('GET', '/projects/:project_id/receipts/:transaction_id', 'viewer', async (req, res) => {
    onlyQuery(req);
    const project = await projectOr404(req, res);
    const deps = { usage: rt.usageQueries, ledger: rt.ledger, redis: rt.redis };
    const found = await findReceipt(deps, scopeOf(project), String(req.params.transaction_id));
    if (!found) throw new ApiError('not_found', { message: 'receipt not found' });
    res.json(found);
  });

  // Usage
  op('GET', '/usage/daily', 'viewer', async (req, res) => {
    onlyQuery(req, Object.keys(dailyUsageQuery.shape));
    const q = parseWith(dailyUsageQuery, req.query);
    const project = q.project_id === undefined ? null : await projectOr404(req, res, q.project_id);
    const { days, models: byModel } = await listings.dailyUsage({
      organizationId: orgOf(res),
      projectId: project?.id ?? null,
      fromMs: q.from === undefined ? null : Date.parse(q.from),
      toMs: q.to === undefined ? null : Date.parse(q.to),
      beforeDay: q.cursor === undefined ? null : decodeDayCursor(q.cursor),
      limit: q.limit,
    });
    const shown = days.slice(0, q.limit);
    const data = shown.map((d) => ({
      date: d.day,
      operations: d.operations,
      credits: d.credits,
      cost_usd: creditsToUsd(d.credits),
      by_model: byModel
        .filter((m) => m.day === d.day)
        .map((m) => ({
          model: m.model,
          calls: m.calls,
          input_tokens: m.input_tokens,
          output_tokens: m.output_tokens,
          cost_credits: m.cost_credits,
          cost_usd: creditsToUsd(m.cost_credits),
        })),
    }));
    const hasMore = days.length > q.limit;
    res.json({ object: 'list', data, has_more: hasMore, next_cursor: hasMore ? encodeDayCursor(shown[shown.length - 1].day) : null });
  });

  // Members
  op('GET', '/members', 'viewer', async (req, res) => {
    sendList(res, await members.list(orgOf(res), pageRequest(req)), memberEntry);
  });

  op('POST', '/members', 'owner', async (req, res) => {
    const body = strictBody(req, memberCreateSchema);
    const org = orgOf(res);
    const { membersMax } = await rt.plans.limitsOf(org);
    const password = body.password ?? generatePassword();
    const member = await members.create(org, { email: body.email, role: body.role, passwordHash: await hashPassword(password) }, membersMax);
    // A password the service made is shown once, like a key's secret; one the caller chose is not echoed.
    res.status(201).json({ ...memberEntry(member), ...(body.password === undefined ? { password } : {}) });
  });

  op('GET', '/members/:member_id', 'viewer', async (req, res) => {
    onlyQuery(req);
    const member = await members.find(orgOf(res), String(req.params.member_id));
    if (!member) throw new ApiError('not_found', { message: 'member not found' });
    res.json(memberEntry(member));
  });

  op('PATCH', '/members/:member_id', 'owner', async (req, res) => {
    const { role } = strictBody(req, memberPatchSchema);
    const member = await members.setRole(orgOf(res), String(req.params.member_id), role);
    if (!member) throw new ApiError('not_found', { message: 'member not found' });
    res.json(memberEntry(member));
  });

  op('DELETE', '/members/:member_id', 'owner', async (req, res) => {
    onlyQuery(req);
    const member = await members.remove(orgOf(res), String(req.params.member_id));
    if (!member) throw new ApiError('not_found', { message: 'member not found' });
    res.json({ ...memberEntry(member), deleted: true });
  });

  // Invoices
  op('GET', '/invoices', 'viewer', async (req, res) => {
    sendList(res, await invoices.list(orgOf(res), pageRequest(req)), invoiceEntry);
  });

  op('GET', '/invoices/:invoice_id', 'viewer', async (req, res) => {
    onlyQuery(req);
    const invoice = await invoices.find(orgOf(res), String(req.params.invoice_id));
    if (!invoice) throw new ApiError('not_found', { message: 'invoice not found' });
    res.json(invoiceEntry(invoice));
  });

  // Queues: the service's own BullMQ queues, shared by every organization, so counts only
  // (never a job's data, which names other organizations' customers) and owners only.
  op('GET', '/queues', 'owner', async (req, res) => {
    onlyQuery(req);
    const queues = [rt.ledgerQueue, rt.reconcileQueue];
    const data = await Promise.all(queues.map(async (q) => ({ name: q.name, counts: await q.getJobCounts(...job_states) })));
    res.json({ data });
  });

  return ops;
}
