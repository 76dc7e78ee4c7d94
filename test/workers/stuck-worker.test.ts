/**
 * The ledger queue's worker is replaced when it takes no job while jobs wait
 * (workers/index.ts, queue_worker_stuck_ms): seen on a Redis Cluster whose master holding
 * the queue restarted empty, where BullMQ's worker waited for the next job for good and the
 * sweeper never ran again (its wait for the next job never ended). Here the worker is
 * closed behind the service's back, which stops it taking jobs the same way; a sweep job
 * added then must run, on a new worker.
 */
import { describe, expect, it } from 'vitest';
import { queue_worker_check_ms, queue_worker_stuck_ms } from '../../workers/index.js';
import { waitFor } from '../helpers.js';
import { svc, useTestService } from '../support/service.js';

useTestService({ workers: true });

describe('a ledger queue worker that takes no job while jobs wait', () => {
  it('is replaced, and the waiting job runs on the new one', async () => {
    const first = svc.workers!.queueWorker;
    // A closed worker takes no job and says nothing, as the stuck one did.
    await first.close();
    const job = await svc.rt.ledgerQueue.add('sweep', {});
    // Not taken while the paused worker is the only one.
    await new Promise((r) => setTimeout(r, queue_worker_check_ms));
    expect(await job.getState()).toBe('waiting');
    await waitFor(async () => (await svc.rt.ledgerQueue.getJob(job.id!))?.finishedOn !== undefined, queue_worker_stuck_ms + 3 * queue_worker_check_ms, 'the sweep job to run');
    expect(svc.workers!.queueWorker).not.toBe(first);
    expect(await job.getState()).toBe('completed');
  }, 60_000);
});
