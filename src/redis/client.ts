/** Redis connections. One shared client per process for commands (auto-pipelined). */
import { Redis, type RedisOptions } from 'ioredis';

export function createRedis(url: string, opts: RedisOptions = {}): Redis {
  return new Redis(url, {
    enableAutoPipelining: true,
    maxRetriesPerRequest: 2,
    // A command must not wait forever for a Redis that is gone: the API answers 503.
    commandTimeout: 5_000,
    // A money script whose reply was lost with the connection may have applied; sent again
    // after a reconnect it would run twice under the same ids. It fails instead (the API
    // answers 503 and a retry with the same identifiers gets the replay). Commands never
    // written (the offline queue) are still sent after a reconnect.
    autoResendUnfulfilledCommands: false,
    ...opts,
  });
}
