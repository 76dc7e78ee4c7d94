/**
 * Reconcile as a background job: the management API (and the dashboard's Reconcile
 * screen) queue a project's reconcile on the `reconcile` BullMQ queue and answer at once;
 * any worker process runs it (workers/index.ts) and writes its progress and, at the end,
 * its report into the job, which lives in Redis: a web process restarted meanwhile, or
 * another one, answers its status all the same.
 *
 * A job names its project, and its status is only answered under that project, which the
 * caller's organization must own: another organization's job id reads as not found. Job
 * ids are random (`rcj_...`), not BullMQ's counter, so that they say nothing about other
 * organizations' jobs.
 */
import { Queue, WaitingError, type Job, type Processor } from 'bullmq';
import { z } from 'zod';
import '../schema/zod.js';
import { newId } from '../ids.js';
import type { RedisClient } from '../redis/client.js';
import { reconcileReportSchema, type ReconcileProgress, type ReconcileReport } from './report.js';
import { reconcile, type ReconcileRuntime } from './walk.js';

export const reconcileQueueName = 'reconcile';

export interface ReconcileJobData {
  projectId: string;
  repair: boolean;
}

/** How long a finished job (and its report) can be read, and how many finished jobs are kept at most. */
const reconcile_job_retention_seconds = 86_400;
const reconcile_jobs_kept_max = 200;
/** Reconcile jobs one worker process runs at once (each checks concurrency_default customers at a time). */
export const reconcile_worker_concurrency = 1;

const reconcile_job_statuses = ['queued', 'running', 'completed', 'failed'] as const;
type ReconcileJobStatus = (typeof reconcile_job_statuses)[number];

const isoTime = z.string().openapi({ format: 'date-time' });
const count = z.number().int();

/** A job as GET .../reconcile/{job_id} answers it. */
export const reconcileJobSchema = z
  .object({
    object: z.literal('reconcile_job'),
    id: z.string().openapi({ example: 'rcj_3q2Vd0zQ3aJ1x9bF' }),
    project_id: z.string(),
    repair: z.boolean(),
    status: z.enum(reconcile_job_statuses),
    created_at: isoTime.nullable(),
    started_at: isoTime.nullable(),
    finished_at: isoTime.nullable(),
    progress: z
      .object({
        customers_done: count,
        customers_total: count.nullable().openapi({ description: "The project's customers in PostgreSQL when the run started; null until it has." }),
        customers_with_drift: count,
        drift_total: count,
        errors_total: count,
        customers_per_second: z.number().int().nullable(),
      })
      .strict(),
    result: reconcileReportSchema.nullable().openapi({ description: 'The report, once completed.' }),
    error: z.object({ message: z.string() }).strict().nullable(),
  })
  .strict()
  .openapi('ReconcileJob');

/** What POST .../reconcile answers (202): the job as queued, with none of what running it writes. */
export const reconcileJobStartedSchema = reconcileJobSchema
  .pick({ object: true, id: true, project_id: true, repair: true, status: true, created_at: true })
  .strict()
  .openapi('ReconcileJobStarted');

export function startedEntry(job: ReconcileJobEntry): z.infer<typeof reconcileJobStartedSchema> {
  return { object: job.object, id: job.id, project_id: job.project_id, repair: job.repair, status: job.status, created_at: job.created_at };
}

export function createReconcileQueue(connection: RedisClient, prefix: string): Queue<ReconcileJobData, ReconcileReport> {
  return new Queue<ReconcileJobData, ReconcileReport>(reconcileQueueName, {
    connection,
    prefix,
    defaultJobOptions: {
      // A run that failed is read as failed; the caller starts another if they wish.
      attempts: 1,
      removeOnComplete: { age: reconcile_job_retention_seconds, count: reconcile_jobs_kept_max },
      removeOnFail: { age: reconcile_job_retention_seconds, count: reconcile_jobs_kept_max },
    },
  });
}

/**
 * Queues a reconcile of the project. While one with the same `repair` is queued or
 * running for the project, that one is answered instead of queueing a second.
 */
export async function startReconcileJob(queue: Queue<ReconcileJobData, ReconcileReport>, projectId: string, repair: boolean): Promise<ReconcileJobEntry> {
  const added = await queue.add('reconcile', { projectId, repair }, {
    jobId: newId('rcj'),
    deduplication: { id: `${projectId}:${repair ? 'repair' : 'check'}` },
  });
  // Deduplicated: `added` carries the id of the job already there.
  const entry = await readReconcileJob(queue, projectId, added.id!);
  if (!entry) throw new Error(`reconcile job ${added.id} vanished as it was queued`);
  return entry;
}

/**
 * The project's job of this id as the API answers it, or null (unknown, removed, or
 * another project's). Its state is read before its hash: a job that finishes in between
 * shows finished in the hash (BullMQ writes both at once), never the other way round.
 */
export async function readReconcileJob(queue: Queue<ReconcileJobData, ReconcileReport>, projectId: string, jobId: string): Promise<ReconcileJobEntry | null> {
  if (!/^rcj_[A-Za-z0-9_-]{16}$/.test(jobId)) return null;
  const state = await queue.getJobState(jobId);
  const job = await queue.getJob(jobId);
  return job && job.data.projectId === projectId ? reconcileJobEntry(job, state) : null;
}

function statusOf(job: Job<ReconcileJobData, ReconcileReport>, state: string): ReconcileJobStatus {
  if (state === 'completed' || state === 'failed') return state;
  // Finished after its state was read.
  if (job.finishedOn) return job.failedReason ? 'failed' : 'completed';
  return state === 'active' ? 'running' : 'queued';
}

const iso = (ms: number | undefined) => (ms ? new Date(ms).toISOString() : null);

/** A job as the API answers it (docs/API.md, "Reconcile jobs"). */
function reconcileJobEntry(job: Job<ReconcileJobData, ReconcileReport>, state: string) {
  const status = statusOf(job, state);
  const p = typeof job.progress === 'object' && job.progress !== null ? (job.progress as unknown as ReconcileProgress) : null;
  const report = status === 'completed' ? (job.returnvalue ?? null) : null;
  const done = report?.customers_checked ?? p?.customers_done ?? 0;
  const elapsedMs = p?.elapsed_ms ?? 0;
  return {
    object: 'reconcile_job' as const,
    id: job.id!,
    project_id: job.data.projectId,
    repair: job.data.repair,
    status,
    created_at: iso(job.timestamp),
    started_at: iso(job.processedOn),
    finished_at: iso(job.finishedOn),
    progress: {
      customers_done: done,
      customers_total: p?.customers_total ?? null,
      customers_with_drift: report?.customers_with_drift ?? p?.customers_with_drift ?? 0,
      drift_total: report?.drift_total ?? p?.drift_total ?? 0,
      errors_total: report?.errors_total ?? p?.errors_total ?? 0,
      customers_per_second: elapsedMs > 0 ? Math.round((done * 1000) / elapsedMs) : null,
    },
    result: report,
    error: status === 'failed' ? { message: job.failedReason || 'the reconcile job failed' } : null,
  };
}

export type ReconcileJobEntry = ReturnType<typeof reconcileJobEntry>;

/**
 * The worker's processor: reconciles the job's project, with the scan for customers only
 * Redis holds, writing progress into the job as it goes. A worker that stops (its abort
 * signal) puts the job back to wait, where another worker takes it from the start; a
 * worker that dies leaves it stalled, and BullMQ gives it to another the same way. A run
 * started again is safe: reconcile changes nothing that is right.
 */
export function reconcileProcessor(rt: ReconcileRuntime): Processor<ReconcileJobData, ReconcileReport> {
  return async (job, token, signal) => {
    const report = await reconcile(rt, {
      projectId: job.data.projectId,
      repair: job.data.repair,
      redisOnly: true,
      signal,
      onProgress: (p) => {
        job.updateProgress(p as unknown as object).catch((err: unknown) => rt.logger.warn({ err, job: job.id }, 'reconcile progress not written'));
      },
    });
    if (signal?.aborted) {
      await job.moveToWait(token);
      throw new WaitingError();
    }
    return report;
  };
}
