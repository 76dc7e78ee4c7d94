/**
 * The models a gateway call may use, cached per process: a call must not wait for
 * PostgreSQL. A model change publishes a project change (src/keys/store.ts), which drops
 * that project's entries here at once; entries also expire after a few seconds. As in the
 * key cache, a read from PostgreSQL that an invalidation overtook (it may hold the old
 * prices) is not cached but read again (src/cache/invalidation.ts).
 */
import type { Redis } from 'ioredis';
import type { ModelWireFormat, ModelWithKey } from '../admin/models.js';
import { forgetOnResubscribe, InvalidationGuard } from '../cache/invalidation.js';
import { projectChannel } from '../keys/store.js';
import type { WireFormat } from './wire/format.js';
import { primary_upstream_id } from './model-upstreams.js';
import type { GatewayUpstream } from './failover.js';
import type { UpstreamTimeouts } from './upstream.js';
import { file_token_bound_default, image_token_bound_default, type PartTokenBounds, type Prices } from './pricing.js';

export interface GatewayModel {
  id: string;
  provider: 'openai' | 'anthropic';
  /** The format the upstream speaks (the model's `wire_format`, by its internal name): the gateway path that serves the model natively. */
  wireFormat: WireFormat;
  upstreamBaseUrl: string;
  upstreamModel: string;
  /** Decrypted; never logged or returned. */
  upstreamKey: string | null;
  maxOutputTokens: number;
  supportsStreaming: boolean;
  active: boolean;
  prices: Prices;
  /** Tokens an image part and a file part add to the hold's input bound: the model's own, else its provider's defaults. */
  partBounds: PartTokenBounds;
  /** Bounds the tokens of all parts together. */
  contextWindow: number;
  /**
   * What a call is routed among (src/gateway/failover.ts): the listed upstreams that have a
   * key (their own or the model's), else the model's upstream_base_url as `primary`; empty
   * when no key is stored.
   */
  upstreams: GatewayUpstream[];
  /** Undefined: the service's defaults. */
  timeouts: UpstreamTimeouts | undefined;
}

function upstreamsOf(m: ModelWithKey): GatewayUpstream[] {
  if (m.upstreams === null) {
    return m.upstream_api_key === null ? [] : [{ id: primary_upstream_id, baseUrl: m.upstream_base_url, apiKey: m.upstream_api_key, upstreamModel: m.upstream_model, weight: 1 }];
  }
  const list: GatewayUpstream[] = [];
  for (const u of m.upstreams) {
    const apiKey = m.upstream_keys[u.id] ?? m.upstream_api_key;
    if (apiKey !== null) list.push({ id: u.id, baseUrl: u.base_url, apiKey, upstreamModel: u.upstream_model ?? m.upstream_model, weight: u.weight });
  }
  return list;
}

/** A model's `wire_format` by the gateway's internal name of the format (src/gateway/wire/). */
const wire_format_names: Record<ModelWireFormat, WireFormat> = { chat_completions: 'openai', responses: 'responses', messages: 'anthropic' };

/** A model row of PostgreSQL (its upstream key decrypted) as the gateway uses it. */
export function gatewayModelOf(m: ModelWithKey): GatewayModel {
  return {
    id: m.id,
    provider: m.provider,
    wireFormat: wire_format_names[m.wire_format],
    upstreamBaseUrl: m.upstream_base_url,
    upstreamModel: m.upstream_model,
    upstreamKey: m.upstream_api_key,
    maxOutputTokens: m.max_output_tokens,
    supportsStreaming: m.supports_streaming,
    active: m.active,
    prices: {
      input: m.input_price_per_million_credits,
      output: m.output_price_per_million_credits,
      cacheRead: m.cache_read_price_per_million_credits,
      cacheWrite: m.cache_write_price_per_million_credits,
    },
    partBounds: {
      image: m.image_token_bound ?? image_token_bound_default,
      file: m.file_token_bound ?? file_token_bound_default,
    },
    contextWindow: m.context_window,
    upstreams: upstreamsOf(m),
    timeouts: m.timeouts === null ? undefined : { connectMs: m.timeouts.connect_ms, firstByteMs: m.timeouts.first_byte_ms, idleMs: m.timeouts.idle_ms },
  };
}

export type ModelLoader = (projectId: string, modelId: string) => Promise<GatewayModel | null>;
/** The ids of a project's active models, sorted. */
export type ActiveModelIdsLoader = (projectId: string) => Promise<readonly string[]>;

const model_cache_ttl_ms = 5_000;

export class ModelCache {
  private readonly entries = new Map<string, { model: GatewayModel | null; until: number }>();
  private readonly reads = new InvalidationGuard<GatewayModel | null>();
  /** Per project: its active model ids, read only for a model_not_found (activeIds). */
  private readonly activeIdLists = new Map<string, { ids: readonly string[]; until: number }>();

  constructor(
    private readonly load: ModelLoader,
    private readonly loadActiveIds: ActiveModelIdsLoader = async () => [],
  ) {}

  /**
   * Listens for project changes on a dedicated subscriber connection; a reconnection
   * forgets the whole cache (forgetOnResubscribe).
   */
  async subscribe(subscriber: Redis, prefix: string): Promise<void> {
    const channel = projectChannel(prefix);
    subscriber.on('message', (ch: string, projectId: string) => {
      if (ch === channel) this.forgetProject(projectId);
    });
    forgetOnResubscribe(subscriber, [channel], () => this.forgetAll());
    await subscriber.subscribe(channel);
  }

  /** Drops the cached models of a project. */
  forgetProject(projectId: string): void {
    this.reads.invalidate();
    for (const key of this.entries.keys()) if (key.startsWith(`${projectId}\n`)) this.entries.delete(key);
    this.activeIdLists.delete(projectId);
  }

  private forgetAll(): void {
    this.reads.invalidate();
    this.entries.clear();
    this.activeIdLists.clear();
  }

  async get(projectId: string, modelId: string): Promise<GatewayModel | null> {
    const key = `${projectId}\n${modelId}`;
    const hit = this.entries.get(key);
    if (hit && hit.until > Date.now()) return hit.model;
    return this.reads.read(key, () => this.load(projectId, modelId), (model) => {
      if (this.entries.size > 10_000) this.entries.clear();
      this.entries.set(key, { model, until: Date.now() + model_cache_ttl_ms });
    });
  }

  /**
   * The project's active model ids, sorted: read for a call whose model was not found
   * only, cached like the models (a read that an invalidation overtook is answered, not kept).
   */
  async activeIds(projectId: string): Promise<readonly string[]> {
    const hit = this.activeIdLists.get(projectId);
    if (hit && hit.until > Date.now()) return hit.ids;
    const token = this.reads.token();
    const ids = await this.loadActiveIds(projectId);
    if (!this.reads.overtaken(token)) {
      if (this.activeIdLists.size > 10_000) this.activeIdLists.clear();
      this.activeIdLists.set(projectId, { ids, until: Date.now() + model_cache_ttl_ms });
    }
    return ids;
  }
}
