/**
 * The webhooks queue's processor (workers/index.ts runs it): the dispatcher's poll, and
 * one attempt of a delivery. A scheduled attempt that fails is recorded, then retried
 * after the schedule's next delay (RetryLater); after the last one the delivery is marked
 * failed, and the endpoint disabled when it keeps failing (DisableRule). A replay is one
 * attempt more, recorded as manual; it leaves the schedule as it was, and a success ends
 * the delivery. A delivery already finished is not attempted again by its scheduled job
 * (a job queued again after a crash); its attempts repeat the same `webhook-id`.
 */
import type { Job, Queue } from 'bullmq';
import type { Logger } from 'pino';
import type { DatabasePool } from 'slonik';
import { test_event_type } from '../events/store.js';
import { failUnattempted, findDeliveryWork, recordAttempt } from './deliveries.js';
import { dispatchEvents } from './dispatch.js';
import { disableWhenFailing, type DisableRule, type EndpointQueries } from './endpoints.js';
import { deliverOperatorEvent, requeueStaleOperatorEvents, type OperatorDelivery } from './operator.js';
import { deliver_job, dispatch_job, operator_deliver_job, RetryLater, type DeliverJob, type OperatorDeliverJob, type WebhookJobData } from './queue.js';
import { nextScheduledAttempt, succeeded, type WebhookSender } from './sender.js';

export interface WebhookWorkerDeps {
  db: DatabasePool;
  endpoints: EndpointQueries;
  queue: Queue<WebhookJobData>;
  sender: WebhookSender;
  /** The delays before each retry (config WEBHOOK_RETRY_SCHEDULE_MS). */
  retryScheduleMs: readonly number[];
  /** How long past its due time a pending delivery waits before the dispatcher queues it again. */
  staleGraceMs: number;
  /** How old an event not fanned out must be before the dispatcher's poll takes it (WEBHOOK_DISPATCH_GRACE_MS). */
  graceMs: number;
  disableRule: DisableRule;
  /** The operator's endpoint and its sender; null when none is configured (src/webhooks/operator.ts). */
  operator: OperatorDelivery | null;
  logger: Logger;
}

/** Overdue operator events one poll queues again. */
const operator_requeue_batch = 200;

export function webhookProcessor(deps: WebhookWorkerDeps): (job: Job<WebhookJobData>) => Promise<unknown> {
  return async (job) => {
    if (job.name === dispatch_job) {
      const fannedOut = await dispatchEvents(deps.db, deps.queue, { graceMs: deps.graceMs, staleGraceMs: deps.staleGraceMs });
      if (deps.operator !== null) await requeueStaleOperatorEvents(deps.db, deps.queue, deps.staleGraceMs, operator_requeue_batch);
      return fannedOut;
    }
    if (job.name === deliver_job) return deliver(deps, job.data as DeliverJob);
    if (job.name === operator_deliver_job) return deliverOperatorEvent(deps.db, deps.operator, deps.retryScheduleMs, job.data as OperatorDeliverJob);
    throw new Error(`unknown job ${job.name}`);
  };
}

/** What a delivery pass did. */
type Outcome = 'gone' | 'finished' | 'endpoint_disabled' | 'succeeded' | 'failed' | 'replayed';

async function deliver(deps: WebhookWorkerDeps, job: DeliverJob): Promise<Outcome> {
  const { db } = deps;
  const work = await findDeliveryWork(db, job.deliveryId);
  if (work === null) return 'gone';
  if (!job.manual && work.status !== 'pending') return 'finished';
  const target = await deps.endpoints.deliveryTarget(work.endpointId);
  if (target === null) return 'gone';
  // A test send goes to a disabled endpoint too: its owner asked for it.
  if (!job.manual && !target.enabled && work.event.type !== test_event_type) {
    await failUnattempted(db, job.deliveryId);
    return 'endpoint_disabled';
  }
  const attempt = await deps.sender.send(target, work.event, job.manual);
  if (succeeded(attempt)) {
    await recordAttempt(db, job.deliveryId, attempt, { status: 'succeeded', nextAttemptAt: null });
    return 'succeeded';
  }
  if (job.manual) {
    await recordAttempt(db, job.deliveryId, attempt, { status: null });
    return 'replayed';
  }
  const { scheduled, delayMs } = nextScheduledAttempt(work.attempts, deps.retryScheduleMs);
  if (delayMs === undefined) {
    await recordAttempt(db, job.deliveryId, attempt, { status: 'failed', nextAttemptAt: null });
    if (await disableWhenFailing(db, work.endpointId, deps.disableRule)) {
      deps.logger.warn({ endpointId: work.endpointId }, 'webhook endpoint disabled: its deliveries keep failing');
    }
    return 'failed';
  }
  await recordAttempt(db, job.deliveryId, attempt, { status: null, nextAttemptAt: new Date(Date.now() + delayMs) });
  throw new RetryLater(delayMs, `attempt ${scheduled} failed (${attempt.error ?? `HTTP ${attempt.status_code}`}); retried in ${delayMs} ms`);
}
