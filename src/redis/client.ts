/**
 * Redis connections. One shared client per process for commands (auto-pipelined): a
 * single Redis, or a Redis Cluster when REDIS_URL names a node of one.
 */
import { Cluster, Redis, type ClusterOptions, type RedisOptions } from 'ioredis';
import { trackClusterWrites, trackWrites } from './sent.js';

/** A Redis we send commands to: one server, or a cluster through any of its nodes. */
export type RedisClient = Redis | Cluster;

/** Connection errors are logged at most this often per connection. */
const connection_error_log_interval_ms = 10_000;
/** How long the cluster probe at startup waits for Redis before it assumes a single Redis. */
const cluster_probe_timeout_ms = 2_000;
/** How often a cluster client reads the slot map again (a failover, a resharding). */
const cluster_slots_refresh_ms = 5_000;

/** The options of the shared command client, for a single Redis and for every node of a cluster. */
const command_options: RedisOptions = {
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
};

/**
 * A connection. `onError` hears its connection errors (at most one per
 * connection_error_log_interval_ms): without a listener ioredis prints every failed
 * reconnect with its stack.
 */
export function createRedis(url: string, opts: RedisOptions = {}, onError?: (err: Error) => void): Redis {
  const redis = new Redis(url, { ...command_options, ...opts });
  // Tells a command that never reached Redis from one whose reply was lost (./sent.ts).
  trackWrites(redis);
  redis.on('error', throttled((err) => onError?.(err)));
  return redis;
}

/**
 * A Redis Cluster client that starts from the node `url` names, with the same options as
 * createRedis on every node connection. ioredis's cluster client does not reconnect a
 * lost node: it reads the slot map again and opens a new connection to whoever serves
 * the slot, so `retryStrategy` applies to the cluster as a whole (all nodes lost).
 * Auto-pipelining groups commands per node. A script's keys must share one slot: every
 * customer script's keys carry the customer's hash tag.
 */
export function createCluster(url: string, opts: RedisOptions = {}, onError?: (err: Error) => void, extra: ClusterOptions = {}): Cluster {
  const u = new URL(url);
  const { retryStrategy, enableAutoPipelining, ...nodeOptions } = { ...command_options, ...opts };
  const clusterOptions: ClusterOptions = {
    enableAutoPipelining,
    clusterRetryStrategy: retryStrategy ? (times) => retryStrategy(times) : undefined,
    slotsRefreshInterval: cluster_slots_refresh_ms,
    redisOptions: {
      ...nodeOptions,
      username: u.username ? decodeURIComponent(u.username) : undefined,
      password: u.password ? decodeURIComponent(u.password) : undefined,
      tls: u.protocol === 'rediss:' ? {} : undefined,
    },
    ...extra,
  };
  const cluster = new Cluster([{ host: u.hostname, port: Number(u.port || 6379) }], clusterOptions);
  trackClusterWrites(cluster);
  const log = throttled((err) => onError?.(err));
  cluster.on('error', log);
  // A node's errors come as 'node error' (the cluster retries elsewhere); logged the same way.
  cluster.on('node error', log);
  return cluster;
}

/** Creates a single-Redis or cluster client for `url`, as `cluster` says. */
export function createClient(url: string, cluster: boolean, opts: RedisOptions = {}, onError?: (err: Error) => void): RedisClient {
  return cluster ? createCluster(url, opts, onError) : createRedis(url, opts, onError);
}

export function isCluster(redis: RedisClient): redis is Cluster {
  return (redis as { isCluster?: boolean }).isCluster === true;
}

/**
 * Whether REDIS_URL names a node of a Redis Cluster: `forced` (REDIS_CLUSTER) when set,
 * else `INFO cluster` says `cluster_enabled:1`. A Redis that does not answer within
 * cluster_probe_timeout_ms is taken for a single Redis (the process then starts and
 * waits for it as before), so a cluster deployment sets REDIS_CLUSTER=1.
 */
export async function detectCluster(url: string, forced: boolean | undefined, onError?: (err: Error) => void): Promise<boolean> {
  if (forced !== undefined) return forced;
  const probe = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: cluster_probe_timeout_ms, commandTimeout: cluster_probe_timeout_ms });
  probe.on('error', () => undefined);
  try {
    await probe.connect();
    const info = await probe.info('cluster');
    return /^cluster_enabled:1\s*$/m.test(info);
  } catch (err) {
    onError?.(new Error(`probing ${withoutCredentials(url)} for a Redis Cluster failed (${(err as Error).message}); taking it for a single Redis: set REDIS_CLUSTER to skip the probe`));
    return false;
  } finally {
    probe.disconnect();
  }
}

/** The URL without its credentials, for a log line. */
function withoutCredentials(url: string): string {
  const x = new URL(url);
  x.username = '';
  x.password = '';
  return x.toString();
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
