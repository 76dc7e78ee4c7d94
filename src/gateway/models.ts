/**
 * The models a gateway call may use, cached per process: a call must not wait for
 * PostgreSQL. A model change publishes a project change (src/keys/store.ts), which drops
 * that project's entries here at once; entries also expire after a few seconds. As in the
 * key cache, every invalidation bumps a generation: a read from PostgreSQL that was in
 * flight meanwhile may have read the model before the change (its old prices), so it is
 * not cached and is read again, instead of putting the old model back after the message
 * cleared it.
 */
import type { Redis } from 'ioredis';
import { projectChannel } from '../keys/store.js';
import type { Prices } from './pricing.js';

export interface GatewayModel {
  id: string;
  provider: 'openai' | 'anthropic';
  upstreamBaseUrl: string;
  upstreamModel: string;
  /** Decrypted; never logged or returned. */
  upstreamKey: string | null;
  maxOutputTokens: number;
  supportsStreaming: boolean;
  active: boolean;
  prices: Prices;
}

export type ModelLoader = (projectId: string, modelId: string) => Promise<GatewayModel | null>;

export const model_cache_ttl_ms = 5_000;
/** Reads of one model that restart because an invalidation landed while they ran, at most. */
const read_attempts_max = 5;

export class ModelCache {
  private readonly entries = new Map<string, { model: GatewayModel | null; until: number }>();
  private readonly reads = new Map<string, Promise<GatewayModel | null>>();
  private generation = 0;

  constructor(private readonly load: ModelLoader) {}

  /**
   * Listens for project changes on a dedicated subscriber connection. Pub/sub delivers at
   * most once: every reconnection forgets the whole cache, and so does the confirmation of
   * the SUBSCRIBE sent on it (ioredis reports `ready` before Redis confirmed it, and a
   * message published in between is lost).
   */
  async subscribe(subscriber: Redis, prefix: string): Promise<void> {
    const channel = projectChannel(prefix);
    subscriber.on('message', (ch: string, projectId: string) => {
      if (ch === channel) this.forgetProject(projectId);
    });
    subscriber.on('ready', () => {
      this.forgetAll();
      subscriber.subscribe(channel).then(
        () => this.forgetAll(),
        // The connection dropped again: its next `ready` repeats this.
        () => undefined,
      );
    });
    await subscriber.subscribe(channel);
  }

  /** Drops the cached models of a project. */
  forgetProject(projectId: string): void {
    this.generation++;
    for (const key of this.entries.keys()) if (key.startsWith(`${projectId}\n`)) this.entries.delete(key);
  }

  private forgetAll(): void {
    this.generation++;
    this.entries.clear();
  }

  async get(projectId: string, modelId: string): Promise<GatewayModel | null> {
    const key = `${projectId}\n${modelId}`;
    const hit = this.entries.get(key);
    if (hit && hit.until > Date.now()) return hit.model;
    // Concurrent gets of one model share one read.
    let read = this.reads.get(key);
    if (!read) {
      read = this.read(key, projectId, modelId).finally(() => this.reads.delete(key));
      this.reads.set(key, read);
    }
    return read;
  }

  private async read(key: string, projectId: string, modelId: string): Promise<GatewayModel | null> {
    for (let attempt = 1; ; attempt++) {
      const generation = this.generation;
      const model = await this.load(projectId, modelId);
      if (generation === this.generation) {
        if (this.entries.size > 10_000) this.entries.clear();
        this.entries.set(key, { model, until: Date.now() + model_cache_ttl_ms });
        return model;
      }
      // Read again: the row may predate the change. After a few tries (changes keep
      // coming), answer with the newest read without caching it.
      if (attempt === read_attempts_max) return model;
    }
  }
}
