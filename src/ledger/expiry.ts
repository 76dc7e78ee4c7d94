/** The BullMQ job that settles a TTL freeze when it is due (workers/index.ts runs it). */
import type { Queue } from 'bullmq';
import { expiryJobId } from '../redis/keys.js';
import type { ExpireJob, LedgerJobData } from '../runtime.js';
import type { Clock } from './clock.js';

/**
 * Queues the expire job of a TTL freeze, due at `atMs` (service time). One job per
 * freeze: its id is made of the freeze's identifiers, so queueing it again (reconcile
 * restores the jobs a Redis loss took) adds nothing while it exists.
 */
export async function queueExpiry(queue: Queue<LedgerJobData>, clock: Clock, job: ExpireJob, atMs: number): Promise<void> {
  // The delay is in wall-clock time; a test clock offset is not a real wait.
  const delay = Math.max(0, atMs - clock.offsetMs() - Date.now());
  await queue.add('expire', job, {
    delay,
    jobId: expiryJobId(job.projectId, job.customerId, job.transactionId),
    removeOnComplete: true,
    removeOnFail: 1000,
    attempts: 5,
    backoff: { type: 'exponential', delay: 500 },
  });
}
