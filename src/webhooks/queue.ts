/**
 * The `webhooks` BullMQ queue: the dispatcher's schedule (`dispatch`, no data), one
 * `deliver` job per delivery and one `operator-deliver` job per operator event, whose job id is the delivery id, so that queueing it again
 * while it exists adds nothing. A delivery's retries are that job's BullMQ attempts: the
 * processor records each attempt and throws RetryLater with the delay the schedule
 * gives, which webhookBackoff hands to BullMQ. A replay is a job of its own.
 */
import { Queue } from 'bullmq';
import type { RedisClient } from '../redis/client.js';

export const webhookQueueName = 'webhooks';
export const dispatch_job = 'dispatch';
export const deliver_job = 'deliver';
/** One operator event's delivery (src/webhooks/operator.ts). */
export const operator_deliver_job = 'operator-deliver';

export interface DeliverJob {
  deliveryId: string;
  /** A replay asked for by the owner: one attempt, outside the schedule. */
  manual: boolean;
}

export interface OperatorDeliverJob {
  eventId: string;
}

/** A job of the webhooks queue: a delivery, an operator event's delivery, or the dispatcher's pass (no data). */
export type WebhookJobData = DeliverJob | OperatorDeliverJob | Record<string, never>;

/**
 * BullMQ attempts of a delivery job: the schedule's attempts, and room for passes that
 * failed before any attempt (PostgreSQL away). The delivery log, not this, counts attempts.
 */
const deliver_job_attempts_max = 50;
/** The wait after a pass failed before any attempt was made (not a RetryLater). */
const pass_error_retry_ms = 5_000;

/** Thrown by a delivery pass whose attempt failed and is retried after `delayMs`. */
export class RetryLater extends Error {
  constructor(readonly delayMs: number, message: string) {
    super(message);
  }
}

/** The worker's backoffStrategy: the delay a RetryLater asks for, else pass_error_retry_ms. */
export function webhookBackoff(_attemptsMade: number, _type?: string, err?: Error): number {
  return err instanceof RetryLater ? err.delayMs : pass_error_retry_ms;
}

export function createWebhookQueue(connection: RedisClient, prefix: string): Queue<WebhookJobData> {
  return new Queue<WebhookJobData>(webhookQueueName, { connection, prefix });
}

const deliverOptions = {
  attempts: deliver_job_attempts_max,
  backoff: { type: 'webhook' },
  // Gone once done, so that a delivery whose job was lost can be queued again by id.
  removeOnComplete: true,
  removeOnFail: true,
};

/** Queues the scheduled attempts of these deliveries; one that has its job already gets no other. */
export async function queueDeliveries(queue: Queue<WebhookJobData>, deliveryIds: readonly string[]): Promise<void> {
  await queueDeliveriesAt(queue, deliveryIds.map((id) => ({ id, delayMs: 0 })));
}

/** As queueDeliveries, each job waiting `delayMs` first (a retry's remaining wait, put back by the recovery). */
export async function queueDeliveriesAt(queue: Queue<WebhookJobData>, deliveries: readonly { id: string; delayMs: number }[]): Promise<void> {
  if (deliveries.length === 0) return;
  await queue.addBulk(deliveries.map(({ id, delayMs }) => ({ name: deliver_job, data: { deliveryId: id, manual: false }, opts: { ...deliverOptions, jobId: id, delay: delayMs } })));
}

/** Queues the scheduled attempts of these operator events; job id `operator-<event id>`, so one that has its job gets no other. */
export async function queueOperatorEvents(queue: Queue<WebhookJobData>, eventIds: readonly string[]): Promise<void> {
  if (eventIds.length === 0) return;
  await queue.addBulk(eventIds.map((eventId) => ({ name: operator_deliver_job, data: { eventId }, opts: { ...deliverOptions, jobId: `operator-${eventId}` } })));
}

/** Queues a replay: one attempt of the delivery now; `n` (its attempts so far) makes the job id its own. */
export async function queueReplay(queue: Queue<WebhookJobData>, deliveryId: string, n: number): Promise<void> {
  await queue.add(deliver_job, { deliveryId, manual: true }, { attempts: 1, removeOnComplete: true, removeOnFail: true, jobId: `${deliveryId}-replay-${n}` });
}

/** The dispatcher's schedule: one job scheduler, whichever worker takes each pass. */
export async function scheduleDispatch(queue: Queue<WebhookJobData>, everyMs: number): Promise<void> {
  await queue.upsertJobScheduler(dispatch_job, { every: everyMs }, { name: dispatch_job, data: {}, opts: { removeOnComplete: true, removeOnFail: 100 } });
}
