/**
 * The gauges read from Redis and PostgreSQL, computed when /metrics is scraped (prom-client
 * `collect`), never on a request: the outbox (lag, customers and entries waiting, the
 * workers' heartbeat), the entries parked in quarantine, the jobs of each BullMQ queue by state, and the plan usage of the
 * current periods: in aggregate always, and per organization only where the scrape is
 * private (METRICS_PORT) or the operator asked (METRICS_ORGANIZATION_SERIES), since the
 * API port's /metrics needs no key and organization ids are tenants' identities. Each read has collect_timeout_ms; one that fails or takes
 * longer leaves its gauges at NaN for that scrape and counts in
 * svc_metrics_collect_errors_total. The gauges of one read share it within a scrape.
 *
 * These describe the whole service, not the process: every API process that serves
 * /metrics reports the same values (aggregate them with max, not sum). Worker processes do
 * not register them.
 *
 * Also the /metrics handler of the API's port and the server of a port of its own.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { RequestHandler } from 'express';
import { Gauge } from 'prom-client';
import { outboxState, type OutboxState } from '../health.js';
import { job_states } from '../admin/operations/system.js';
import type { Logger } from 'pino';
import type { Queue } from 'bullmq';
import type { Config } from '../config/index.js';
import type { RedisClient } from '../redis/client.js';
import type { PlanService } from '../plans/service.js';
import type { LedgerQueries } from '../ledger/queries.js';
import type { Metrics } from './metrics.js';
import { z } from 'zod';
import { describeRoute } from '../openapi/registry.js';

/** The longest a scrape waits for one read of Redis or PostgreSQL. */
const collect_timeout_ms = 2_000;
/** A read serves every gauge that needs it for this long: the gauges of one scrape share it. */
const collect_shared_ms = 1_000;
/** Organizations with a plan usage series: those with the highest counts this period (src/plans/service.ts, usageOfOrganizations). */
const plan_usage_organizations_max = 1_000;

/** Resolves with `p`, or rejects after `ms`. */
function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

/** A read shared by the gauges that need it, for collect_shared_ms after it started. */
function sharedRead<T>(read: () => Promise<T>, what: string): () => Promise<T> {
  let last: { atMs: number; value: Promise<T> } | null = null;
  return () => {
    const now = Date.now();
    if (last === null || now - last.atMs > collect_shared_ms) {
      const value = withTimeout(read(), collect_timeout_ms, what);
      value.catch(() => undefined);
      last = { atMs: now, value };
    }
    return last.value;
  };
}

const watched = new WeakSet<Metrics>();

/** Registers the gauges read on a scrape in the runtime's registry; once per runtime. */
/** What the scrape-time gauges read. */
export interface StoreGaugeDeps {
  config: Config;
  logger: Logger;
  metrics: Metrics;
  redis: RedisClient;
  plans: PlanService;
  queues: readonly Queue[];
  ledgerQueries: LedgerQueries;
}

export function watchStores(rt: StoreGaugeDeps): void {
  const { metrics } = rt;
  if (watched.has(metrics)) return;
  watched.add(metrics);
  const registers = [metrics.registry];
  for (const gauge of ['outbox', 'queues', 'plan_usage', 'quarantine']) metrics.collectErrors.inc({ gauge }, 0);
  const failed = (gauge: string, err: unknown) => {
    metrics.collectErrors.inc({ gauge });
    rt.logger.warn({ err, gauge }, 'a metric could not be read from its store on this scrape');
  };

  const outbox = sharedRead<OutboxState>(() => outboxState(rt.redis, rt.config.REDIS_PREFIX, { lengths: true }), 'outbox');
  const outboxGauge = (name: string, help: string, value: (o: OutboxState) => number) =>
    new Gauge({
      name,
      help,
      registers,
      async collect() {
        try {
          this.set(value(await outbox()));
        } catch (err) {
          this.set(Number.NaN);
          if (name === 'svc_outbox_lag_seconds') failed('outbox', err);
        }
      },
    });
  outboxGauge('svc_outbox_lag_seconds', 'Age of the oldest ledger entry waiting in Redis for the workers (sampled outboxes): how far PostgreSQL is behind', (o) => o.lagMs / 1000);
  outboxGauge('svc_outbox_dirty_customers', 'Customers whose outbox holds entries the workers have not persisted yet', (o) => o.dirtyCustomers);
  outboxGauge(
    'svc_outbox_entries_waiting',
    'Ledger entries waiting in the outboxes of dirty customers (exact up to 8 customers per dirty shard, estimated from that sample beyond)',
    (o) => o.entriesWaiting ?? 0,
  );
  // No heartbeat (none within its minute of life) reads +Inf: no worker, as far as anyone can tell.
  outboxGauge('svc_worker_heartbeat_age_seconds', 'Age of the last worker heartbeat (+Inf when no worker beat in the last minute)', (o) => (o.heartbeatAgeMs === null ? Number.POSITIVE_INFINITY : o.heartbeatAgeMs / 1000));

  const quarantined = sharedRead(() => rt.ledgerQueries.quarantine(rt.config.REDIS_PREFIX).openCount(), 'quarantine');
  new Gauge({
    name: 'svc_persist_quarantined_entries',
    help: 'Ledger entries PostgreSQL refused for good, parked in persist_quarantine and not released: each a hole in the ledger of record (docs/OPERATIONS.md)',
    registers,
    async collect() {
      try {
        this.set(await quarantined());
      } catch (err) {
        this.set(Number.NaN);
        failed('quarantine', err);
      }
    },
  });

  const { queues } = rt;
  const jobCounts = sharedRead(() => Promise.all(queues.map(async (q) => ({ name: q.name, counts: await q.getJobCounts(...job_states) }))), 'queues');
  new Gauge({
    name: 'svc_queue_jobs',
    help: 'Jobs of the service\'s BullMQ queues by queue and state',
    labelNames: ['queue', 'state'],
    registers,
    async collect() {
      try {
        const all = await jobCounts();
        for (const q of all) for (const state of job_states) this.set({ queue: q.name, state }, q.counts[state] ?? 0);
      } catch (err) {
        for (const q of queues) for (const state of job_states) this.set({ queue: q.name, state }, Number.NaN);
        failed('queues', err);
      }
    },
  });

  const usage = sharedRead(() => rt.plans.usageOfOrganizations(plan_usage_organizations_max), 'plan usage');
  new Gauge({
    name: 'svc_plan_usage_operations_sum',
    help: 'Billable operations counted in the current billing periods, summed over the organizations with the highest counts (at most 1,000)',
    registers,
    async collect() {
      try {
        this.set((await usage()).reduce((n, u) => n + u.used, 0));
      } catch (err) {
        this.set(Number.NaN);
        failed('plan_usage', err);
      }
    },
  });
  new Gauge({
    name: 'svc_plan_organizations_at_allowance',
    help: 'Organizations whose count this period reached the operations their plan includes (Free: refused from there; Pro: overage)',
    registers,
    async collect() {
      try {
        this.set((await usage()).filter((u) => u.included !== null && u.used >= u.included).length);
      } catch {
        // Counted once, by svc_plan_usage_operations_sum.
        this.set(Number.NaN);
      }
    },
  });
  if (rt.config.METRICS_PORT === undefined && !rt.config.METRICS_ORGANIZATION_SERIES) return;
  new Gauge({
    name: 'svc_plan_usage_operations',
    help: 'Billable operations counted in the organization\'s current billing period (as Redis counts them; trails by up to 250 ms)',
    labelNames: ['organization'],
    registers,
    async collect() {
      this.reset();
      try {
        for (const u of await usage()) this.set({ organization: u.organizationId }, u.used);
      } catch {
        // Counted once, by svc_plan_usage_operations_sum.
      }
    },
  });
  new Gauge({
    name: 'svc_plan_included_operations',
    help: 'Operations the organization\'s plan includes per period (absent for a custom contract)',
    labelNames: ['organization'],
    registers,
    async collect() {
      this.reset();
      try {
        for (const u of await usage()) if (u.included !== null) this.set({ organization: u.organizationId }, u.included);
      } catch {
        // Counted once, by svc_plan_usage_operations_sum.
      }
    },
  });
}

describeRoute({
  method: 'GET',
  path: '/metrics',
  tag: 'Health',
  callers: ['public'],
  summary: 'Prometheus metrics',
  description: "The text exposition of the service's metrics, without a key. With `METRICS_PORT` set it is served on that port only, and this path answers 404 here.",
  responses: { 200: { description: 'The metrics', content: { 'text/plain': z.string().openapi({ description: 'Prometheus text format 0.0.4.' }) } } },
});

/** GET /metrics on the API's port: the registry's text exposition, no key. */
export function metricsHandler(metrics: Metrics): RequestHandler {
  return async (_req, res) => {
    const { contentType, body } = await metrics.exposition();
    res.setHeader('Content-Type', contentType);
    res.send(body);
  };
}

export interface MetricsServer {
  url: string;
  port: number;
  close(): Promise<void>;
}

/**
 * A server of its own for GET /metrics (METRICS_PORT, WORKER_METRICS_PORT): that path
 * answers the registry, any other 404. Nothing else of the API is there.
 */
export async function serveMetrics(metrics: Metrics, port: number, host: string): Promise<MetricsServer> {
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (path !== '/metrics' || (req.method !== 'GET' && req.method !== 'HEAD')) {
      res.writeHead(404, { 'Content-Type': 'text/plain; charset=utf-8' }).end('not found: GET /metrics\n');
      return;
    }
    metrics.exposition().then(
      ({ contentType, body }) => {
        res.writeHead(200, { 'Content-Type': contentType });
        res.end(req.method === 'HEAD' ? undefined : body);
      },
      (err: unknown) => {
        res.writeHead(500, { 'Content-Type': 'text/plain; charset=utf-8' }).end(`metrics failed: ${(err as Error).message}\n`);
      },
    );
  });
  server.listen(port, host);
  await new Promise<void>((resolve, reject) => {
    server.once('listening', resolve);
    server.once('error', reject);
  });
  const actual = (server.address() as AddressInfo).port;
  return {
    url: `http://${host}:${actual}`,
    port: actual,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
