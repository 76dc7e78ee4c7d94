/**
 * SCAN over the whole keyspace: the one Redis, or every master of a cluster (a SCAN sent
 * to a cluster client reaches one node only). For tools and tests; nothing on the
 * request path scans.
 */
import type { Redis } from 'ioredis';
import { isCluster, type RedisClient } from './client.js';

/** Calls `each` with every batch of keys matching the glob `pattern`. */
export async function scanKeys(redis: RedisClient, pattern: string, count: number, each: (keys: string[]) => Promise<void>): Promise<void> {
  const servers: Redis[] = isCluster(redis) ? redis.nodes('master') : [redis];
  for (const server of servers) {
    let cursor = '0';
    do {
      const [next, keys] = await server.scan(cursor, 'MATCH', pattern, 'COUNT', count);
      cursor = next;
      if (keys.length > 0) await each(keys);
    } while (cursor !== '0');
  }
}
