/**
 * The management API under /v1/admin (CONTRACT.md section 7), for organization admin
 * keys only. Every route is scoped to the admin key's organization: another
 * organization's project, key or model reads as 404 not_found.
 */
import type { Request, Response, Router } from 'express';
import { exactRouter } from '../http/router.js';
import { z } from 'zod';
import { ApiError } from '../errors/catalogue.js';
import { authOf, requireKeyType } from '../http/auth.js';
import { jsonBody, onlyQuery, parseWith, strictBody } from '../http/validate.js';
import { publishProjectChange } from '../keys/store.js';
import { identifierSchema, readTimestamp } from '../ledger/schemas.js';
import { planIds } from '../plans/catalogue.js';
import { reconcile } from '../reconcile/reconcile.js';
import type { Runtime } from '../runtime.js';
import { KeyAdmin, keyEntry } from './keys.js';
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
const reconcileSchema = z.object({ repair: z.boolean().default(false) });

const listQuery = z.object({
  limit: z.coerce.number().int().min(1).max(page_size_max).default(page_size_default),
  cursor: z.string().max(512).optional(),
});

function pageRequest(req: Request): PageRequest {
  onlyQuery(req, Object.keys(listQuery.shape));
  const q = parseWith(listQuery, req.query);
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

export function adminRoutes(rt: Runtime): Router {
  const r = exactRouter();
  const admin = createAdminQueries(rt.db);
  const models = rt.modelQueries;
  const keys = new KeyAdmin(rt.db, rt.redis, rt.config.REDIS_PREFIX, rt.plans, rt.keyCache);
  // This process forgets at once; the others when the message reaches them.
  const projectChanged = async (projectId: string) => {
    rt.keyCache.forgetProject(projectId);
    rt.models.forgetProject(projectId);
    await publishProjectChange(rt.redis, rt.config.REDIS_PREFIX, projectId);
  };

  const orgOf = (res: Response) => authOf(res).key.organization_id;

  async function projectOr404(req: Request, res: Response): Promise<ProjectRow> {
    const project = await admin.findProject(orgOf(res), String(req.params.project_id));
    if (!project) throw new ApiError('not_found', { message: 'project not found' });
    return project;
  }

  r.use('/v1/admin', requireKeyType('admin'));

  r.get('/v1/admin/organization', async (req, res) => {
    onlyQuery(req);
    res.json(await rt.plans.organization(orgOf(res)));
  });

  r.put('/v1/admin/organization/plan', async (req, res) => {
    const { plan } = strictBody(req, planSchema);
    await rt.plans.setPlan(orgOf(res), plan);
    res.json(await rt.plans.organization(orgOf(res)));
  });

  r.post('/v1/admin/projects', async (req, res) => {
    const input = strictBody(req, projectCreateSchema);
    const org = orgOf(res);
    const { projectsMax } = await rt.plans.limitsOf(org);
    const project = await admin.createProjectWithinLimit(org, input, projectsMax);
    if (!project) {
      throw new ApiError('plan_limit_reached', { message: `the plan allows ${projectsMax} project(s); upgrade the plan to create more` });
    }
    res.status(201).json(projectEntry(project));
  });

  r.get('/v1/admin/projects', async (req, res) => {
    sendList(res, await admin.listProjects(orgOf(res), pageRequest(req)), projectEntry);
  });

  r.get('/v1/admin/projects/:project_id', async (req, res) => {
    onlyQuery(req);
    res.json(projectEntry(await projectOr404(req, res)));
  });

  r.patch('/v1/admin/projects/:project_id', async (req, res) => {
    const patch = strictBody(req, projectPatchSchema);
    const project = await admin.updateProject(orgOf(res), String(req.params.project_id), patch);
    if (!project) throw new ApiError('not_found', { message: 'project not found' });
    // API processes cache key records with their project's contract and rate limit.
    await projectChanged(project.id);
    res.json(projectEntry(project));
  });

  r.post('/v1/admin/projects/:project_id/keys', async (req, res) => {
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

  r.get('/v1/admin/projects/:project_id/keys', async (req, res) => {
    const project = await projectOr404(req, res);
    sendList(res, await keys.list(project.id, pageRequest(req)), keyEntry);
  });

  r.post('/v1/admin/projects/:project_id/keys/:key_id/revoke', async (req, res) => {
    strictBody(req, z.object({}), { optional: true });
    const project = await projectOr404(req, res);
    const key = await keys.revoke(project.id, String(req.params.key_id));
    if (!key) throw new ApiError('not_found', { message: 'key not found' });
    res.json(keyEntry(key));
  });

  r.get('/v1/admin/projects/:project_id/models', async (req, res) => {
    const project = await projectOr404(req, res);
    sendList(res, await models.listModels(project.id, pageRequest(req)), adminModelEntry);
  });

  r.put('/v1/admin/projects/:project_id/models/*model_id', async (req, res) => {
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

  r.post('/v1/admin/projects/:project_id/reconcile', async (req, res) => {
    const project = await projectOr404(req, res);
    const { repair } = strictBody(req, reconcileSchema, { optional: true });
    res.json(await reconcile(rt, { projectId: project.id, repair, redisOnly: true }));
  });

  return r;
}
