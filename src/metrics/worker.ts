/**
 * A worker's own metrics, in its runtime's registry (src/metrics/metrics.ts): the persist
 * loop's passes (entries per pass, time per pass, entries persisted, customers given back
 * after a failure), the TTL freezes the worker settled, and the ledger queue's jobs by
 * name and outcome. Served by the worker on WORKER_METRICS_PORT, or, in `npm start`'s
 * single process, with the API's /metrics.
 */
import { Counter, Histogram } from 'prom-client';
import type { Metrics } from './metrics.js';

/** Entries per pass: the loop takes at most persist_pass_entries_max (8192). */
const batch_buckets = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 8192];
const pass_buckets = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

const known_jobs = new Set(['expire', 'sweep', 'close-periods']);
const made = new WeakMap<Metrics, WorkerMetrics>();

/** The worker metrics of a runtime's registry, registered on first use. */
export function workerMetrics(metrics: Metrics): WorkerMetrics {
  let w = made.get(metrics);
  if (w === undefined) made.set(metrics, (w = new WorkerMetrics(metrics)));
  return w;
}

export class WorkerMetrics {
  private readonly batchEntries: Histogram;
  private readonly batchDuration: Histogram;
  private readonly persisted: Counter;
  private readonly failedCustomers: Counter;
  private readonly expirations: Counter<'via'>;
  private readonly jobs: Counter<'job' | 'outcome'>;

  constructor(metrics: Metrics) {
    const registers = [metrics.registry];
    this.batchEntries = new Histogram({
      name: 'svc_persist_batch_entries',
      help: 'Ledger entries copied to PostgreSQL per persist pass (passes that found customers to persist)',
      buckets: batch_buckets,
      registers,
    });
    this.batchDuration = new Histogram({
      name: 'svc_persist_batch_duration_seconds',
      help: 'Time of a persist pass: the dirty pops, the outbox reads, the PostgreSQL transaction and the trims',
      buckets: pass_buckets,
      registers,
    });
    this.persisted = new Counter({ name: 'svc_persist_entries_total', help: 'Ledger entries the persist loop copied to PostgreSQL', registers });
    this.failedCustomers = new Counter({
      name: 'svc_persist_failed_customers_total',
      help: 'Customers a persist pass gave back to the dirty set after a failure (retried after a pause)',
      registers,
    });
    this.expirations = new Counter({
      name: 'svc_worker_expirations_total',
      help: 'TTL freezes the worker settled (auto-consumed or released), by what found them: their expire job, or the sweep',
      labelNames: ['via'],
      registers,
    });
    this.jobs = new Counter({ name: 'svc_worker_jobs_total', help: 'Ledger queue jobs run by this worker, by job name and outcome', labelNames: ['job', 'outcome'], registers });
    // Both series from the start, at 0, so that a rate is defined before the first expiration.
    this.expirations.inc({ via: 'job' }, 0);
    this.expirations.inc({ via: 'sweep' }, 0);
  }

  /** PersistHooks.passDone (workers/persist.ts). */
  passDone(entries: number, seconds: number, failedCustomers: number): void {
    this.batchEntries.observe(entries);
    this.batchDuration.observe(seconds);
    if (entries > 0) this.persisted.inc(entries);
    if (failedCustomers > 0) this.failedCustomers.inc(failedCustomers);
  }

  expired(via: 'job' | 'sweep', settled: number): void {
    if (settled > 0) this.expirations.inc({ via }, settled);
  }

  /** A job of the ledger queue ended; `name` is one of the queue's job names (bounded). */
  job(name: string, outcome: 'completed' | 'failed'): void {
    this.jobs.inc({ job: known_jobs.has(name) ? name : 'other', outcome });
  }
}
