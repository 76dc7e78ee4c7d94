/**
 * The management operations (docs/API.md, "Management API"): one set of
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
import { allSources, ledgerPage, ledgerPageSchema, ledgerQuery, sourceSchema, walletAmountsSchema, walletsOf } from '../customers/routes.js';
import { createdKeySchema, keySchema } from './keys.js';
import { invoiceSchema } from '../billing/invoices.js';
import { quoteSchema } from '../billing/proration.js';
import { amount_credits_max } from '../ledger/amounts.js';
import { depositResultSchema } from '../ledger/schemas.js';
import { memberSchema } from '../members/store.js';
import { describeOperation } from '../openapi/registry.js';
import { extended, listOf, timestamp } from '../schema/zod.js';
import { organizationSchema } from '../plans/service.js';
import { receiptSchema } from '../usage/queries.js';
import { usagePageSchema } from '../usage/routes.js';
import { ApiError } from '../errors/catalogue.js';
import type { Method } from '../http/router.js';
import { jsonBody, onlyQuery, parseWith, strictBody } from '../http/validate.js';
import { jsonFault } from '../schema/json.js';
import { publishProjectChange } from '../keys/store.js';
import { creditsToUsd, readAmount, toCredits } from '../ledger/amounts.js';
import { identifierSchema, readTimestamp, readWindow, walletNameSchema } from '../ledger/schemas.js';
import { generatePassword, hashPassword, password_chars_max, password_chars_min } from '../members/passwords.js';
import { createMemberQueries, memberEntry, roles, type Role } from '../members/store.js';
import { planIds } from '../plans/catalogue.js';
import { readReconcileJob, reconcileJobSchema, reconcileJobStartedSchema, startedEntry, startReconcileJob } from '../reconcile/jobs.js';
import type { Queue } from 'bullmq';
import type { Logger } from 'pino';
import type { DatabasePool } from 'slonik';
import type { Config } from '../config/index.js';
import type { RedisClient } from '../redis/client.js';
import type { KeyCache } from '../keys/store.js';
import type { LedgerService } from '../ledger/service.js';
import type { LedgerQueries } from '../ledger/queries.js';
import type { ModelQueries } from './models.js';
import type { ModelCache } from '../gateway/models.js';
import type { PlanService } from '../plans/service.js';
import type { ReconcileJobData } from '../reconcile/jobs.js';
import type { ReconcileReport } from '../reconcile/report.js';
import type { UpstreamClient } from '../gateway/upstream.js';
import type { UsageQueries } from '../usage/queries.js';
import { findReceipt, usagePage, usageQuery } from '../usage/routes.js';
import { receipt_not_found_message } from '../usage/queries.js';
import { actorOf } from './actor.js';
import { KeyAdmin, keyEntry, projectDeactivated } from './keys.js';
import {
  createListingQueries,
  decodeDayCursor,
  decodeUsageCursor,
  encodeDayCursor,
  encodeUsageCursor,
  usage_dimensions,
  type CustomerListRow,
  type UsageDimension,
} from './listings.js';
import { adminModelEntry, adminModelEntrySchema, credits_per_usd, modelIdSchema, price_per_million_credits_max, token_count_max, upstream_key_chars_max, type ModelInput, type ModelRow } from './models.js';
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
const key_name_chars_max = 128;
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
/** A per-part token bound: 0 for a model that reads no such part; null for the provider's default. */
const partTokens = z.number().int().min(0).max(token_count_max);

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

/** A price in USD per million tokens, as a model read answers it (`*_price_per_million_usd`). */
const usdPrice = z.number().min(0).max(price_per_million_credits_max / credits_per_usd);

const model_price_kinds = ['input', 'output', 'cache_read', 'cache_write'] as const;

/**
 * Every field a model write reads. A model read is accepted back as a write: the
 * `*_price_per_million_usd` prices set the price too (see modelInputOf), and the fields a
 * read adds (`id`, `object`, `created`, `owned_by`, `has_upstream_key`, `updated_at`, a
 * write's `warnings`) are accepted and ignored: the path names the model, and the service
 * keeps the others.
 */
const modelPatchSchema = z.object({
  provider: z.enum(['openai', 'anthropic']).optional(),
  upstream_base_url: upstreamUrlSchema.optional(),
  upstream_model: z.string().min(1).max(256).optional(),
  upstream_api_key: z.string().min(1).max(upstream_key_chars_max).nullable().optional(),
  display_name: z.string().min(1).max(256).nullable().optional(),
  description: z.string().max(4096).nullable().optional(),
  context_window: tokens.optional(),
  max_output_tokens: tokens.optional(),
  supports_streaming: z.boolean().optional(),
  active: z.boolean().optional(),
  input_price_per_million_credits: price.optional(),
  output_price_per_million_credits: price.optional(),
  cache_read_price_per_million_credits: price.optional(),
  cache_write_price_per_million_credits: price.optional(),
  input_price_per_million_usd: usdPrice.optional(),
  output_price_per_million_usd: usdPrice.optional(),
  cache_read_price_per_million_usd: usdPrice.optional(),
  cache_write_price_per_million_usd: usdPrice.optional(),
  image_token_bound: partTokens.nullable().optional(),
  file_token_bound: partTokens.nullable().optional(),
  id: z.unknown(),
  object: z.unknown(),
  created: z.unknown(),
  owned_by: z.unknown(),
  has_upstream_key: z.unknown(),
  updated_at: z.unknown(),
  warnings: z.unknown(),
});

/**
 * PUT: the whole model. Required: provider, upstream_base_url, upstream_model,
 * context_window, max_output_tokens, supports_streaming, and the input and output prices
 * (in credits or in USD; modelInputOf checks those).
 */
const modelPutSchema = modelPatchSchema.extend({
  provider: z.enum(['openai', 'anthropic']),
  upstream_base_url: upstreamUrlSchema,
  upstream_model: z.string().min(1).max(256),
  context_window: tokens,
  max_output_tokens: tokens,
  supports_streaming: z.boolean(),
});

type ModelWrite = z.infer<typeof modelPatchSchema>;

/**
 * The stored model a write makes: `body` over `current` (a PATCH) or over the defaults (a
 * PUT: no current). A price may come in credits or in USD; both given must agree, and USD
 * must be a whole number of credits. 400 invalid_request naming the field otherwise.
 */
function modelInputOf(body: ModelWrite, current: ModelInput | null): ModelInput {
  const base: ModelInput = current ?? {
    provider: body.provider!,
    upstream_base_url: body.upstream_base_url!,
    upstream_model: body.upstream_model!,
    display_name: null,
    description: null,
    context_window: body.context_window!,
    max_output_tokens: body.max_output_tokens!,
    supports_streaming: body.supports_streaming!,
    active: true,
    input_price_per_million_credits: -1,
    output_price_per_million_credits: -1,
    cache_read_price_per_million_credits: 0,
    cache_write_price_per_million_credits: 0,
    image_token_bound: null,
    file_token_bound: null,
  };
  const next: ModelInput = { ...base };
  for (const f of ['provider', 'upstream_base_url', 'upstream_model', 'upstream_api_key', 'display_name', 'description', 'context_window', 'max_output_tokens', 'supports_streaming', 'active', 'image_token_bound', 'file_token_bound'] as const) {
    if (body[f] !== undefined) (next as unknown as Record<string, unknown>)[f] = body[f];
  }
  for (const kind of model_price_kinds) {
    const creditsField = `${kind}_price_per_million_credits` as const;
    const usdField = `${kind}_price_per_million_usd` as const;
    const credits = body[creditsField];
    const usd = body[usdField];
    let value = credits;
    if (usd !== undefined) {
      const fromUsd = toCredits(usd, 'usd');
      if (fromUsd === null) {
        throw new ApiError('invalid_request', { param: usdField, message: `${usdField} must be a whole number of credits (1 credit = 0.000001 USD)` });
      }
      if (credits !== undefined && credits !== fromUsd) {
        throw new ApiError('invalid_request', {
          param: usdField,
          message: `${usdField} (${usd}) is ${fromUsd} credits, but ${creditsField} is ${credits}; send one of them, or both equal`,
        });
      }
      value = fromUsd;
    }
    if (value !== undefined) next[creditsField] = value;
    if (next[creditsField] < 0) {
      throw new ApiError('invalid_request', { param: creditsField, message: `${creditsField} (or ${usdField}) is required` });
    }
  }
  if (next.max_output_tokens > next.context_window) {
    throw new ApiError('invalid_request', {
      param: 'max_output_tokens',
      message: `max_output_tokens (${next.max_output_tokens}) may not exceed context_window (${next.context_window})`,
    });
  }
  return next;
}

/**
 * What a saved model will do that its writer may not expect: answered with the write, so
 * that a model saved without its provider key does not fail silently at its first call.
 */
function modelWarnings(m: ModelRow, modelPath: string): { code: string; param: string; message: string }[] {
  const warnings = [];
  if (!m.has_upstream_key) {
    warnings.push({
      code: 'byok_key_required',
      param: 'upstream_api_key',
      message: `the model has no upstream_api_key: every gateway call to it answers 402 byok_key_required until one is set (PATCH ${modelPath} {"upstream_api_key": "..."})`,
    });
  }
  if (!m.active) {
    warnings.push({
      code: 'model_inactive',
      param: 'active',
      message: 'the model is inactive: GET /v1/models does not list it and gateway calls answer 404 model_not_found until active is true',
    });
  }
  return warnings;
}

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

const search_chars_max = 256;
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

/**
 * GET /usage: gateway usage and cost totals. `group_by` is a comma-separated list of
 * day, project, customer and model (all four when omitted; empty for one total).
 */
const usageTotalsQuery = z.object({
  project_id: z.string().min(1).max(256).optional(),
  customer_id: identifierSchema.optional(),
  model: modelIdSchema.optional(),
  from: isoTime.optional(),
  to: isoTime.optional(),
  group_by: z
    .string()
    .max(64)
    .transform((v, ctx) => {
      const parts = v === '' ? [] : v.split(',').map((x) => x.trim());
      for (const part of parts) {
        if (!(usage_dimensions as readonly string[]).includes(part)) {
          ctx.addIssue({ code: z.ZodIssueCode.custom, message: `unknown dimension ${JSON.stringify(part)}; use a comma-separated list of ${usage_dimensions.join(', ')}` });
          return z.NEVER;
        }
      }
      // In the order the groups are sorted by, whatever order was sent.
      return usage_dimensions.filter((d) => parts.includes(d)) as UsageDimension[];
    })
    .default(usage_dimensions.join(',')),
  limit: z.coerce.number().int().min(1).max(page_size_max).default(page_size_default),
  cursor: z.string().max(2048).optional(),
});

// The documentation of the operations (src/openapi/): one describeOperation per operation
// below, in the same order, described at both mounts (/v1/admin and /dashboard/api).

const projectSchema = z
  .object({
    id: z.string(),
    name: z.string(),
    contract: z.enum(['A', 'B']),
    rate_limit_per_minute: z.number().int().nullable(),
    active: z.boolean().openapi({ description: 'False once the project is deactivated (`DELETE`): its records stay readable, nothing can be added or changed.' }),
    deactivated_at: timestamp.nullable(),
    created_at: timestamp,
  })
  .strict()
  .openapi('Project');
const modelWarningSchema = z
  .object({
    code: z.enum(['byok_key_required', 'model_inactive']),
    param: z.string().openapi({ description: 'The model field to change.' }),
    message: z.string(),
  })
  .strict()
  .openapi('ModelWarning');
/** A model write's answer: the model, and what it will do that its writer may not expect. */
const modelWriteSchema = extended(adminModelEntrySchema, {
  warnings: z.array(modelWarningSchema).openapi({
    description:
      '`byok_key_required`: no `upstream_api_key` is stored, every gateway call to the model answers 402 until one is set; `model_inactive`: the model is not listed and calls answer 404 `model_not_found`. Empty when neither.',
  }),
}).openapi('AdminModelWrite');
const usageTotalsSchema = z
  .object({
    object: z.literal('list'),
    group_by: z.array(z.enum(usage_dimensions)).openapi({ description: 'The dimensions of the groups, in the order they are sorted by.' }),
    data: z.array(
      z
        .object({
          date: z.string().date().nullable().openapi({ description: 'The UTC day; null unless grouped by `day`.' }),
          project_id: z.string().nullable().openapi({ description: 'Null unless grouped by `project`.' }),
          customer_id: z.string().nullable().openapi({ description: 'Null unless grouped by `customer`.' }),
          model: z.string().nullable().openapi({ description: 'Null unless grouped by `model`.' }),
          calls: z.number().int(),
          billed_calls: z.number().int().openapi({ description: 'Calls that were not failed.' }),
          input_tokens: z.number().int(),
          output_tokens: z.number().int(),
          cache_read_tokens: z.number().int(),
          cache_write_tokens: z.number().int(),
          cost_credits: z.number().int(),
          cost_usd: z.string().openapi({ description: 'Exact decimal string.' }),
          uncovered_credits: z.number().int().openapi({ description: 'The sum of the calls\' `uncovered_credits`: cost their wallets could not pay, not charged.' }),
        })
        .strict(),
    ),
    has_more: z.boolean(),
    next_cursor: z.string().nullable().openapi({ description: 'Pass as `cursor`, with the same `group_by`, for the next page; null on the last one.' }),
  })
  .strict()
  .openapi('UsageTotals');
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
const customerDetailSchema = extended(customerListEntrySchema, { sources: z.array(sourceSchema).nullable().openapi({ description: 'Every source, archived ones included.' }) })
  .openapi('CustomerDetail');
const usd = z.string().openapi({ description: 'Exact decimal string.' });
const dailyUsageSchema = z
  .object({
    date: z.string().date(),
    operations: z.number().int().openapi({ description: 'Deducts, consumes and settled gateway calls.' }),
    credits: z.number().int(),
    cost_usd: usd,
    by_model: z.array(
      z
        .object({
          model: z.string(),
          calls: z.number().int(),
          input_tokens: z.number().int(),
          output_tokens: z.number().int(),
          cost_credits: z.number().int(),
          cost_usd: usd,
        })
        .strict(),
    ),
  })
  .strict()
  .openapi('DailyUsage');
const queuesSchema = z
  .object({ data: z.array(z.object({ name: z.string(), counts: z.object(Object.fromEntries(job_states.map((s) => [s, z.number().int()]))).strict() }).strict()) })
  .strict();
const depositDoc = depositSchema.extend({
  amount: z.number().int().min(1).max(amount_credits_max).openapi({ description: 'Integer credits, whatever the contract variant.' }),
  wallet: walletNameSchema.optional().openapi({ description: "Default: the project's default wallet (`credits` for contract B, `default` for A)." }),
  starts_at: z.string().optional(),
  expires_at: z.string().optional(),
});
const keyCreateDoc = keyCreateSchema.extend({ expires_at: z.string().nullish().openapi({ description: 'ISO 8601, later than now.' }) });

const ok = (description: string, schema: z.ZodTypeAny) => ({ 200: { description, schema } });
const created = (description: string, schema: z.ZodTypeAny) => ({ 201: { description, schema } });
const projectParams = 'not_found' as const;
const modelParams = z.object({ project_id: z.string(), model_id: modelIdSchema });

describeOperation({ method: 'GET', path: '/organization', role: 'viewer', tag: 'Organization', summary: 'The organization and its plan', responses: ok('The organization', organizationSchema) });
describeOperation({
  method: 'GET',
  path: '/organization/plan/preview',
  role: 'viewer',
  tag: 'Organization',
  summary: 'What a plan change would do now',
  query: planPreviewQuery,
  responses: ok('The quote', quoteSchema),
});
describeOperation({
  method: 'PUT',
  path: '/organization/plan',
  role: 'owner',
  tag: 'Organization',
  summary: 'Change the plan',
  description: 'An upgrade applies at once (charged pro rata); a downgrade starts with the next period.',
  body: planSchema.strict(),
  responses: ok('The organization, with the change', extended(organizationSchema, { change: quoteSchema })),
});
describeOperation({
  method: 'POST',
  path: '/projects',
  role: 'admin',
  tag: 'Projects',
  summary: 'Create a project',
  body: projectCreateSchema.strict(),
  responses: created('The project', projectSchema),
  errors: ['plan_limit_reached'],
});
describeOperation({ method: 'GET', path: '/projects', role: 'viewer', tag: 'Projects', summary: 'The projects', query: listQuery, responses: ok('A page of projects', listOf(projectSchema)) });
describeOperation({ method: 'GET', path: '/projects/:project_id', role: 'viewer', tag: 'Projects', summary: 'A project', responses: ok('The project', projectSchema), errors: [projectParams] });
describeOperation({
  method: 'PATCH',
  path: '/projects/:project_id',
  role: 'admin',
  tag: 'Projects',
  summary: "Change a project's name, contract variant or rate limit",
  body: projectPatchSchema.strict(),
  responses: ok('The project', projectSchema),
  errors: [projectParams, 'project_deactivated'],
});
describeOperation({
  method: 'DELETE',
  path: '/projects/:project_id',
  role: 'admin',
  tag: 'Projects',
  summary: 'Deactivate a project',
  description:
    "Deactivation, not deletion: the project's customers, ledger, usage records and receipts stay readable here, and its keys are revoked in the same transaction, so nothing can spend or deposit any more (calls in flight finish). Later changes to the project answer 409 `project_deactivated`. Deactivating again answers the project as it is, with `keys_revoked: 0`.",
  responses: ok('The project, deactivated', extended(projectSchema, { keys_revoked: z.number().int().openapi({ description: 'The keys this call revoked.' }) })),
  errors: [projectParams],
});
describeOperation({
  method: 'POST',
  path: '/projects/:project_id/reconcile',
  role: 'admin',
  tag: 'Projects',
  summary: "Start a reconcile of the project's customers (Redis against PostgreSQL) in the background",
  description:
    'Queues a job that the workers run; with `repair`, it rewrites Redis from PostgreSQL. The body may be omitted. ' +
    'While a job of the same kind is queued or running for the project, that one is answered. Follow it at `Location`.',
  body: reconcileSchema.strict(),
  bodyOptional: true,
  responses: {
    202: {
      description: 'The job, queued',
      schema: reconcileJobStartedSchema,
      headers: { Location: { description: "The job's address (GET it for its status and report)", schema: z.string(), required: true } },
    },
  },
  errors: [projectParams],
});
describeOperation({
  method: 'GET',
  path: '/projects/:project_id/reconcile/:job_id',
  role: 'admin',
  tag: 'Projects',
  summary: 'A reconcile job: its status, progress and, once completed, its report',
  description: "Another project's job, or one finished more than 24 hours ago, is not found.",
  responses: ok('The job', reconcileJobSchema),
  errors: [projectParams],
});
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
describeOperation({ method: 'GET', path: '/projects/:project_id/models', role: 'viewer', tag: 'Models', summary: "The project's models", query: listQuery, responses: ok('A page of models', listOf(adminModelEntrySchema)), errors: [projectParams] });
describeOperation({
  method: 'PUT',
  path: '/projects/:project_id/models/*model_id',
  role: 'admin',
  tag: 'Models',
  summary: 'Create or replace a model',
  description: 'The model id may contain `/`: sent percent-encoded as one segment (`openai%2Fgpt-4o`) or raw (`openai/gpt-4o`).',
  params: modelParams,
  body: modelPutSchema,
  responses: { ...created('The model, created, with its warnings', modelWriteSchema), ...ok('The model, replaced, with its warnings', modelWriteSchema) },
  errors: [projectParams, 'project_deactivated'],
});
describeOperation({
  method: 'PATCH',
  path: '/projects/:project_id/models/*model_id',
  role: 'admin',
  tag: 'Models',
  summary: 'Change some fields of a model',
  description:
    'Any field of the PUT; the others keep their values. A price may be sent in credits or in USD (`*_price_per_million_usd`, a whole number of credits). A model read sent back is accepted: the fields a read adds are ignored. 404 `not_found` when the model does not exist (PUT creates it).',
  params: modelParams,
  body: modelPatchSchema,
  responses: ok('The model, changed, with its warnings', modelWriteSchema),
  errors: [projectParams, 'project_deactivated'],
});
describeOperation({
  method: 'DELETE',
  path: '/projects/:project_id/models/*model_id',
  role: 'admin',
  tag: 'Models',
  summary: 'Delete a model',
  description:
    'A real delete: usage records and receipts keep the model id and the prices they were billed at. A call that already loaded the model finishes with it. To stop serving a model and keep it, PATCH `{"active": false}`.',
  params: modelParams,
  responses: ok('The model as it was, with `deleted: true`', extended(adminModelEntrySchema, { deleted: z.literal(true) })),
  errors: [projectParams, 'project_deactivated'],
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
  method: 'GET',
  path: '/projects/:project_id/customers/:customer_id',
  role: 'viewer',
  tag: 'Customers',
  summary: 'A customer, with its balance and sources',
  responses: ok('The customer', customerDetailSchema),
  errors: [projectParams, 'customer_not_found'],
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
describeOperation({
  method: 'GET',
  path: '/projects/:project_id/usage',
  role: 'viewer',
  tag: 'Gateway',
  summary: "The project's gateway calls",
  query: usageQuery,
  responses: ok('A page of usage records', usagePageSchema),
  errors: [projectParams],
});
describeOperation({
  method: 'GET',
  path: '/projects/:project_id/receipts/:transaction_id',
  role: 'viewer',
  tag: 'Gateway',
  summary: "A gateway call's receipt",
  responses: ok('The receipt', receiptSchema),
  errors: [projectParams],
});
describeOperation({
  method: 'GET',
  path: '/usage/daily',
  role: 'viewer',
  tag: 'Organization',
  summary: 'Billable operations per UTC day',
  query: dailyUsageQuery,
  responses: ok('A page of days, newest first', listOf(dailyUsageSchema)),
  errors: [projectParams],
});
describeOperation({
  method: 'GET',
  path: '/usage',
  role: 'viewer',
  tag: 'Gateway',
  summary: 'Gateway usage and cost totals, grouped',
  description:
    "The organization's gateway calls summed per group of `group_by`: a comma-separated list of `day`, `project`, `customer` and `model` (all four when omitted; empty for one total). Groups are sorted by day (newest first), then project, customer and model. `from` (inclusive) and `to` (exclusive) bound the calls' times; `project_id`, `customer_id` and `model` filter. 404 `not_found` for a project of another organization.",
  query: usageTotalsQuery.extend({
    group_by: z.string().max(64).optional().openapi({ description: 'Comma-separated: `day`, `project`, `customer`, `model`. Default: all four; empty: one total.' }),
  }),
  responses: ok('A page of groups', usageTotalsSchema),
  errors: [projectParams],
});
describeOperation({ method: 'GET', path: '/members', role: 'viewer', tag: 'Members', summary: "The organization's members", query: listQuery, responses: ok('A page of members', listOf(memberSchema)) });
describeOperation({
  method: 'POST',
  path: '/members',
  role: 'owner',
  tag: 'Members',
  summary: 'Add a member',
  description: 'Without `password` the service makes one and answers it once, as `password`.',
  body: memberCreateSchema.strict(),
  responses: created('The member', extended(memberSchema, { password: z.string().optional().openapi({ description: 'The password the service made (only when none was sent).' }) })),
  errors: ['email_taken', 'plan_limit_reached'],
});
describeOperation({ method: 'GET', path: '/members/:member_id', role: 'viewer', tag: 'Members', summary: 'A member', responses: ok('The member', memberSchema), errors: ['not_found'] });
describeOperation({
  method: 'PATCH',
  path: '/members/:member_id',
  role: 'owner',
  tag: 'Members',
  summary: "Change a member's role",
  body: memberPatchSchema.strict(),
  responses: ok('The member', memberSchema),
  errors: ['not_found', 'last_owner'],
});
describeOperation({
  method: 'DELETE',
  path: '/members/:member_id',
  role: 'owner',
  tag: 'Members',
  summary: 'Remove a member',
  description: "Ends the member's sessions.",
  responses: ok('The member, with `deleted: true`', extended(memberSchema, { deleted: z.literal(true) })),
  errors: ['not_found', 'last_owner'],
});
describeOperation({ method: 'GET', path: '/invoices', role: 'viewer', tag: 'Organization', summary: "The organization's invoices", query: listQuery, responses: ok('A page of invoices', listOf(invoiceSchema)) });
describeOperation({ method: 'GET', path: '/invoices/:invoice_id', role: 'viewer', tag: 'Organization', summary: 'An invoice', responses: ok('The invoice', invoiceSchema), errors: ['not_found'] });
describeOperation({
  method: 'GET',
  path: '/queues',
  role: 'owner',
  tag: 'Organization',
  summary: "The service's job queues, counted by state",
  description: "The service's own BullMQ queues, shared by every organization: counts only.",
  responses: ok('The queues', queuesSchema),
});

/** A customer id from the path, held to what a deposit body's customer_id may be (PostgreSQL stores it). */
function customerIdParam(req: Request): string {
  const id = parseWith(identifierSchema, String(req.params.customer_id));
  if (jsonFault(id) !== null) throw new ApiError('invalid_request', { param: 'customer_id', message: 'customer_id must not contain U+0000 or unpaired surrogates' });
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
    active: p.deactivated_at === null,
    deactivated_at: p.deactivated_at === null ? null : new Date(p.deactivated_at).toISOString(),
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


/** The services the management operations use. */
export interface ManagementDeps {
  config: Config;
  logger: Logger;
  db: DatabasePool;
  redis: RedisClient;
  keyCache: KeyCache;
  ledger: LedgerService;
  ledgerQueries: LedgerQueries;
  modelQueries: ModelQueries;
  models: ModelCache;
  plans: PlanService;
  queues: readonly Queue[];
  reconcileQueue: Queue<ReconcileJobData, ReconcileReport>;
  upstream: UpstreamClient;
  usageQueries: UsageQueries;
}

export function managementOperations(rt: ManagementDeps): Operation[] {
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

  /** A project that may be changed: 409 project_deactivated for a deactivated one. */
  async function writableProject(req: Request, res: Response): Promise<ProjectRow> {
    const project = await projectOr404(req, res);
    if (project.deactivated_at !== null) throw projectDeactivated(project.id);
    return project;
  }

  const modelPath = (project: ProjectRow, modelId: string) => `/v1/admin/projects/${project.id}/models/${encodeURIComponent(modelId)}`;
  const modelAnswer = (project: ProjectRow, model: ModelRow) => ({ ...adminModelEntry(model), warnings: modelWarnings(model, modelPath(project, model.id)) });

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
    await writableProject(req, res);
    const project = await admin.updateProject(orgOf(res), String(req.params.project_id), patch);
    if (!project) throw new ApiError('not_found', { message: 'project not found' });
    // API processes cache key records with their project's contract and rate limit.
    await projectChanged(project.id);
    res.json(projectEntry(project));
  });

  // Deactivation, not deletion: the project's customers, ledger, usage records and
  // receipts are money records, and stay readable here. Its keys are revoked in the same
  // transaction, so nothing can spend or deposit any more; what was in flight finishes.
  op('DELETE', '/projects/:project_id', 'admin', async (req, res) => {
    onlyQuery(req);
    const done = await admin.deactivateProject(orgOf(res), String(req.params.project_id));
    if (!done) throw new ApiError('not_found', { message: 'project not found' });
    // Every API process drops the project's cached key records and models.
    await projectChanged(done.project.id);
    res.json({ ...projectEntry(done.project), keys_revoked: done.keysRevoked });
  });

  // Reconcile runs as a background job (src/reconcile/jobs.ts): 202 and where to ask.
  op('POST', '/projects/:project_id/reconcile', 'admin', async (req, res) => {
    const project = await projectOr404(req, res);
    const { repair } = strictBody(req, reconcileSchema, { optional: true });
    const job = await startReconcileJob(rt.reconcileQueue, project.id, repair);
    // Over HTTP, the status's address under the mount the call came through.
    const path = req.originalUrl?.split('?')[0];
    if (path) res.setHeader('Location', `${path}/${encodeURIComponent(job.id)}`);
    res.status(202).json(startedEntry(job));
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

  /** An upstream on the service's own network would let a project admin reach it (SSRF). */
  async function checkUpstream(url: string | undefined): Promise<void> {
    const refused = url === undefined ? null : await rt.upstream.baseUrlRefusal(url);
    if (refused !== null) throw new ApiError('invalid_request', { param: 'upstream_base_url', message: refused });
  }

  op('PUT', '/projects/:project_id/models/*model_id', 'admin', async (req, res) => {
    const project = await writableProject(req, res);
    const modelId = modelIdParam(req);
    const input = modelInputOf(strictBody(req, modelPutSchema), null);
    await checkUpstream(input.upstream_base_url);
    const { model, created } = await models.upsertModel(project.id, modelId, input);
    // Gateway processes cache models per project and drop them on this message.
    await projectChanged(project.id);
    res.status(created ? 201 : 200).json(modelAnswer(project, model));
  });

  op('PATCH', '/projects/:project_id/models/*model_id', 'admin', async (req, res) => {
    const project = await writableProject(req, res);
    const modelId = modelIdParam(req);
    const body = strictBody(req, modelPatchSchema);
    await checkUpstream(body.upstream_base_url);
    const model = await models.updateModel(project.id, modelId, (current) => modelInputOf(body, current));
    if (!model) throw new ApiError('not_found', { message: `model ${modelId} not found; PUT creates it` });
    await projectChanged(project.id);
    res.json(modelAnswer(project, model));
  });

  // A real delete: nothing of the ledger refers to the row (usage records and receipts
  // keep the model id and the prices they were billed at). A call that already loaded the
  // model finishes with it; `active: false` is the way to stop serving a model and keep it.
  op('DELETE', '/projects/:project_id/models/*model_id', 'admin', async (req, res) => {
    onlyQuery(req);
    const project = await writableProject(req, res);
    const modelId = modelIdParam(req);
    const model = await models.deleteModel(project.id, modelId);
    if (!model) throw new ApiError('not_found', { message: `model ${modelId} not found` });
    await projectChanged(project.id);
    res.json({ ...adminModelEntry(model), deleted: true });
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
    const project = await writableProject(req, res);
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
    if (!found) throw new ApiError('not_found', { message: receipt_not_found_message });
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

  op('GET', '/usage', 'viewer', async (req, res) => {
    onlyQuery(req, Object.keys(usageTotalsQuery.shape));
    const q = parseWith(usageTotalsQuery, req.query);
    const project = q.project_id === undefined ? null : await projectOr404(req, res, q.project_id);
    const fromMs = q.from === undefined ? null : Date.parse(q.from);
    const toMs = q.to === undefined ? null : Date.parse(q.to);
    if (fromMs !== null && toMs !== null && toMs <= fromMs) throw new ApiError('invalid_request', { param: 'to', message: 'to must be later than from' });
    const rows = await listings.usageTotals({
      organizationId: orgOf(res),
      projectId: project?.id ?? null,
      customerId: q.customer_id ?? null,
      model: q.model ?? null,
      fromMs,
      toMs,
      groupBy: q.group_by,
      after: q.cursor === undefined ? null : decodeUsageCursor(q.group_by, q.cursor),
      limit: q.limit,
    });
    const shown = rows.slice(0, q.limit);
    const hasMore = rows.length > q.limit;
    const last = shown[shown.length - 1];
    res.json({
      object: 'list',
      group_by: q.group_by,
      data: shown.map(({ day, ...r }) => ({ date: day, ...r, cost_usd: creditsToUsd(r.cost_credits) })),
      has_more: hasMore,
      next_cursor: hasMore ? encodeUsageCursor(q.group_by, last) : null,
    });
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
    const data = await Promise.all(rt.queues.map(async (q) => ({ name: q.name, counts: await q.getJobCounts(...job_states) })));
    res.json({ data });
  });

  return ops;
}
