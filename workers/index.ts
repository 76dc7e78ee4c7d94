/**
 * A worker process's parts: the persist loop, the BullMQ worker of the ledger queue
 * (TTL expiry, sweeps, closing billing periods), the webhooks queue's worker (fan-out and
 * deliveries) and the sweep, invoice and dispatch schedules. Started by `npm run worker`
 * and by `npm start` beside the API.
 */
import { Worker } from 'bullmq';
import './bullmq-closing.js';
import { heartbeatKey } from '../src/health.js';
import { ledgerQueueName, scheduleSweeps, type ExpireJob, type LedgerJobData } from '../src/ledger/expiry.js';
import { throttled } from '../src/redis/client.js';
import type { Runtime } from '../src/runtime.js';
import { projectRecorder } from '../src/reconcile/recovery.js';
import { reconcile } from '../src/reconcile/walk.js';
import { reconcileProcessor, reconcileQueueName, reconcile_worker_concurrency, type ReconcileJobData } from '../src/reconcile/jobs.js';
import type { ReconcileReport } from '../src/reconcile/report.js';
import { parseCustomerBase } from '../src/redis/keys.js';
import { PersistLoop } from './persist.js';
import { TrimLoop } from '../src/ledger/retention.js';
import { CopyEntryWriter } from '../src/ledger/copy-writer.js';
import { sweep } from './sweep.js';
import { Invoicing } from '../src/billing/invoices.js';
import { workerMetrics } from '../src/metrics/worker.js';
import { serveMetrics, type MetricsServer } from '../src/metrics/stores.js';
import { webhookProcessor } from '../src/webhooks/processor.js';
import { scheduleDispatch, webhookBackoff, webhookQueueName, type WebhookJobData } from '../src/webhooks/queue.js';
import { fanOutEvents } from '../src/webhooks/dispatch.js';
import { EventPush } from '../src/webhooks/push.js';
import { WebhookSender } from '../src/webhooks/sender.js';
import { operatorTargetOf } from '../src/webhooks/operator.js';
import { listenError } from '../src/config/ports.js';

export interface Workers {
  persist: PersistLoop;
  /** The BullMQ worker of the ledger queue (TTL expiry and sweep jobs). */
  queueWorker: Worker<LedgerJobData>;
  /** The BullMQ worker of the reconcile queue (runs asked for through the management API). */
  reconcileWorker: Worker<ReconcileJobData, ReconcileReport>;
  /** The BullMQ worker of the webhooks queue (the dispatcher's passes and the deliveries). */
  webhookWorker: Worker<WebhookJobData>;
  /** GET /metrics of this worker on WORKER_METRICS_PORT; null when not served on a port of its own. */
  metrics: MetricsServer | null;
  /**
   * Stops taking jobs (the jobs in progress finish; a reconcile goes back to the queue) and
   * ends the persist loop after the pass in progress; calling it again waits for the same stop.
   */
  stop(): Promise<void>;
}

/**
 * How long a stop waits for BullMQ's worker to close: for the jobs in progress (expiry and
 * sweep jobs take milliseconds) and for its blocking connection to end. A blocking
 * connection caught reconnecting, while Redis is away or has just come back, never emits
 * the 'end' that BullMQ's close waits for (bullmq#4656), and the stop would hang for good.
 * A job cut short by this bound is idempotent and runs again when its lock expires.
 */
export const worker_close_wait_ms = 5_000;

/**
 * How long a queue worker waits after Redis failed it (a fetch of the next job, a
 * job's completion) before it tries again. BullMQ's default is 15 s: after a failover or
 * a master restart, TTL expiries and sweeps would stand still that long for one error
 * met while Redis came back (seen on a loaded machine: the cluster test of a master
 * restarted empty waited past its 15 s for the sweep).
 */
const queue_retry_delay_ms = 1_000;

/**
 * The ledger queue's worker is replaced when it has started no job for this long while
 * jobs wait in the queue (checked every queue_worker_check_ms). Seen on a Redis Cluster
 * whose master holding the queue restarted empty: BullMQ's worker stayed in its wait for
 * the next job for good (no command pending on any connection, its blocking client
 * 'ready'), with the sweep job waiting, so TTL freezes were never released by the sweeper
 * (test/cluster/shared-keys.test.ts, about 1 run in 4 with a core busy). A new Worker on
 * new connections takes the jobs; the old one is closed without waiting for it.
 */
export const queue_worker_stuck_ms = 10_000;
export const queue_worker_check_ms = 5_000;

/** Webhook jobs one worker process runs at once: a delivery waits on the endpoint up to WEBHOOK_TIMEOUT_MS. */
const webhook_worker_concurrency = 16;

/** How often a worker makes the webhook dispatch schedule again (the same one: nothing changes while it exists). */
const dispatch_schedule_renew_ms = 60_000;

/** The repeatable job that closes due billing periods into invoices. */
export const close_periods_job = 'close-periods';

/**
 * Starts the worker's parts. `serveMetrics` false: the worker's metrics stay in the
 * runtime's registry for the API's /metrics to serve (`npm start`), whatever
 * WORKER_METRICS_PORT says.
 */
export async function startWorkers(rt: Runtime, opts: { serveMetrics?: boolean } = {}): Promise<Workers> {
  const { config, logger } = rt;
  // The persist loop writes plain ledger entries with COPY on a connection of its own.
  const writer = new CopyEntryWriter(config.DATABASE_URL, rt.ledgerQueries, logger);
  const measured = workerMetrics(rt.metrics);
  // The events a persist pass committed go to webhook endpoints at once, on this worker's
  // queue; the dispatcher's poll is the safety net (src/webhooks/dispatch.ts).
  const push = new EventPush((ids) => fanOutEvents(rt.db, rt.webhookQueue, ids), logger);
  const persist = new PersistLoop(rt.redis, rt.ledgerQueries, config.REDIS_PREFIX, config.PERSIST_IDLE_MS, logger, {
    isReady: () => rt.generation.verified,
    recordProjects: projectRecorder(rt),
    // A customer whose entries clash with the ledger's seq: renumbered and rebuilt by
    // reconcile's repair (docs/OPERATIONS.md, "The wedge").
    async repairSeqClash(base) {
      const ids = parseCustomerBase(config.REDIS_PREFIX, base);
      if (!ids) throw new Error(`not a customer key base: ${base}`);
      const report = await reconcile(rt, { repair: true, customers: [ids] });
      if (report.errors.length > 0) throw new Error(report.errors[0].message);
    },
    persisted: (bases) => rt.retention.persisted(bases),
    passDone: (entries, seconds, failed) => measured.passDone(entries, seconds, failed),
    eventsPersisted: (ids) => push.add(ids),
  }, writer, config.PERSIST_IDLE_MAX_MS);
  persist.start();
  const trim = new TrimLoop(rt.retention, logger, () => rt.generation.verified);
  trim.start();

  const invoicing = new Invoicing(rt.db, rt.redis, config.REDIS_PREFIX, config.INVOICE_GRACE_SECONDS * 1000, logger, rt.operatorEvents, config.PLANS);

  // When the worker last showed that it runs: a job started or ended, or the queue found empty.
  let lastSeenAt = Date.now();
  const seen = () => {
    lastSeenAt = Date.now();
  };
  const makeLedgerWorker = () => {
    const w = new Worker<LedgerJobData>(
      ledgerQueueName,
      async (job) => {
        if (job.name === 'expire') {
          const d = job.data as ExpireJob;
          const r = await rt.ledger.expire({ projectId: d.projectId, organizationId: d.organizationId }, d.customerId);
          measured.expired('job', r.settled);
          return r;
        }
        if (job.name === 'sweep') {
          const t = await rt.redis.time();
          const nowMs = Number(t[0]) * 1000 + Math.floor(Number(t[1]) / 1000) + rt.clock.offsetMs();
          const r = await sweep(rt.redis, rt.scripts, config.REDIS_PREFIX, rt.ledger, nowMs);
          measured.expired('sweep', r.settled);
          return r;
        }
        if (job.name === close_periods_job) return invoicing.closeDue(rt.plans.nowMs());
        throw new Error(`unknown job ${job.name}`);
      },
      { connection: rt.queueConnection(), prefix: config.QUEUE_PREFIX, concurrency: 8, runRetryDelay: queue_retry_delay_ms },
    );
    w.on('failed', (job, err) => {
      seen();
      measured.job(job?.name ?? 'other', 'failed');
      logger.error({ err, job: job?.name }, 'ledger job failed');
    });
    w.on('completed', (job) => {
      seen();
      measured.job(job.name, 'completed');
    });
    w.on('active', seen);
    w.on('drained', seen);
    w.on('error', throttled((err) => logger.error({ err }, 'ledger worker error')));
    return w;
  };
  let worker = makeLedgerWorker();
  let stopping: Promise<void> | undefined;
  // Jobs seen waiting since this time with no sign of the worker since: stuck once it lasts
  // queue_worker_stuck_ms. (A healthy worker takes a waiting job within milliseconds; an
  // idle one shows nothing for as long as the queue is empty.)
  let waitingSince: number | null = null;
  const watchdog = setInterval(() => {
    void (async () => {
      if (stopping) return;
      const waiting = await rt.ledgerQueue.getWaitingCount();
      const now = Date.now();
      if (waiting === 0) waitingSince = null;
      else if (waitingSince === null || lastSeenAt >= waitingSince) waitingSince = now;
      if (waitingSince === null || now - waitingSince < queue_worker_stuck_ms || stopping) return;
      logger.warn({ waiting, stuckMs: now - waitingSince }, 'the ledger queue worker started no job while jobs waited; replacing it');
      const old = worker;
      worker = makeLedgerWorker();
      waitingSince = null;
      old.close(true).catch(() => undefined);
    })().catch((err: unknown) => logger.error({ err }, 'the ledger queue worker check failed'));
  }, queue_worker_check_ms);
  const reconcileWorker = new Worker<ReconcileJobData, ReconcileReport>(reconcileQueueName, reconcileProcessor(rt), {
    connection: rt.queueConnection(), prefix: config.QUEUE_PREFIX, concurrency: reconcile_worker_concurrency, runRetryDelay: queue_retry_delay_ms,
  });
  reconcileWorker.on('failed', (job, err) => logger.error({ err, job: job?.id }, 'reconcile job failed'));
  reconcileWorker.on('error', throttled((err) => logger.error({ err }, 'reconcile worker error')));
  const sender = new WebhookSender({ timeoutMs: config.WEBHOOK_TIMEOUT_MS, allowPrivate: config.UPSTREAM_ALLOW_PRIVATE });
  // The operator's own endpoint may be on its private network: its URL is configuration, not a caller's.
  const operatorTarget = operatorTargetOf(config);
  const operator = operatorTarget === null ? null : { target: operatorTarget, sender: new WebhookSender({ timeoutMs: config.WEBHOOK_TIMEOUT_MS, allowPrivate: true }) };
  const webhookWorker = new Worker<WebhookJobData>(webhookQueueName, webhookProcessor({
    db: rt.db,
    endpoints: rt.webhookEndpoints,
    queue: rt.webhookQueue,
    sender,
    retryScheduleMs: config.WEBHOOK_RETRY_SCHEDULE_MS,
    staleGraceMs: 2 * config.WEBHOOK_STALLED_MS,
    graceMs: config.WEBHOOK_DISPATCH_GRACE_MS,
    disableRule: { failedDeliveries: config.WEBHOOK_DISABLE_FAILED_DELIVERIES, failingMs: config.WEBHOOK_DISABLE_FAILING_MS },
    operator,
    logger,
  }), {
    connection: rt.queueConnection(),
    prefix: config.QUEUE_PREFIX,
    // Deliveries mostly wait on the network: many at once.
    concurrency: webhook_worker_concurrency,
    runRetryDelay: queue_retry_delay_ms,
    // A killed worker's deliveries run again after the lock (its renewal stopped) at the next stalled check.
    lockDuration: config.WEBHOOK_STALLED_MS,
    stalledInterval: config.WEBHOOK_STALLED_MS,
    settings: { backoffStrategy: webhookBackoff },
  });
  // A failed attempt is retried by its job (RetryLater) and logged in the delivery log, not here.
  webhookWorker.on('error', throttled((err) => logger.error({ err }, 'webhook worker error')));
  await scheduleSweeps(rt.ledgerQueue, config.SWEEP_INTERVAL_MS);
  const dispatchSchedule = () => scheduleDispatch(rt.webhookQueue, config.WEBHOOK_DISPATCH_INTERVAL_MS);
  await dispatchSchedule();
  // A Redis that came back empty gets it back from its recovery (src/reconcile/shared-keys.ts);
  // made again now and then too, for a Redis restored from a copy made before it existed.
  const dispatchRenewal = setInterval(() => {
    dispatchSchedule().catch((err: unknown) => logger.error({ err }, 'the webhook dispatch schedule was not renewed'));
  }, dispatch_schedule_renew_ms);
  // Finds every organization whose period is due, however many workers run: each
  // invoice is unique per organization and period (src/billing/invoices.ts). None under
  // PLANS=off, which has no invoices.
  if (config.INVOICE_INTERVAL_MS > 0 && config.PLANS === 'on') {
    await rt.ledgerQueue.upsertJobScheduler(close_periods_job, { every: config.INVOICE_INTERVAL_MS }, {
      name: close_periods_job,
      data: {},
      opts: { removeOnComplete: true, removeOnFail: 100 },
    });
  }

  const beat = () => rt.redis.set(heartbeatKey(config.REDIS_PREFIX), String(Date.now()), 'PX', 60_000).catch(() => undefined);
  await beat();
  const heartbeat = setInterval(beat, 2_000);

  const metricsPort = opts.serveMetrics === false ? undefined : config.WORKER_METRICS_PORT;
  const metricsServer = metricsPort === undefined
    ? null
    : await serveMetrics(rt.metrics, metricsPort, config.METRICS_HOST ?? config.HOST).catch((err: unknown) => {
      throw listenError(err, metricsPort, 'WORKER_METRICS_PORT');
    });
  if (metricsServer) logger.info({ port: metricsServer.port }, 'worker metrics listening');

  return {
    persist,
    get queueWorker() {
      return worker;
    },
    reconcileWorker,
    webhookWorker,
    metrics: metricsServer,
    stop() {
      stopping ??= (async () => {
        clearInterval(heartbeat);
        clearInterval(watchdog);
        clearInterval(dispatchRenewal);
        // A reconcile in progress stops after its current customers and goes back to wait
        // for another worker (src/reconcile/jobs.ts).
        reconcileWorker.cancelAllJobs('the worker is stopping');
        // All at once: the persist loop ends after the pass in progress (its customers put
        // back when it could not finish them), not after BullMQ's jobs.
        const queueClosed = (async () => {
          let timer: NodeJS.Timeout | undefined;
          const closed = await Promise.race([
            Promise.all([worker.close(), reconcileWorker.close(), webhookWorker.close()]).then(() => true),
            new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), worker_close_wait_ms))),
          ]);
          clearTimeout(timer);
          if (!closed) logger.warn({ waitedMs: worker_close_wait_ms }, 'the queue workers did not close in time (their Redis connection is reconnecting); stopping without them');
        })();
        await Promise.all([queueClosed, persist.stop().then(() => push.idle()), trim.stop(), metricsServer?.close()]);
        // The COPY connection once the persist loop has ended.
        await writer.close();
        await sender.close();
        await operator?.sender.close();
      })();
      return stopping;
    },
  };
}
