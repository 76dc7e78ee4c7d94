/** Redis connections. One shared client per process for commands (auto-pipelined). */
import { Redis, type RedisOptions } from 'ioredis';
import { trackWrites } from './sent.js';

/** Connection errors are logged at most this often per connection. */
export const connection_error_log_interval_ms = 10_000;

/**
 * A connection. `onError` hears its connection errors (at most one per
 * connection_error_log_interval_ms): without a listener ioredis prints every failed
 * reconnect with its stack.
 */
export function createRedis(url: string, opts: RedisOptions = {}, onError?: (err: Error) => void): Redis {
  const redis = new Redis(url, {
    enableAutoPipelining: true,
    // While Redis is away, commands wait in the offline queue until this many reconnects
    // failed, then answer 503; short reconnect delays keep that wait under a second
    // (ioredis's default grows to 2 s a try).
    maxRetriesPerRequest: 2,
    retryStrategy: (times) => Math.min(times * 50, 250),
    // A command must not wait forever for a Redis that is gone: the API answers 503.
    commandTimeout: 5_000,
    // A money script whose reply was lost with the connection may have applied; sent again
    // after a reconnect it would run twice under the same ids. It fails instead, as soon as
    // the connection closes (./sent.ts), as "outcome unknown": the API answers 503 and a
    // retry with the same identifiers gets the replay. Commands never written (the offline
    // queue) are still sent after a reconnect.
    autoResendUnfulfilledCommands: false,
    ...opts,
  });
  // Tells a command that never reached Redis from one whose reply was lost (./sent.ts).
  trackWrites(redis);
  redis.on('error', throttled((err) => onError?.(err)));
  return redis;
}

/**
 * An `error` listener that passes on at most one error per
 * connection_error_log_interval_ms. For a connection, and for what wraps connections of
 * its own: a BullMQ Queue or Worker re-emits the errors of its connections (a Worker's
 * blocking connection is a duplicate that only BullMQ listens to), and an emitter without
 * a listener has them printed with their stack on every failed reconnect.
 */
export function throttled(onError: (err: Error) => void): (err: Error) => void {
  let lastMs = 0;
  return (err) => {
    if (Date.now() - lastMs < connection_error_log_interval_ms) return;
    lastMs = Date.now();
    onError(err);
  };
}
