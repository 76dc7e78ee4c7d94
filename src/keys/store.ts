/**
 * Key records: created here, looked up by secret hash with a per-process cache. A
 * revocation is published on Redis so every API process drops its cached copy at once.
 */
import type { Redis } from 'ioredis';
import type { RedisClient } from '../redis/client.js';
import { sql, type DatabasePool } from 'slonik';
import { z } from 'zod';
import { displayPrefix, generateSecret, hashesEqual, hashSecret, type KeyType } from './secrets.js';
import { newId } from '../ids.js';
import { forgetOnResubscribe, InvalidationGuard } from '../cache/invalidation.js';

/** A record found by hash is the key's only if the hashes match (compared in constant time). */
function matches(record: KeyRecord | null, hash: Buffer): boolean {
  return record === null || hashesEqual(record.secret_hash, hash);
}

export const keyRecordRow = z.object({
  id: z.string(),
  organization_id: z.string(),
  project_id: z.string().nullable(),
  type: z.enum(['admin', 'project', 'customer']),
  name: z.string().nullable(),
  prefix: z.string(),
  secret_hash: z.instanceof(Buffer),
  customer_id: z.string().nullable(),
  allowed_models: z.array(z.string()).nullable(),
  expires_at: z.number().nullable(),
  revoked_at: z.number().nullable(),
  created_at: z.number(),
  contract: z.enum(['A', 'B']).nullable(),
  rate_limit_per_minute: z.number().nullable(),
});
export type KeyRecord = z.infer<typeof keyRecordRow>;

export interface NewKey {
  organizationId: string;
  projectId: string | null;
  type: KeyType;
  name?: string | null;
  customerId?: string | null;
  allowedModels?: string[] | null;
  expiresAtMs?: number | null;
}

export function createKeyQueries(pool: DatabasePool) {
  const selectKey = sql.fragment`
    SELECT k.id, k.organization_id, k.project_id, k.type, k.name, k.prefix, k.secret_hash, k.customer_id,
           k.allowed_models, k.expires_at, k.revoked_at, k.created_at, p.contract, p.rate_limit_per_minute
    FROM api_keys k LEFT JOIN projects p ON p.id = k.project_id`;
  return {
    async insertKey(k: NewKey): Promise<{ record: KeyRecord; secret: string }> {
      const secret = generateSecret(k.type);
      const id = newId('key');
      await pool.query(sql.unsafe`
        INSERT INTO api_keys (id, organization_id, project_id, type, name, prefix, secret_hash, customer_id, allowed_models, expires_at)
        VALUES (${id}, ${k.organizationId}, ${k.projectId}, ${k.type}, ${k.name ?? null}, ${displayPrefix(secret)},
                ${sql.binary(hashSecret(secret))}, ${k.customerId ?? null},
                ${k.allowedModels ? sql.array(k.allowedModels, 'text') : null},
                ${k.expiresAtMs != null ? sql.timestamp(new Date(k.expiresAtMs)) : null})`);
      const record = await pool.one(sql.type(keyRecordRow)`${selectKey} WHERE k.id = ${id}`);
      return { record, secret };
    },
    findByHash(hash: Buffer): Promise<KeyRecord | null> {
      return pool.maybeOne(sql.type(keyRecordRow)`${selectKey} WHERE k.secret_hash = ${sql.binary(hash)}`);
    },
    /** The records of those of the hashes that exist, in one query (the cache's background refresh). */
    findByHashes(hashes: readonly Buffer[]): Promise<readonly KeyRecord[]> {
      const hexes = hashes.map((h) => h.toString('hex'));
      return pool.any(sql.type(keyRecordRow)`
        ${selectKey} WHERE k.secret_hash = ANY (SELECT decode(h, 'hex') FROM unnest(${sql.array(hexes, 'text')}) AS h)`);
    },
  };
}

export type KeyQueries = ReturnType<typeof createKeyQueries>;

export const revocationChannel = (prefix: string) => `${prefix}keys:revoked`;
export const projectChannel = (prefix: string) => `${prefix}projects:changed`;

/** Tells every API process to drop its cached copy of a key (revocation). */
export async function publishKeyChange(redis: RedisClient, prefix: string, secretHash: Buffer): Promise<void> {
  await redis.publish(revocationChannel(prefix), secretHash.toString('hex'));
}

/** Tells every API process to reload the keys of a project (contract, rate limit). */
export async function publishProjectChange(redis: RedisClient, prefix: string, projectId: string): Promise<void> {
  await redis.publish(projectChannel(prefix), projectId);
}

interface CacheEntry {
  record: KeyRecord | null;
  /** When the read that produced the record started: the record is at least this fresh. */
  readAt: number;
  /** A background refresh of this entry is queued or running. */
  refreshing?: boolean;
}

/** Background refreshes wait this long to be read together in one query. */
const refresh_batch_ms = 50;
/** After PostgreSQL failed, cached records are served without waiting on it for this long. */
const unavailable_backoff_ms = 1_000;

/**
 * Key records by secret hash, so that a request does not cost a PostgreSQL query. Three
 * things bound how long a revoked key keeps working:
 * - a revocation or project change published on Redis drops the entries at once;
 * - a read from PostgreSQL that such an invalidation overtook is not cached but read
 *   again (src/cache/invalidation.ts);
 * - no entry serves longer than `ttlMs` after its read started (1 s by default), which
 *   covers a pub/sub message that never arrived. From half that age a busy key is read
 *   again in the background, batched with the others, so requests do not wait for it.
 */
export class KeyCache {
  private readonly entries = new Map<string, CacheEntry>();
  private readonly reads = new InvalidationGuard<KeyRecord | null>();
  private readonly due = new Map<string, { hash: Buffer; entry: CacheEntry }>();
  private refreshTimer: NodeJS.Timeout | null = null;
  private unavailableUntil = 0;

  constructor(
    private readonly queries: Pick<KeyQueries, 'findByHash' | 'findByHashes'>,
    private readonly ttlMs: number,
  ) {}

  /**
   * Listens for key and project changes on a dedicated subscriber connection; a
   * reconnection forgets the whole cache (forgetOnResubscribe).
   */
  async subscribe(subscriber: Redis, prefix: string): Promise<void> {
    const keys = revocationChannel(prefix);
    const channels = [keys, projectChannel(prefix)];
    forgetOnResubscribe(subscriber, channels, () => this.forgetAll());
    subscriber.on('message', (channel: string, message: string) => {
      if (channel === keys) this.forgetHex(message);
      else if (channels.includes(channel)) this.forgetProject(message);
    });
    await subscriber.subscribe(...channels);
  }

  /** Drops the cached keys of a project (its contract or rate limit changed). */
  forgetProject(projectId: string): void {
    this.reads.invalidate();
    for (const [hash, e] of this.entries) if (e.record?.project_id === projectId) this.entries.delete(hash);
  }

  /** Drops a key's cached record (a revocation made by this process). */
  forget(secretHash: Buffer): void {
    this.forgetHex(secretHash.toString('hex'));
  }

  private forgetHex(hex: string): void {
    this.reads.invalidate();
    this.entries.delete(hex);
  }

  private forgetAll(): void {
    this.reads.invalidate();
    this.entries.clear();
  }

  /**
   * The key's record, from the cache while it is fresh. When PostgreSQL cannot answer, a
   * stale entry still serves: money operations need only Redis, and a revocation removes
   * the entry instead of letting it age.
   */
  async lookup(key: string): Promise<KeyRecord | null> {
    const hash = hashSecret(key);
    const hex = hash.toString('hex');
    const now = Date.now();
    const hit = this.entries.get(hex);
    if (hit && (now - hit.readAt < this.ttlMs || now < this.unavailableUntil)) {
      if (now - hit.readAt >= this.ttlMs / 2) this.refreshLater(hex, hash, hit);
      return hit.record;
    }
    try {
      const record = await this.reads.read(hex, () => this.queries.findByHash(hash), (r, readAt) => {
        if (matches(r, hash)) this.store(hex, { record: r, readAt });
      });
      return matches(record, hash) ? record : null;
    } catch (err) {
      this.unavailableUntil = Date.now() + unavailable_backoff_ms;
      const stale = this.entries.get(hex);
      if (stale) return stale.record;
      throw err;
    }
  }

  private store(hex: string, entry: CacheEntry): void {
    if (this.entries.size > 100_000) this.entries.clear();
    this.entries.set(hex, entry);
  }

  private refreshLater(hex: string, hash: Buffer, entry: CacheEntry): void {
    if (entry.refreshing || this.reads.reading(hex)) return;
    entry.refreshing = true;
    this.due.set(hex, { hash, entry });
    this.refreshTimer ??= setTimeout(() => void this.refresh(), refresh_batch_ms).unref();
  }

  /** Reads every entry due for a refresh in one query; what an invalidation overtook is dropped. */
  private async refresh(): Promise<void> {
    this.refreshTimer = null;
    const batch = [...this.due];
    this.due.clear();
    const token = this.reads.token();
    const readAt = Date.now();
    let rows: readonly KeyRecord[];
    try {
      rows = await this.queries.findByHashes(batch.map(([, d]) => d.hash));
    } catch {
      // The entries age until a lookup reads them itself and meets the error, which that
      // lookup handles; there is nothing to do here.
      this.unavailableUntil = Date.now() + unavailable_backoff_ms;
      for (const [, d] of batch) d.entry.refreshing = false;
      return;
    }
    const byHex = new Map(rows.map((r) => [r.secret_hash.toString('hex'), r]));
    for (const [hex, d] of batch) {
      d.entry.refreshing = false;
      if (this.reads.overtaken(token) || this.entries.get(hex) !== d.entry) continue;
      this.entries.set(hex, { record: byHex.get(hex) ?? null, readAt });
    }
  }
}
