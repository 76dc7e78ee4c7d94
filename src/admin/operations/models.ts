/**
 * The management operations on a project's models: list, read one, create or replace (PUT), change
 * some fields (PATCH), delete. A write takes prices in credits or in USD, refuses an
 * upstream on the service's own network, and answers what the saved model will do that
 * its writer may not expect (its warnings).
 */
import type { Request } from 'express';
import { z } from 'zod';
import { ApiError } from '../../errors/catalogue.js';
import { onlyQuery, strictBody } from '../../http/validate.js';
import { toCredits } from '../../ledger/amounts.js';
import { describeOperation } from '../../openapi/registry.js';
import { extended, listOf } from '../../schema/zod.js';
import { cataloguePrices } from '../price-catalogue.js';
import { timeoutsSchema, upstreamsWriteSchema } from '../../gateway/model-upstreams.js';
import type { UpstreamRouter } from '../../gateway/failover.js';
import {
  adminModelEntry,
  adminModelEntrySchema,
  credits_per_usd,
  defaultWireFormat,
  model_price_kinds,
  model_wire_formats,
  modelIdSchema,
  price_per_million_credits_max,
  token_count_max,
  upstream_key_chars_max,
  type ModelInput,
  type ModelPriceKind,
  type ModelRow,
  type ModelWireFormat,
} from '../models.js';
import type { ProjectRow } from '../queries.js';
import { created, listQuery, ok, operation, pageRequest, projectParams, sendList, type ManagementDeps, type Operation, type ProjectChanged, type ProjectLookup } from './shared.js';

export const url_chars_max = 2048;

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

/** The catalogue entry a write names (a read's `price_catalogue`, its `version` ignored, is accepted back). */
const priceCatalogueSchema = z
  .object({
    provider: z.string().min(1).max(64).openapi({ description: 'A @pydantic/genai-prices provider id: `openai`, `anthropic`, `google`, ...' }),
    model: z.string().min(1).max(256).openapi({ description: "A model id of that provider in the catalogue (the catalogue's own matching: `gpt-4o-2024-08-06` finds `gpt-4o`)." }),
    version: z.unknown().optional().openapi({ description: 'Ignored (a read sent back carries it).' }),
  })
  .strict();

/**
 * Every field a model write reads. A model read is accepted back as a write: the
 * `*_price_per_million_usd` prices set the price too (see modelInputOf), and the fields a
 * read adds (`id`, `object`, `created`, `owned_by`, `has_upstream_key`, `updated_at`, a
 * write's `warnings`) are accepted and ignored: the path names the model, and the service
 * keeps the others.
 */
const modelPatchSchema = z.object({
  provider: z.enum(['openai', 'anthropic']).optional(),
  wire_format: z
    .enum(model_wire_formats)
    .optional()
    .openapi({ description: "The upstream endpoint the provider serves the model at. Default: the provider's (`chat_completions` for `openai`, `messages` for `anthropic`); `responses` with `openai` only." }),
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
  price_catalogue: priceCatalogueSchema.nullable().optional(),
  upstreams: upstreamsWriteSchema(upstreamUrlSchema, upstream_key_chars_max)
    .nullable()
    .optional()
    .openapi({ description: 'The upstreams to route calls among, with failover (docs: Upstreams and failover); null: upstream_base_url alone. An upstream written without `api_key` keeps the key stored under its id, else uses upstream_api_key.' }),
  timeouts: timeoutsSchema.nullable().optional().openapi({ description: 'connect_ms, first_byte_ms, idle_ms; an absent field (or null) is the default.' }),
  price_sources: z.unknown().openapi({ description: 'Ignored (a read sent back carries it): sources follow from what is sent.' }),
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
 * The prices a write sends, per kind: in credits or in USD; both given must agree, and USD
 * must be a whole number of credits. 400 invalid_request naming the field otherwise.
 */
function explicitPrices(body: ModelWrite): Partial<Record<ModelPriceKind, number>> {
  const given: Partial<Record<ModelPriceKind, number>> = {};
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
    if (value !== undefined) given[kind] = value;
  }
  return given;
}

/**
 * The prices of `next` and where each came from (docs/API.md, "Prices from the
 * catalogue"). A price given explicitly wins (an override), unless it equals the
 * catalogue's or, with no catalogue named, the stored one: then it keeps its source (a
 * read sent back changes nothing). Naming a catalogue entry resolves it now: every price
 * not given comes from it, except, on a model that had a catalogue already, its overrides
 * (which stay). `price_catalogue: null` keeps the prices and makes them all overrides.
 */
function applyPrices(body: ModelWrite, current: ModelInput | null, next: ModelInput): void {
  const given = explicitPrices(body);
  const kinds = new Set<ModelPriceKind>(next.catalogue_price_kinds ?? []);
  if (body.price_catalogue === null) {
    next.price_catalogue = null;
    kinds.clear();
  } else if (body.price_catalogue !== undefined) {
    const catalogue = cataloguePrices(body.price_catalogue.provider, body.price_catalogue.model);
    const hadCatalogue = current?.price_catalogue != null;
    next.price_catalogue = catalogue.ref;
    for (const kind of model_price_kinds) {
      const field = `${kind}_price_per_million_credits` as const;
      const resolved = catalogue.prices[kind];
      const keptOverride = hadCatalogue && !kinds.has(kind);
      kinds.delete(kind);
      if (given[kind] !== undefined) {
        if ('credits' in resolved && resolved.credits === given[kind]) kinds.add(kind);
      } else if (keptOverride) {
        // An override stays what it was.
      } else if ('credits' in resolved) {
        next[field] = resolved.credits;
        kinds.add(kind);
      } else {
        throw new ApiError('invalid_request', { param: field, message: `${field}: ${resolved.refused}` });
      }
    }
  } else if (next.price_catalogue != null) {
    for (const kind of model_price_kinds) {
      if (given[kind] !== undefined && given[kind] !== next[`${kind}_price_per_million_credits`]) kinds.delete(kind);
    }
  }
  for (const kind of model_price_kinds) {
    const field = `${kind}_price_per_million_credits` as const;
    if (given[kind] !== undefined) next[field] = given[kind];
    if (next[field] < 0) {
      throw new ApiError('invalid_request', { param: field, message: `${field} (or ${kind}_price_per_million_usd, or price_catalogue) is required` });
    }
  }
  next.catalogue_price_kinds = model_price_kinds.filter((k) => kinds.has(k));
}

/**
 * The wire format a write leaves: the one it sends; else the stored one, unless the write
 * changes the provider (then the new provider's default, as for a model written without
 * one). The Responses API is OpenAI's only.
 */
function wireFormatOf(body: ModelWrite, current: ModelInput | null, next: ModelInput): ModelWireFormat {
  const providerChanged = current !== null && body.provider !== undefined && body.provider !== current.provider;
  const format = body.wire_format ?? (current === null || providerChanged ? defaultWireFormat(next.provider) : (current.wire_format ?? defaultWireFormat(next.provider)));
  if (format === 'responses' && next.provider !== 'openai') {
    throw new ApiError('invalid_request', { param: 'wire_format', message: `wire_format responses (the OpenAI Responses API) needs provider openai, not ${next.provider}` });
  }
  return format;
}

/**
 * The stored model a write makes: `body` over `current` (a PATCH) or over the defaults (a
 * PUT: no current); its prices by applyPrices.
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
    price_catalogue: null,
    catalogue_price_kinds: [],
  };
  const next: ModelInput = { ...base };
  for (const f of ['provider', 'upstream_base_url', 'upstream_model', 'upstream_api_key', 'display_name', 'description', 'context_window', 'max_output_tokens', 'supports_streaming', 'active', 'image_token_bound', 'file_token_bound', 'upstreams', 'timeouts'] as const) {
    if (body[f] !== undefined) (next as unknown as Record<string, unknown>)[f] = body[f];
  }
  next.wire_format = wireFormatOf(body, current, next);
  applyPrices(body, current, next);
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
  // An upstream of the list with a key of its own is called with it (src/gateway/models.ts):
  // the model is callable without a key of its own.
  if (!m.has_upstream_key && !(m.upstreams?.some((u) => u.key !== null) ?? false)) {
    warnings.push({
      code: 'byok_key_required',
      param: 'upstream_api_key',
      message: `the model has no upstream_api_key${m.upstreams === null ? '' : ' and none of its upstreams has an api_key'}: every gateway call to it answers 402 byok_key_required until one is set (PATCH ${modelPath} {"upstream_api_key": "..."})`,
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
      '`byok_key_required`: no `upstream_api_key` is stored, nor an `api_key` of any of its `upstreams`, every gateway call to the model answers 402 until one is set; `model_inactive`: the model is not listed and calls answer 404 `model_not_found`. Empty when neither.',
  }),
}).openapi('AdminModelWrite');
const modelParams = z.object({ project_id: z.string(), model_id: modelIdSchema });

describeOperation({ method: 'GET', path: '/projects/:project_id/models', role: 'viewer', tag: 'Models', summary: "The project's models", query: listQuery, responses: ok('A page of models', listOf(adminModelEntrySchema)), errors: [projectParams] });
describeOperation({
  method: 'GET',
  path: '/projects/:project_id/models/*model_id',
  role: 'viewer',
  tag: 'Models',
  summary: 'One model',
  description: 'The entry of the list, for one model (inactive ones included), with its upstreams\' state in the answering process. The model id as for PUT. 404 `model_not_found` naming it when the project has no such model.',
  params: modelParams,
  responses: ok('The model', adminModelEntrySchema),
  errors: [projectParams, 'model_not_found'],
});
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

/** An upstream on the service's own network would let a project admin reach it (SSRF). */
async function checkUpstream(upstream: ManagementDeps['upstream'], url: string | undefined, list?: { base_url: string }[] | null): Promise<void> {
  const refused = url === undefined ? null : await upstream.baseUrlRefusal(url);
  if (refused !== null) throw new ApiError('invalid_request', { param: 'upstream_base_url', message: refused });
  for (const [i, u] of (list ?? []).entries()) {
    const why = await upstream.baseUrlRefusal(u.base_url);
    if (why !== null) throw new ApiError('invalid_request', { param: `upstreams[${i}].base_url`, message: why });
  }
}

const modelPath = (project: ProjectRow, modelId: string) => `/v1/admin/projects/${project.id}/models/${encodeURIComponent(modelId)}`;
/** The management view with each listed upstream's routing state in this process (src/gateway/failover.ts). */
function routedEntry(router: UpstreamRouter, model: ModelRow) {
  const entry = adminModelEntry(model);
  const now = Date.now();
  return {
    ...entry,
    upstreams:
      entry.upstreams?.map((u) => {
        const s = router.status(model.project_id, model.id, u.id, now);
        return { ...u, state: s.state, cooling_until: s.until === null ? null : new Date(s.until).toISOString() };
      }) ?? null,
  };
}


interface ModelDeps extends Pick<ManagementDeps, 'modelQueries' | 'upstream'> {
  projects: ProjectLookup;
  projectChanged: ProjectChanged;
}

export function modelOperations(deps: ModelDeps): Operation[] {
  const models = deps.modelQueries;
  const { projectChanged } = deps;
  const { projectOr404, writableProject } = deps.projects;
  const { router } = deps.upstream;
  const modelAnswer = (project: ProjectRow, model: ModelRow) => ({ ...routedEntry(router, model), warnings: modelWarnings(model, modelPath(project, model.id)) });

  return [
    operation('GET', '/projects/:project_id/models', 'viewer', async (req, res) => {
      const project = await projectOr404(req, res);
      sendList(res, await models.listModels(project.id, pageRequest(req)), (m) => routedEntry(router, m));
    }),

    operation('GET', '/projects/:project_id/models/*model_id', 'viewer', async (req, res) => {
      onlyQuery(req);
      const project = await projectOr404(req, res);
      const modelId = modelIdParam(req);
      const model = await models.getModel(project.id, modelId);
      if (!model) throw new ApiError('model_not_found', { param: 'model_id', message: `model ${modelId} not found in project ${project.id}` });
      res.json(routedEntry(router, model));
    }),

    operation('PUT', '/projects/:project_id/models/*model_id', 'admin', async (req, res) => {
      const project = await writableProject(req, res);
      const modelId = modelIdParam(req);
      const input = modelInputOf(strictBody(req, modelPutSchema), null);
      await checkUpstream(deps.upstream, input.upstream_base_url, input.upstreams);
      const { model, created } = await models.upsertModel(project.id, modelId, input);
      // Gateway processes cache models per project and drop them on this message.
      await projectChanged(project.id);
      res.status(created ? 201 : 200).json(modelAnswer(project, model));
    }),

    operation('PATCH', '/projects/:project_id/models/*model_id', 'admin', async (req, res) => {
      const project = await writableProject(req, res);
      const modelId = modelIdParam(req);
      const body = strictBody(req, modelPatchSchema);
      await checkUpstream(deps.upstream, body.upstream_base_url, body.upstreams);
      const model = await models.updateModel(project.id, modelId, (current) => modelInputOf(body, current));
      if (!model) throw new ApiError('not_found', { message: `model ${modelId} not found; PUT creates it` });
      await projectChanged(project.id);
      res.json(modelAnswer(project, model));
    }),

    // A real delete: nothing of the ledger refers to the row (usage records and receipts
    // keep the model id and the prices they were billed at). A call that already loaded the
    // model finishes with it; `active: false` is the way to stop serving a model and keep it.
    operation('DELETE', '/projects/:project_id/models/*model_id', 'admin', async (req, res) => {
      onlyQuery(req);
      const project = await writableProject(req, res);
      const modelId = modelIdParam(req);
      const model = await models.deleteModel(project.id, modelId);
      if (!model) throw new ApiError('not_found', { message: `model ${modelId} not found` });
      await projectChanged(project.id);
      res.json({ ...routedEntry(router, model), deleted: true });
    }),
  ];
}
