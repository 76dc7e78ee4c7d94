/** Redis connections. One shared client per process for commands (auto-pipelined). */
import { Redis, type RedisOptions } from 'ioredis';

export function createRedis(url: string, opts: RedisOptions = {}): Redis {
  return new Redis(url, {
    enableAutoPipelining: true,
    maxRetriesPerRequest: 2,
    // A command must not wait forever for a Redis that is gone: the API answers 503.
    commandTimeout: 5_000,
    ...opts,
  });
}
