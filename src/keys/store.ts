/**
 * Key records: created here, looked up by secret hash with a per-process cache. A
 * revocation is published on Redis so every API process drops its cached copy at once.
 */
import type { Redis } from 'ioredis';
import { sql, type DatabasePool } from 'slonik';
import { z } from 'zod';
import { displayPrefix, generateSecret, hashesEqual, hashSecret, type KeyType } from './secrets.js';
import { newId } from '../ids.js';

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
  };
}

export type KeyQueries = ReturnType<typeof createKeyQueries>;

export const revocationChannel = (prefix: string) => `${prefix}keys:revoked`;
export const projectChannel = (prefix: string) => `${prefix}projects:changed`;

/** Tells every API process to drop its cached copy of a key (revocation). */
export async function publishKeyChange(redis: Redis, prefix: string, secretHash: Buffer): Promise<void> {
  await redis.publish(revocationChannel(prefix), secretHash.toString('hex'));
}

/** Tells every API process to reload the keys of a project (contract, rate limit). */
export async function publishProjectChange(redis: Redis, prefix: string, projectId: string): Promise<void> {
  await redis.publish(projectChannel(prefix), projectId);
}

export class KeyCache {
  private readonly entries = new Map<string, { record: KeyRecord | null; until: number }>();

  constructor(
    private readonly queries: KeyQueries,
    private readonly ttlMs: number,
  ) {}

  /**
   * Listens for key and project changes on a dedicated subscriber connection. Pub/sub
   * delivers at most once: a message published while the connection was down is lost, so
   * every (re)connection forgets the whole cache.
   */
  async subscribe(subscriber: Redis, prefix: string): Promise<void> {
    const keys = revocationChannel(prefix);
    subscriber.on('ready', () => this.entries.clear());
    subscriber.on('message', (channel: string, message: string) => {
      if (channel === keys) {
        this.entries.delete(message);
        return;
      }
      this.forgetProject(message);
    });
    await subscriber.subscribe(keys, projectChannel(prefix));
  }

  /** Drops the cached keys of a project (its contract or rate limit changed). */
  forgetProject(projectId: string): void {
    for (const [hash, e] of this.entries) if (e.record?.project_id === projectId) this.entries.delete(hash);
  }

  /** Drops a key's cached record (a revocation made by this process). */
  forget(secretHash: Buffer): void {
    this.entries.delete(secretHash.toString('hex'));
  }

  /**
   * The key's record, from the cache while it is fresh. When PostgreSQL cannot answer, a
   * stale entry still serves: money operations need only Redis, and a revocation removes
   * the entry instead of letting it age.
   */
  async lookup(key: string): Promise<KeyRecord | null> {
    const hash = hashSecret(key);
    const hex = hash.toString('hex');
    const hit = this.entries.get(hex);
    if (hit && hit.until > Date.now()) return hit.record;
    let record: KeyRecord | null;
    try {
      record = await this.queries.findByHash(hash);
    } catch (err) {
      if (hit) return hit.record;
      throw err;
    }
    if (record && !hashesEqual(record.secret_hash, hash)) return null;
    if (this.entries.size > 100_000) this.entries.clear();
    this.entries.set(hex, { record, until: Date.now() + this.ttlMs });
    return record;
  }

}
