/**
 * A project's models (Variant B: the model list is exactly what the project configured).
 * The upstream provider key is stored only encrypted (src/keys/crypto.ts); it is
 * decrypted in one place, findModel, for the gateway that relays the call, and never
 * returned by the API.
 */
import { sql, type DatabasePool } from 'slonik';
import { z } from 'zod';
import { decryptSecret, encryptSecret } from '../keys/crypto.js';
import { keysetOrder, toPage, type Page, type PageRequest } from './queries.js';
import { extended, timestamp } from '../schema/zod.js';
import { file_token_bound_default, image_token_bound_default } from '../gateway/pricing.js';
import { storedUpstreams, storedUpstreamSchema, timeoutsSchema, upstreamKey, upstreamsEntry, upstreamsEntrySchema, type ModelTimeouts, type UpstreamInput } from '../gateway/model-upstreams.js';

export const model_id_chars_max = 128;
export const token_count_max = 10_000_000;
/** $100,000 per million tokens: far above any real price, low enough to catch a unit slip. */
export const price_per_million_credits_max = 100_000_000_000;
export const upstream_key_chars_max = 4096;
export const credits_per_usd = 1_000_000;

/** The four prices of a model, as their fields are named (`<kind>_price_per_million_credits`). */
export const model_price_kinds = ['input', 'output', 'cache_read', 'cache_write'] as const;
export type ModelPriceKind = (typeof model_price_kinds)[number];

/** The catalogue entry a model takes prices from (src/admin/price-catalogue.ts), and its version. */
export interface PriceCatalogueRef {
  provider: string;
  model: string;
  version: string;
}

/** 1-128 characters, `/` allowed (`provider/model`), no control characters. */
export const modelIdSchema = z
  .string()
  .min(1)
  .max(model_id_chars_max)
  // eslint-disable-next-line no-control-regex -- the control characters are what the pattern refuses
  .regex(/^[^\u0000-\u001f\u007f]+$/, 'model ids may not contain control characters');

/**
 * The upstream endpoint a model's provider serves it at: OpenAI chat completions or the
 * Responses API, Anthropic messages. The gateway serves a model natively at the path of
 * its format (docs/API.md, "Models").
 */
export const model_wire_formats = ['chat_completions', 'responses', 'messages'] as const;
export type ModelWireFormat = (typeof model_wire_formats)[number];

/** A provider's wire format when a write names none. */
export function defaultWireFormat(provider: 'openai' | 'anthropic'): ModelWireFormat {
  return provider === 'anthropic' ? 'messages' : 'chat_completions';
}

const modelRow = z.object({
  project_id: z.string(),
  id: z.string(),
  provider: z.enum(['openai', 'anthropic']),
  wire_format: z.enum(model_wire_formats),
  upstream_base_url: z.string(),
  upstream_model: z.string(),
  has_upstream_key: z.boolean(),
  display_name: z.string().nullable(),
  description: z.string().nullable(),
  context_window: z.number(),
  max_output_tokens: z.number(),
  supports_streaming: z.boolean(),
  active: z.boolean(),
  input_price_per_million_credits: z.number(),
  output_price_per_million_credits: z.number(),
  cache_read_price_per_million_credits: z.number(),
  cache_write_price_per_million_credits: z.number(),
  image_token_bound: z.number().nullable(),
  file_token_bound: z.number().nullable(),
  catalogue_provider: z.string().nullable(),
  catalogue_model: z.string().nullable(),
  catalogue_version: z.string().nullable(),
  catalogue_price_kinds: z.array(z.enum(model_price_kinds)),
  upstreams: z.array(storedUpstreamSchema).nullable(),
  timeouts: timeoutsSchema.nullable(),
  created_at: z.number(),
  updated_at: z.number(),
});
export type ModelRow = z.infer<typeof modelRow>;

/** What the gateway needs to relay a call: the model and its decrypted upstream key. */
export type ModelWithKey = ModelRow & {
  upstream_api_key: string | null;
  /** The key of each listed upstream that has its own, decrypted, by upstream id. */
  upstream_keys: Record<string, string>;
};

export interface ModelInput {
  provider: 'openai' | 'anthropic';
  /** Absent: the provider's (defaultWireFormat). */
  wire_format?: ModelWireFormat;
  upstream_base_url: string;
  upstream_model: string;
  /** A new key; null removes the stored one; undefined keeps it. */
  upstream_api_key?: string | null;
  display_name: string | null;
  description: string | null;
  context_window: number;
  max_output_tokens: number;
  supports_streaming: boolean;
  active: boolean;
  input_price_per_million_credits: number;
  output_price_per_million_credits: number;
  cache_read_price_per_million_credits: number;
  cache_write_price_per_million_credits: number;
  /** Tokens one image part / one file part adds to a call's hold; null or absent: the provider's default. */
  image_token_bound?: number | null;
  file_token_bound?: number | null;
  /** The catalogue entry the prices came from (null or absent: priced by hand), and which prices are its (the others: overrides). */
  price_catalogue?: PriceCatalogueRef | null;
  catalogue_price_kinds?: ModelPriceKind[];
  /** The upstreams to route among (null: upstream_base_url alone); undefined keeps the stored ones (none for a new model). */
  upstreams?: UpstreamInput[] | null;
  /** Null: the service's defaults; undefined keeps the stored ones (the defaults for a new model). */
  timeouts?: ModelTimeouts | null;
}

const modelColumns = sql.fragment`
  project_id, id, provider, wire_format, upstream_base_url, upstream_model, upstream_key_ciphertext IS NOT NULL AS has_upstream_key,
  display_name, description, context_window, max_output_tokens, supports_streaming, active,
  input_price_per_million_credits, output_price_per_million_credits,
  cache_read_price_per_million_credits, cache_write_price_per_million_credits, image_token_bound, file_token_bound,
  catalogue_provider, catalogue_model, catalogue_version, catalogue_price_kinds, upstreams, timeouts,
  created_at, updated_at`;

/** Binds a ciphertext to its row: copied onto another model it does not decrypt. */
function keyAssociatedData(projectId: string, modelId: string): string {
  return `models/${projectId}/${modelId}`;
}

const usd = (credits: number) => credits / credits_per_usd;

/** A jsonb parameter, or SQL NULL. */
function jsonOrNull(value: unknown) {
  return value === null ? null : sql.jsonb(value as Parameters<typeof sql.jsonb>[0]);
}

/** The stored model's catalogue entry, or null. */
function priceCatalogueOf(m: Pick<ModelRow, 'catalogue_provider' | 'catalogue_model' | 'catalogue_version'>): PriceCatalogueRef | null {
  return m.catalogue_provider === null || m.catalogue_model === null || m.catalogue_version === null
    ? null
    : { provider: m.catalogue_provider, model: m.catalogue_model, version: m.catalogue_version };
}

/** Where each price came from: `catalogue` (the entry of `price_catalogue`) or `override` (given explicitly). */
function priceSources(kinds: readonly ModelPriceKind[]): Record<ModelPriceKind, 'catalogue' | 'override'> {
  return Object.fromEntries(model_price_kinds.map((k) => [k, kinds.includes(k) ? 'catalogue' : 'override'])) as Record<ModelPriceKind, 'catalogue' | 'override'>;
}

/** The model entry of the spec (GET /v1/models); `owned_by` is the upstream provider. */
export function modelEntry(m: ModelRow) {
  return {
    id: m.id,
    object: 'model' as const,
    created: Math.floor(m.created_at / 1000),
    active: m.active,
    owned_by: m.provider,
    wire_format: m.wire_format,
    display_name: m.display_name ?? m.id,
    description: m.description,
    context_window: m.context_window,
    max_output_tokens: m.max_output_tokens,
    input_price_per_million_credits: m.input_price_per_million_credits,
    input_price_per_million_usd: usd(m.input_price_per_million_credits),
    output_price_per_million_credits: m.output_price_per_million_credits,
    output_price_per_million_usd: usd(m.output_price_per_million_credits),
    cache_read_price_per_million_credits: m.cache_read_price_per_million_credits,
    cache_read_price_per_million_usd: usd(m.cache_read_price_per_million_credits),
    cache_write_price_per_million_credits: m.cache_write_price_per_million_credits,
    cache_write_price_per_million_usd: usd(m.cache_write_price_per_million_credits),
    price_catalogue: priceCatalogueOf(m),
    price_sources: priceSources(m.catalogue_price_kinds),
    supports_streaming: m.supports_streaming,
    image_token_bound: m.image_token_bound ?? image_token_bound_default,
    file_token_bound: m.file_token_bound ?? file_token_bound_default,
  };
}

/** The management view: the entry plus where it is relayed to (never the key itself). */
export function adminModelEntry(m: ModelRow) {
  return {
    ...modelEntry(m),
    provider: m.provider,
    upstream_base_url: m.upstream_base_url,
    upstream_model: m.upstream_model,
    has_upstream_key: m.has_upstream_key,
    upstreams: upstreamsEntry(m.upstreams, m.has_upstream_key),
    timeouts: m.timeouts ?? {},
    updated_at: new Date(m.updated_at).toISOString(),
  };
}

export function createModelQueries(pool: DatabasePool, masterKey: Buffer) {
  return {
    /** Creates or replaces a model; `created` tells which. */
    async upsertModel(projectId: string, modelId: string, m: ModelInput): Promise<{ model: ModelRow; created: boolean }> {
      // An upstream written without its key keeps the one stored under its id.
      const previous = m.upstreams
        ? await pool.maybeOneFirst(sql.type(z.object({ upstreams: z.array(storedUpstreamSchema).nullable() }))`
            SELECT upstreams FROM models WHERE project_id = ${projectId} AND id = ${modelId}`)
        : null;
      const upstreams = jsonOrNull(storedUpstreams(masterKey, projectId, modelId, m.upstreams ?? null, previous));
      const ciphertext =
        typeof m.upstream_api_key === 'string'
          ? sql.binary(encryptSecret(masterKey, m.upstream_api_key, keyAssociatedData(projectId, modelId)))
          : null;
      const keyOnUpdate = m.upstream_api_key === undefined ? sql.fragment`models.upstream_key_ciphertext` : sql.fragment`EXCLUDED.upstream_key_ciphertext`;
      // xmax is 0 only on a row this statement inserted (not one it updated).
      const row = await pool.one(sql.type(modelRow.extend({ created: z.boolean() }))`
        INSERT INTO models (project_id, id, provider, wire_format, upstream_base_url, upstream_model, upstream_key_ciphertext,
                            display_name, description, context_window, max_output_tokens, supports_streaming, active,
                            input_price_per_million_credits, output_price_per_million_credits,
                            cache_read_price_per_million_credits, cache_write_price_per_million_credits,
                            image_token_bound, file_token_bound,
                            catalogue_provider, catalogue_model, catalogue_version, catalogue_price_kinds, upstreams, timeouts)
        VALUES (${projectId}, ${modelId}, ${m.provider}, ${m.wire_format ?? defaultWireFormat(m.provider)}, ${m.upstream_base_url}, ${m.upstream_model}, ${ciphertext},
                ${m.display_name}, ${m.description}, ${m.context_window}, ${m.max_output_tokens}, ${m.supports_streaming}, ${m.active},
                ${m.input_price_per_million_credits}, ${m.output_price_per_million_credits},
                ${m.cache_read_price_per_million_credits}, ${m.cache_write_price_per_million_credits},
                ${m.image_token_bound ?? null}, ${m.file_token_bound ?? null},
                ${m.price_catalogue?.provider ?? null}, ${m.price_catalogue?.model ?? null}, ${m.price_catalogue?.version ?? null},
                ${sql.array(m.price_catalogue ? (m.catalogue_price_kinds ?? []) : [], 'text')}, ${upstreams}, ${jsonOrNull(m.timeouts ?? null)})
        ON CONFLICT (project_id, id) DO UPDATE SET
          provider = EXCLUDED.provider, wire_format = EXCLUDED.wire_format, upstream_base_url = EXCLUDED.upstream_base_url, upstream_model = EXCLUDED.upstream_model,
          upstream_key_ciphertext = ${keyOnUpdate},
          display_name = EXCLUDED.display_name, description = EXCLUDED.description,
          context_window = EXCLUDED.context_window, max_output_tokens = EXCLUDED.max_output_tokens,
          supports_streaming = EXCLUDED.supports_streaming, active = EXCLUDED.active,
          input_price_per_million_credits = EXCLUDED.input_price_per_million_credits,
          output_price_per_million_credits = EXCLUDED.output_price_per_million_credits,
          cache_read_price_per_million_credits = EXCLUDED.cache_read_price_per_million_credits,
          cache_write_price_per_million_credits = EXCLUDED.cache_write_price_per_million_credits,
          image_token_bound = EXCLUDED.image_token_bound, file_token_bound = EXCLUDED.file_token_bound,
          catalogue_provider = EXCLUDED.catalogue_provider, catalogue_model = EXCLUDED.catalogue_model,
          catalogue_version = EXCLUDED.catalogue_version, catalogue_price_kinds = EXCLUDED.catalogue_price_kinds,
          upstreams = ${m.upstreams === undefined ? sql.fragment`models.upstreams` : sql.fragment`EXCLUDED.upstreams`},
          timeouts = ${m.timeouts === undefined ? sql.fragment`models.timeouts` : sql.fragment`EXCLUDED.timeouts`},
          updated_at = now()
        RETURNING ${modelColumns}, (xmax = 0) AS created`);
      const { created, ...model } = row;
      return { model, created };
    },

    /**
     * Changes a model in place (PATCH): `change` gets the stored fields (the upstream key
     * left undefined: kept unless `change` sets it) and returns the new ones, or throws to
     * change nothing. The row is locked meanwhile, so two concurrent PATCHes of different
     * fields both apply. Null when the project has no such model.
     */
    async updateModel(projectId: string, modelId: string, change: (current: ModelInput) => ModelInput): Promise<ModelRow | null> {
      return pool.transaction(async (tx) => {
        const row = await tx.maybeOne(sql.type(modelRow)`
          SELECT ${modelColumns} FROM models WHERE project_id = ${projectId} AND id = ${modelId} FOR UPDATE`);
        if (!row) return null;
        const { project_id: _p, id: _i, has_upstream_key: _h, created_at: _c, updated_at: _u, catalogue_provider: _cp, catalogue_model: _cm, catalogue_version: _cv, upstreams: storedList, ...stored } = row;
        const m = change({ ...stored, price_catalogue: priceCatalogueOf(row) });
        const upstreams =
          m.upstreams === undefined ? sql.fragment`upstreams` : sql.fragment`${jsonOrNull(storedUpstreams(masterKey, projectId, modelId, m.upstreams, storedList))}`;
        const key =
          m.upstream_api_key === undefined
            ? sql.fragment`upstream_key_ciphertext`
            : m.upstream_api_key === null
              ? sql.fragment`NULL`
              : sql.fragment`${sql.binary(encryptSecret(masterKey, m.upstream_api_key, keyAssociatedData(projectId, modelId)))}`;
        return tx.one(sql.type(modelRow)`
          UPDATE models SET
            provider = ${m.provider}, wire_format = ${m.wire_format ?? defaultWireFormat(m.provider)}, upstream_base_url = ${m.upstream_base_url}, upstream_model = ${m.upstream_model},
            upstream_key_ciphertext = ${key}, display_name = ${m.display_name}, description = ${m.description},
            context_window = ${m.context_window}, max_output_tokens = ${m.max_output_tokens},
            supports_streaming = ${m.supports_streaming}, active = ${m.active},
            input_price_per_million_credits = ${m.input_price_per_million_credits},
            output_price_per_million_credits = ${m.output_price_per_million_credits},
            cache_read_price_per_million_credits = ${m.cache_read_price_per_million_credits},
            cache_write_price_per_million_credits = ${m.cache_write_price_per_million_credits},
            image_token_bound = ${m.image_token_bound ?? null}, file_token_bound = ${m.file_token_bound ?? null},
            catalogue_provider = ${m.price_catalogue?.provider ?? null}, catalogue_model = ${m.price_catalogue?.model ?? null},
            catalogue_version = ${m.price_catalogue?.version ?? null}, catalogue_price_kinds = ${sql.array(m.price_catalogue ? (m.catalogue_price_kinds ?? []) : [], 'text')},
            upstreams = ${upstreams}, timeouts = ${jsonOrNull(m.timeouts ?? null)},
            updated_at = now()
          WHERE project_id = ${projectId} AND id = ${modelId}
          RETURNING ${modelColumns}`);
      });
    },

    /**
     * Deletes a model; null when there is none. Nothing of the ledger refers to the row:
     * usage records and receipts keep the model id and the prices they were billed at.
     */
    deleteModel(projectId: string, modelId: string): Promise<ModelRow | null> {
      return pool.maybeOne(sql.type(modelRow)`
        DELETE FROM models WHERE project_id = ${projectId} AND id = ${modelId} RETURNING ${modelColumns}`);
    },

    /**
     * The model with its upstream key in clear, for the gateway. Throws when the key
     * cannot be decrypted (another master key): a call must not go upstream without it.
     */
    async findModel(projectId: string, modelId: string): Promise<ModelWithKey | null> {
      const row = await pool.maybeOne(sql.type(modelRow.extend({ upstream_key_ciphertext: z.instanceof(Buffer).nullable() }))`
        SELECT ${modelColumns}, upstream_key_ciphertext FROM models WHERE project_id = ${projectId} AND id = ${modelId}`);
      if (!row) return null;
      const { upstream_key_ciphertext: ciphertext, ...model } = row;
      const upstream_api_key = ciphertext === null ? null : decryptSecret(masterKey, ciphertext, keyAssociatedData(projectId, modelId));
      const upstream_keys: Record<string, string> = {};
      for (const u of model.upstreams ?? []) {
        const key = upstreamKey(masterKey, projectId, modelId, u);
        if (key !== null) upstream_keys[u.id] = key;
      }
      return { ...model, upstream_api_key, upstream_keys };
    },

    /** One model as the management API reads it (no key decrypted: a read shows none). */
    getModel(projectId: string, modelId: string): Promise<ModelRow | null> {
      return pool.maybeOne(sql.type(modelRow)`SELECT ${modelColumns} FROM models WHERE project_id = ${projectId} AND id = ${modelId}`);
    },

    async listModels(projectId: string, page: PageRequest): Promise<Page<ModelRow>> {
      const k = keysetOrder(page);
      const rows = await pool.any(sql.type(modelRow)`
        SELECT ${modelColumns} FROM models WHERE project_id = ${projectId} AND ${k.where} ${k.orderLimit}`);
      return toPage(rows, page.limit);
    },

    /** The ids of the project's active models, sorted (a gateway call's model_not_found lists them). */
    async activeModelIds(projectId: string): Promise<readonly string[]> {
      return pool.anyFirst(sql.type(z.object({ id: z.string() }))`SELECT id FROM models WHERE project_id = ${projectId} AND active ORDER BY id`);
    },

    /** GET /v1/models: the project's active models, by id. */
    listActiveModels(projectId: string): Promise<readonly ModelRow[]> {
      return pool.any(sql.type(modelRow)`
        SELECT ${modelColumns} FROM models WHERE project_id = ${projectId} AND active ORDER BY id`);
    },
  };
}

export type ModelQueries = ReturnType<typeof createModelQueries>;

// The documented answers (src/openapi/).
const perMillionCredits = z.number().int().openapi({ description: 'Credits per million tokens.' });
const perMillionUsd = z.number().openapi({ description: 'USD per million tokens (credits / 10^6).' });
const priceSource = z.enum(['catalogue', 'override']);

/** A model of `GET /v1/models`: modelEntry. */
export const modelEntrySchema = z
  .object({
    id: z.string(),
    object: z.literal('model'),
    created: z.number().int().openapi({ description: 'Unix seconds of the first PUT.' }),
    active: z.boolean(),
    owned_by: z.enum(['openai', 'anthropic']).openapi({ description: 'The provider.' }),
    wire_format: z.enum(model_wire_formats).openapi({
      description: 'The upstream endpoint the provider serves the model at, and so the gateway path that serves it natively: `chat_completions` (`POST /v1/chat/completions`), `responses` (`POST /v1/responses`) or `messages` (`POST /v1/messages`); the other paths reach it translated.',
    }),
    display_name: z.string().openapi({ description: 'The id when none was set.' }),
    description: z.string().nullable(),
    context_window: z.number().int(),
    max_output_tokens: z.number().int(),
    input_price_per_million_credits: perMillionCredits,
    input_price_per_million_usd: perMillionUsd,
    output_price_per_million_credits: perMillionCredits,
    output_price_per_million_usd: perMillionUsd,
    cache_read_price_per_million_credits: perMillionCredits,
    cache_read_price_per_million_usd: perMillionUsd,
    cache_write_price_per_million_credits: perMillionCredits,
    cache_write_price_per_million_usd: perMillionUsd,
    price_catalogue: z
      .object({
        provider: z.string().openapi({ description: 'The catalogue provider id (`openai`, `anthropic`, `google`, ...).' }),
        model: z.string().openapi({ description: 'The catalogue model id, as the catalogue spells it.' }),
        version: z.string().openapi({ description: 'The @pydantic/genai-prices version the `catalogue` prices were resolved from.' }),
      })
      .strict()
      .nullable()
      .openapi({ description: 'The @pydantic/genai-prices entry the model takes its prices from; null for a model priced by hand.' }),
    price_sources: z
      .object(Object.fromEntries(model_price_kinds.map((k) => [k, priceSource])) as Record<ModelPriceKind, typeof priceSource>)
      .strict()
      .openapi({ description: 'Where each price came from: `catalogue` (resolved from `price_catalogue` when the model was written) or `override` (given explicitly; every price of a model without a catalogue).' }),
    supports_streaming: z.boolean(),
    image_token_bound: z.number().int().openapi({
      description: "Tokens each image part of a call adds to its hold's input bound: the model's own, else the provider's default (docs: What bytes do not bound).",
    }),
    file_token_bound: z.number().int().openapi({ description: 'The same for each file part (PDFs and other documents).' }),
  })
  .strict()
  .openapi('Model');

/** The management view of a model: adminModelEntry. */
export const adminModelEntrySchema = extended(modelEntrySchema, {
    provider: z.enum(['openai', 'anthropic']),
    upstream_base_url: z.string(),
    upstream_model: z.string(),
    has_upstream_key: z.boolean().openapi({ description: 'Whether a provider key is stored (it is never returned).' }),
    upstreams: upstreamsEntrySchema,
    timeouts: timeoutsSchema.openapi({ description: "The model's timeouts in ms; an absent field is the service's default (docs: Upstreams and failover)." }),
    updated_at: timestamp,
  })
  .openapi('AdminModel');
