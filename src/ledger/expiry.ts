/** The BullMQ jobs of the ledger queue: TTL expiries and the sweeps (workers/index.ts runs them). */
import type { Queue } from 'bullmq';
import { expiryJobId } from '../redis/keys.js';
import type { Clock } from './clock.js';

export const ledgerQueueName = 'ledger';

/** A job of the ledger queue: a TTL freeze's expiry, or a sweep (no data). */
export type LedgerJobData = ExpireJob | Record<string, never>;

export interface ExpireJob {
  projectId: string;
  organizationId: string;
  customerId: string;
  transactionId: string;
}

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

/**
 * The sweeper's schedule (workers/sweep.ts): one BullMQ job scheduler, whichever worker
 * takes each job. Upserting it again replaces it with the same: every worker does at its
 * start, and the recovery does when the Redis that holds the queue came back empty
 * (src/reconcile/shared-keys.ts), since the schedule is gone with it.
 */
export async function scheduleSweeps(queue: Queue<LedgerJobData>, everyMs: number): Promise<void> {
  await queue.upsertJobScheduler('sweep', { every: everyMs }, { name: 'sweep', data: {}, opts: { removeOnComplete: true, removeOnFail: 100 } });
}
