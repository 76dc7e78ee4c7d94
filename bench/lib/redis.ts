/**
 * Redis housekeeping for benches on a shared Redis: everything a bench writes lives under
 * its own prefix and is removed by SCAN + UNLINK over that prefix (never FLUSHALL/FLUSHDB,
 * which would wipe other people's data).
 */
import type { RedisClient } from '../../src/redis/client.js';

export const scan_count = 1_000;

/** Escapes the glob characters of a literal prefix for SCAN MATCH. */
export function globLiteral(s: string): string {
  return s.replace(/[*?[\]\\]/g, (c) => `\\${c}`);
}

/** Deletes every key that starts with `prefix`; returns how many. Refuses an empty prefix. */
export async function deleteByPrefix(redis: RedisClient, prefix: string): Promise<number> {
  if (prefix.length < 4) throw new Error(`refusing to delete by the short prefix ${JSON.stringify(prefix)}`);
  let deleted = 0;
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${globLiteral(prefix)}*`, 'COUNT', scan_count);
    cursor = next;
    if (keys.length > 0) deleted += await redis.unlink(...keys);
  } while (cursor !== '0');
  return deleted;
}

/** Calls `each` for every key matching a glob pattern. */
export async function scanKeys(redis: RedisClient, pattern: string, each: (key: string) => Promise<void>): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', scan_count);
    cursor = next;
    for (const k of keys) await each(k);
  } while (cursor !== '0');
}

/**
 * CPU seconds the Redis server has used (user + system), from INFO cpu. The difference over
 * a measurement divided by its duration says how busy Redis was; on a shared Redis it
 * includes other clients' work.
 */
export async function redisCpuSeconds(redis: RedisClient): Promise<number> {
  const info = await redis.info('cpu');
  const field = (name: string) => Number(new RegExp(`^${name}:([\\d.]+)`, 'm').exec(info)?.[1] ?? Number.NaN);
  return field('used_cpu_user') + field('used_cpu_sys');
}
