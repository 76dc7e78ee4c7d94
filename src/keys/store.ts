/**
 * Key records: created here, looked up by the presented key with a per-process cache. A
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

const keyRecordRow = z.object({
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
  /** A customer-scoped key's spending budget (docs/API.md, "Budgets"): both null, or both set. */
  budget_limit: z.number().nullable(),
  budget_period: z.enum(['day', 'week', 'month', 'total']).nullable(),
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
           k.allowed_models, k.expires_at, k.revoked_at, k.created_at, p.contract, p.rate_limit_per_minute,
           k.budget_limit, k.budget_period
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
  /** The key's SHA-256 (what PostgreSQL and revocation messages know it by), and its hex. */
  hash: Buffer;
  hex: string;
  /** A background refresh of this entry is queued or running. */
  refreshing?: boolean;
}

/** Background refreshes wait this long to be read together in one query. */
const refresh_batch_ms = 50;
/** After PostgreSQL failed, cached records are served without waiting on it for this long. */
const unavailable_backoff_ms = 1_000;
/** Past this many cached keys the cache starts over (a flood of made-up keys cannot grow it). */
const key_cache_entries_max = 100_000;

/**
 * Key records by the key as presented, so that a request costs neither a PostgreSQL query
 * nor a SHA-256 (computed on a miss only). The presented keys stay in this process's
 * memory: never logged, never sent to Redis. Revocations name a key by its hash, so an
 * index from hash to presented key finds the entry to drop. Three things bound how long a
 * revoked key keeps working:
 * - a revocation or project change published on Redis drops the entries at once;
 * - a read from PostgreSQL that such an invalidation overtook is not cached but read
 *   again (src/cache/invalidation.ts);
 * - no entry serves longer than `ttlMs` after its read started (1 s by default), which
 *   covers a pub/sub message that never arrived. From half that age a busy key is read
 *   again in the background, batched with the others, so requests do not wait for it.
 */
export class KeyCache {
  private readonly entries = new Map<string, CacheEntry>();
  /** Hash (hex) to the presented key its entry is stored under. */
  private readonly byHex = new Map<string, string>();
  private readonly reads = new InvalidationGuard<KeyRecord | null>();
  private readonly due = new Map<string, CacheEntry>();
  private refreshTimer: NodeJS.Timeout | null = null;
  private unavailableUntil = 0;

  constructor(
    private readonly queries: Pick<KeyQueries, 'findByHash' | 'findByHashes'>,
    private readonly ttlMs: number,
    /** Told of every lookup that finds a live key (src/keys/usage.ts: the key list's "last used"). */
    private readonly onUse: (keyId: string, atMs: number) => void = () => undefined,
  ) {}

  private used(record: KeyRecord | null, now: number): KeyRecord | null {
    if (record !== null && record.revoked_at === null && (record.expires_at === null || record.expires_at > now)) this.onUse(record.id, now);
    return record;
  }

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
    for (const [key, e] of this.entries) if (e.record?.project_id === projectId) this.drop(key, e);
  }

  /** Drops a key's cached record (a revocation made by this process). */
  forget(secretHash: Buffer): void {
    this.forgetHex(secretHash.toString('hex'));
  }

  private forgetHex(hex: string): void {
    this.reads.invalidate();
    const key = this.byHex.get(hex);
    if (key !== undefined) this.drop(key, this.entries.get(key)!);
  }

  private forgetAll(): void {
    this.reads.invalidate();
    this.entries.clear();
    this.byHex.clear();
  }

  private drop(key: string, entry: CacheEntry): void {
    this.entries.delete(key);
    this.byHex.delete(entry.hex);
  }

  /**
   * The key's record, from the cache while it is fresh. When PostgreSQL cannot answer, a
   * stale entry still serves: money operations need only Redis, and a revocation removes
   * the entry instead of letting it age.
   */
  async lookup(key: string): Promise<KeyRecord | null> {
    const now = Date.now();
    const hit = this.entries.get(key);
    if (hit && (now - hit.readAt < this.ttlMs || now < this.unavailableUntil)) {
      if (now - hit.readAt >= this.ttlMs / 2) this.refreshLater(key, hit);
      return this.used(hit.record, now);
    }
    const hash = hashSecret(key);
    try {
      const record = await this.reads.read(key, () => this.queries.findByHash(hash), (r, readAt) => {
        if (matches(r, hash)) this.store(key, { record: r, readAt, hash, hex: hash.toString('hex') });
      });
      return matches(record, hash) ? this.used(record, now) : null;
    } catch (err) {
      this.unavailableUntil = Date.now() + unavailable_backoff_ms;
      const stale = this.entries.get(key);
      if (stale) return stale.record;
      throw err;
    }
  }

  private store(key: string, entry: CacheEntry): void {
    if (this.entries.size >= key_cache_entries_max && !this.entries.has(key)) {
      this.entries.clear();
      this.byHex.clear();
    }
    this.entries.set(key, entry);
    this.byHex.set(entry.hex, key);
  }

  private refreshLater(key: string, entry: CacheEntry): void {
    if (entry.refreshing || this.reads.reading(key)) return;
    entry.refreshing = true;
    this.due.set(key, entry);
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
      rows = await this.queries.findByHashes(batch.map(([, e]) => e.hash));
    } catch {
      // The entries age until a lookup reads them itself and meets the error, which that
      // lookup handles; there is nothing to do here.
      this.unavailableUntil = Date.now() + unavailable_backoff_ms;
      for (const [, e] of batch) e.refreshing = false;
      return;
    }
    const byHex = new Map(rows.map((r) => [r.secret_hash.toString('hex'), r]));
    for (const [key, e] of batch) {
      e.refreshing = false;
      if (this.reads.overtaken(token) || this.entries.get(key) !== e) continue;
      this.entries.set(key, { record: byHex.get(e.hex) ?? null, readAt, hash: e.hash, hex: e.hex });
    }
  }
}
