/**
 * Builds the parts a process needs from its configuration: connections, scripts and
 * domain services. Web, worker, CLI and tests all start from here.
 */
import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import pino, { type Logger } from 'pino';
import type { DatabasePool } from 'slonik';
import type { Config } from './config/index.js';
import { createDb } from './db/pool.js';
import { createKeyQueries, KeyCache, type KeyQueries } from './keys/store.js';
import { KeyUsage } from './keys/usage.js';
import { Clock } from './ledger/clock.js';
import { createLedgerQueries, type LedgerQueries } from './ledger/queries.js';
import { LedgerService } from './ledger/service.js';
import { pgArchive } from './ledger/bindings.js';
import { Retention } from './ledger/retention.js';
import { createClient, createRedis, detectCluster, isCluster, throttled, type RedisClient } from './redis/client.js';
import { queueExpiry } from './ledger/expiry.js';
import { RedisGeneration } from './redis/generation.js';
import { recoverForgotten } from './reconcile/recovery.js';
import { createReconcileQueue, type ReconcileJobData } from './reconcile/jobs.js';
import type { ReconcileReport } from './reconcile/report.js';
import { registerScripts, type Scripts } from './redis/scripts.js';
import { PlanService } from './plans/service.js';
import { createModelQueries, type ModelQueries } from './admin/models.js';
import { loadMasterKey } from './keys/crypto.js';
import { gatewayModelOf, ModelCache } from './gateway/models.js';
import { GatewayService } from './gateway/service.js';
import { UpstreamClient } from './gateway/upstream.js';
import { UpstreamRouter } from './gateway/failover.js';
import { createUsageQueries, type UsageQueries } from './usage/queries.js';
import { Lifecycle } from './lifecycle.js';
import { Metrics } from './metrics/metrics.js';
import { ledgerQueueName, type LedgerJobData } from './ledger/expiry.js';
import { createEndpointQueries, type EndpointQueries } from './webhooks/endpoints.js';
import { createWebhookQueue, type WebhookJobData } from './webhooks/queue.js';
import { OperatorEvents, operatorTargetOf } from './webhooks/operator.js';

export interface Runtime {
  config: Config;
  logger: Logger;
  /** The process's Prometheus registry and instruments (src/metrics). */
  metrics: Metrics;
  /** The shared command client: a single Redis, or a Redis Cluster (config REDIS_CLUSTER). */
  redis: RedisClient;
  db: DatabasePool;
  clock: Clock;
  /** The Lua scripts, behind the generation guard. */
  scripts: Scripts;
  ledger: LedgerService;
  /** The trim of idempotency records past REDIS_RETENTION_SECONDS (the worker runs it). */
  retention: Retention;
  plans: PlanService;
  ledgerQueries: LedgerQueries;
  keyQueries: KeyQueries;
  keyCache: KeyCache;
  /** The last-used times of keys, written in batches (src/keys/usage.ts). */
  keyUsage: KeyUsage;
  ledgerQueue: Queue<LedgerJobData>;
  /** Reconcile runs asked for through the management API (src/reconcile/jobs.ts). */
  reconcileQueue: Queue<ReconcileJobData, ReconcileReport>;
  /** Webhook deliveries and the dispatcher's schedule (src/webhooks/queue.ts). */
  webhookQueue: Queue<WebhookJobData>;
  /** A project's webhook endpoints, their secrets sealed with the master key. */
  webhookEndpoints: EndpointQueries;
  /** Where plan changes and invoice closes record the operator's events (OPERATOR_WEBHOOK_URL). */
  operatorEvents: OperatorEvents;
  /** Every BullMQ queue of the service, for what reports on all of them (/v1/admin/queues, svc_queue_jobs). */
  queues: readonly Queue[];
  modelQueries: ModelQueries;
  models: ModelCache;
  usageQueries: UsageQueries;
  upstream: UpstreamClient;
  gateway: GatewayService;
  /** The Redis generation guard: money operations wait until this Redis is verified. */
  generation: RedisGeneration;
  /** Whether the process is stopping (GET /health/ready answers 503), src/shutdown.ts. */
  lifecycle: Lifecycle;
  /**
   * A connection of its own for a subscriber, with ioredis's defaults (wait out a
   * reconnect, send again what was pending). On a cluster, one to the node REDIS_URL
   * names: a PUBLISH reaches the subscribers of every node.
   */
  extraConnection(): Redis;
  /** A connection of its own for BullMQ (a Queue or a Worker): a cluster client on a cluster. */
  queueConnection(): RedisClient;
  close(): Promise<void>;
}

/**
 * Bytes of log lines gathered before they are written, and the longest a line waits for
 * them. Without it each access line was one write(2) (plus its thread-pool hop and
 * callback) whenever the previous write had finished, which under moderate load is every
 * line: about 40 us of CPU per line more than batched, in a micro-benchmark on this VM.
 */
const log_buffer_bytes = 4096;
const log_flush_interval_ms = 100;

/**
 * The process logger, on stdout. Asynchronous and buffered: lines are handed to the kernel
 * once log_buffer_bytes have gathered, or at the next flush (every log_flush_interval_ms),
 * so many lines share one write; pino flushes what is pending when the process exits (a
 * `kill -9` loses at most that buffer).
 */
export function createLogger(config: Pick<Config, 'LOG_LEVEL'>): Logger {
  const destination = pino.destination({ dest: 1, sync: false, minLength: log_buffer_bytes });
  setInterval(() => {
    try {
      destination.flush();
    } catch {
      // Ended by pino as the process exits, after flushing what was pending.
    }
  }, log_flush_interval_ms).unref();
  return pino({
    level: config.LOG_LEVEL,
    redact: {
      paths: ['req.headers.authorization', 'req.headers["x-api-key"]', 'key', 'secret', '*.key', '*.secret', '*.upstream_api_key', 'admin_key'],
      censor: '[redacted]',
    },
  }, destination);
}

/** The longest rt.close waits for Redis to answer its QUIT before it drops the connection. */
const redis_quit_wait_ms = 1_000;

async function quitWithin(redis: RedisClient, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([redis.quit().catch(() => undefined), new Promise((resolve) => (timer = setTimeout(resolve, ms)))]);
  clearTimeout(timer);
}

export async function createRuntime(config: Config, logger = createLogger(config)): Promise<Runtime> {
  const metrics = new Metrics();
  const onRedisError = (err: Error) => logger.error({ err }, 'Redis connection error');
  // Every connection error counts; the log above hears at most one per connection per 10 s.
  const redisConnectionErrors = metrics.redisErrors.labels('connection');
  const countRedisErrors = <C extends RedisClient>(c: C): C => {
    const count = () => redisConnectionErrors.inc();
    c.on('error', count);
    if (isCluster(c)) c.on('node error', count);
    return c;
  };
  const clustered = await detectCluster(config.REDIS_URL, config.REDIS_CLUSTER, (err) => logger.warn({ err }, 'Redis Cluster probe'));
  // BullMQ keeps a queue's keys in one slot only under a hash-tagged prefix.
  if (clustered && !/\{[^}]+\}/.test(config.QUEUE_PREFIX)) throw new Error(`invalid configuration: QUEUE_PREFIX must carry a hash tag on a Redis Cluster ({${config.QUEUE_PREFIX}})`);
  const redis = countRedisErrors(createClient(config.REDIS_URL, clustered, {}, onRedisError));
  const extras: RedisClient[] = [];
  // Subscribers and BullMQ's blocking commands expect ioredis's defaults: wait out a
  // reconnect and send again what was pending.
  const extraOptions = { maxRetriesPerRequest: null, enableAutoPipelining: false, commandTimeout: undefined, autoResendUnfulfilledCommands: true };
  const extraConnection = () => {
    const c = countRedisErrors(createRedis(config.REDIS_URL, extraOptions, onRedisError));
    extras.push(c);
    return c;
  };
  const queueConnection = () => {
    const c = countRedisErrors(createClient(config.REDIS_URL, clustered, extraOptions, onRedisError));
    extras.push(c);
    return c;
  };
  const failedQueries = metrics.postgresErrors.labels('query');
  const db = await createDb(config.DATABASE_URL, undefined, [{
    name: 'metrics',
    queryExecutionError: () => {
      failedQueries.inc();
      return null;
    },
  }]);
  const clock = new Clock(config.SVC_CLOCK_CONTROL);
  const ledgerQueue = new Queue<LedgerJobData>(ledgerQueueName, { connection: queueConnection(), prefix: config.QUEUE_PREFIX });
  ledgerQueue.on('error', throttled((err) => logger.error({ err }, 'ledger queue error')));
  const reconcileQueue = createReconcileQueue(queueConnection(), config.QUEUE_PREFIX);
  reconcileQueue.on('error', throttled((err) => logger.error({ err }, 'reconcile queue error')));
  const webhookQueue = createWebhookQueue(queueConnection(), config.QUEUE_PREFIX);
  webhookQueue.on('error', throttled((err) => logger.error({ err }, 'webhook queue error')));
  const ledgerQueries = createLedgerQueries(db);
  const generation = new RedisGeneration(redis, {
    prefix: config.REDIS_PREFIX,
    logger,
    recover: async (_runId, scope) => {
      await recoverForgotten({ config, redis, db, ledgerQueries, ledgerQueue, webhookQueue, clock, logger }, config.REDIS_RECOVERY_WINDOW_MS, scope);
    },
  });
  // Every script call checks the guard right before it is sent.
  const scripts = generation.guardScripts(registerScripts(redis, config.ARCHIVE_GRACE_MS));
  const operatorEvents = new OperatorEvents(webhookQueue, operatorTargetOf(config), logger);
  const plans = new PlanService(redis, scripts, db, config.REDIS_PREFIX, clock, logger, operatorEvents, () => generation.ready(), config.PLANS);
  const ledger = new LedgerService(redis, scripts, config.REDIS_PREFIX, clock, {
    metrics,
    outcomeWaitMs: config.OUTCOME_WAIT_MS,
    billable: {
      async reserve(scope) {
        const t = await plans.take(scope.organizationId);
        return { admitted: t.admitted, refusal: t.admitted ? null : plans.refusal(t), commit: t.commit, release: t.release };
      },
      record(scope, n) {
        (async () => plans.record(scope.organizationId || (await plans.organizationOfProject(scope.projectId)), n))().catch((err: unknown) => {
          logger.error({ err, projectId: scope.projectId, operations: n }, 'TTL auto-consumes not counted for the plan');
        });
      },
    },
    ready: () => generation.ready(),
    archived: pgArchive(db),
    onScheduleError(err, transactionId) {
      logger.error({ err, transactionId }, 'TTL expiry job not queued; the sweeper will settle the freeze when due');
    },
    async scheduleExpiry(scope, customerId, transactionId, atMs) {
      await queueExpiry(ledgerQueue, clock, { projectId: scope.projectId, organizationId: scope.organizationId, customerId, transactionId }, atMs);
    },
  });
  const retention = new Retention(redis, scripts, ledger.bindings, config.REDIS_PREFIX, config.REDIS_RETENTION_SECONDS * 1000, logger, config.ARCHIVE_GRACE_MS);
  const keyQueries = createKeyQueries(db);
  const keyUsage = new KeyUsage(db, config.KEY_LAST_USED_FLUSH_MS, logger);
  const keyCache = new KeyCache(keyQueries, config.KEY_CACHE_TTL_MS, (id, atMs) => keyUsage.note(id, atMs));
  const masterKey = loadMasterKey(config);
  const modelQueries = createModelQueries(db, masterKey);
  const models = new ModelCache(
    async (projectId, modelId) => {
      const m = await modelQueries.findModel(projectId, modelId);
      return m && gatewayModelOf(m);
    },
    (projectId) => modelQueries.activeModelIds(projectId),
  );
  const upstream = new UpstreamClient({
    headersTimeoutMs: config.UPSTREAM_TIMEOUT_MS,
    bodyTimeoutMs: config.UPSTREAM_TIMEOUT_MS,
    allowPrivate: config.UPSTREAM_ALLOW_PRIVATE,
    connections: config.UPSTREAM_CONNECTIONS,
    router: new UpstreamRouter({ metrics }),
  });
  const gateway = new GatewayService({ ledger, plans, models, upstream, redis, prefix: config.REDIS_PREFIX, logger, metrics });
  return {
    config,
    logger,
    metrics,
    redis,
    db,
    clock,
    scripts,
    ledger,
    retention,
    plans,
    ledgerQueries,
    keyQueries,
    keyCache,
    keyUsage,
    ledgerQueue,
    reconcileQueue,
    webhookQueue,
    webhookEndpoints: createEndpointQueries(db, masterKey),
    operatorEvents,
    queues: [ledgerQueue, reconcileQueue, webhookQueue],
    modelQueries,
    models,
    usageQueries: createUsageQueries(db),
    upstream,
    gateway,
    generation,
    lifecycle: new Lifecycle(),
    extraConnection,
    queueConnection,
    async close() {
      // Unused leased operations go back while Redis is still there.
      await plans.close();
      generation.close();
      await ledgerQueue.close();
      await reconcileQueue.close();
      await webhookQueue.close();
      await upstream.close();
      await keyUsage.close();
      // A pool that lost connections while PostgreSQL was away fails to end them; the
      // process is stopping either way.
      await db.end().catch((err: unknown) => logger.warn({ err }, 'closing the database pool failed'));
      // The outboxes' dirty marks not yet sent go now; a Redis that answers gets a QUIT,
      // which it answers after every command sent before it (the marks included).
      ledger.flushDirty();
      if (redis.status === 'ready') await quitWithin(redis, redis_quit_wait_ms);
      redis.disconnect();
      for (const c of extras) c.disconnect();
    },
  };
}
