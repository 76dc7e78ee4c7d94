/**
 * Process configuration, read once from the environment and validated with zod.
 * Every setting has a working local default so `npm start` runs on a fresh machine.
 */
import express from 'express';
import { z } from 'zod';

const bool = z
  .enum(['1', '0', 'true', 'false', 'yes', 'no', ''])
  .transform((v) => v === '1' || v === 'true' || v === 'yes');

/** A port that may be left unset; an empty value is unset too. */
const optionalPort = z.preprocess((v) => (v === '' ? undefined : v), z.coerce.number().int().min(0).max(65535).optional());

const schema = z.object({
  NODE_ENV: z.string().default('development'),
  HOST: z.string().default('127.0.0.1'),
  PORT: z.coerce.number().int().min(0).max(65535).default(3000),
  /**
   * The address browsers reach the API at (https://billing.example.com), used where the
   * service names its dashboard (bootstrap, the demo); unset: http://HOST:PORT.
   */
  PUBLIC_URL: z.string().url().optional(),
  REDIS_URL: z.string().url().default('redis://127.0.0.1:6379'),
  /**
   * 1: REDIS_URL names a node of a Redis Cluster; 0: a single Redis. Unset, the process
   * asks REDIS_URL (`INFO cluster`) at startup (src/redis/client.ts).
   */
  REDIS_CLUSTER: bool.optional(),
  DATABASE_URL: z.string().default('postgres://postgres@127.0.0.1:5432/svc'),
  /**
   * Prefix of every Redis key this process names (the queues' aside: QUEUE_PREFIX), put
   * before the key's own name as it is, with no separator added: the default ends with its
   * own (`svc:c:{P:C}:meta`). Tests give each file its own.
   */
  REDIS_PREFIX: z.string().regex(/^[A-Za-z0-9_:.-]*$/).default('svc:'),
  /**
   * Prefix of the BullMQ queues (a Redis key prefix too). On a Redis Cluster BullMQ needs
   * it to be a hash tag, so that every key of a queue is in one slot.
   */
  QUEUE_PREFIX: z.string().default('{svcq}'),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  /** Allows tests to move the service clock; never set in production. */
  SVC_CLOCK_CONTROL: bool.default('0'),
  /** Master key (32 bytes, base64 or hex) that encrypts upstream provider keys at rest. */
  SVC_MASTER_KEY: z.string().optional(),
  /** Requests per minute per API key when its project sets no limit. */
  RATE_LIMIT_PER_MINUTE: z.coerce.number().int().min(1).default(60_000),
  /** How long an upstream may take to answer headers, and between body chunks. */
  UPSTREAM_TIMEOUT_MS: z.coerce.number().int().min(100).default(120_000),
  /**
   * Connections an API process opens to one upstream origin at most. Each streamed call
   * holds one for its whole length, so this bounds the streams in flight per upstream;
   * calls beyond it wait for a free connection (256 made 1,000 concurrent streams take
   * four turns).
   */
  UPSTREAM_CONNECTIONS: z.coerce.number().int().min(1).default(4_096),
  /**
   * Lets models call upstreams on loopback, private and link-local addresses. Off, such
   * a `upstream_base_url` is refused (SSRF); the demo and the tests turn it on for the
   * mock upstream on 127.0.0.1.
   */
  UPSTREAM_ALLOW_PRIVATE: bool.default('0'),
  /**
   * How long an API process serves a key record from its cache before reading it again:
   * the bound on a revocation whose Redis message was lost (revocations are promised
   * everywhere within 1 s).
   */
  KEY_CACHE_TTL_MS: z.coerce.number().int().min(0).default(1_000),
  /** How often an API process writes the last-used times of the keys it authenticated (src/keys/usage.ts). */
  KEY_LAST_USED_FLUSH_MS: z.coerce.number().int().min(10).default(10_000),
  SWEEP_INTERVAL_MS: z.coerce.number().int().min(100).default(5_000),
  /**
   * The persist loop's wait after a pass that found nothing, doubled after each such pass
   * up to PERSIST_IDLE_MAX_MS (workers/persist.ts): an idle worker polls the dirty shards
   * every 250 ms rather than every 25, and the first write after a quiet spell reaches
   * PostgreSQL within that.
   */
  PERSIST_IDLE_MS: z.coerce.number().int().min(1).default(25),
  PERSIST_IDLE_MAX_MS: z.coerce.number().int().min(1).default(250),
  /**
   * How far back the recovery after a Redis restart looks for customers whose ledger is
   * ahead of Redis (src/reconcile/recovery.ts); older losses need `reconcile --repair`.
   */
  REDIS_RECOVERY_WINDOW_MS: z.coerce.number().int().min(1).default(24 * 3_600_000),
  /**
   * How long an operation's idempotency record stays in Redis after it reached a final
   * state (src/ledger/retention.ts); after that it leaves, once PostgreSQL holds its
   * entries, and a replay is answered from PostgreSQL.
   */
  REDIS_RETENTION_SECONDS: z.coerce.number().int().min(1).default(86_400),
  /**
   * How long the trim waits between archiving a final record's binding and deleting the
   * record, and so how long a binding read proves that its record was not archived: the
   * customer scripts are loaded with it (src/ledger/retention.ts). Every process sharing a
   * Redis must use the same value. Longer than any wait between a request's binding read
   * and its script; tests shorten it.
   */
  ARCHIVE_GRACE_MS: z.coerce.number().int().min(100).max(600_000).default(5_000),
  /** A dashboard session ends this long after sign-in, however much it is used. */
  SESSION_TTL_SECONDS: z.coerce.number().int().min(60).default(12 * 3_600),
  /** ...and this long after its last request. */
  SESSION_IDLE_SECONDS: z.coerce.number().int().min(60).default(2 * 3_600),
  /**
   * Marks the session cookie Secure (sent over https only). Set it when the dashboard is
   * served over https (directly or behind a TLS proxy); unset, it is on in production only.
   */
  SESSION_COOKIE_SECURE: bool.optional(),
  /** Failed sign-ins allowed per email, and per client address, in SIGNIN_WINDOW_SECONDS. */
  SIGNIN_EMAIL_ATTEMPTS: z.coerce.number().int().min(1).default(5),
  SIGNIN_IP_ATTEMPTS: z.coerce.number().int().min(1).default(20),
  SIGNIN_WINDOW_SECONDS: z.coerce.number().int().min(1).default(900),
  /**
   * Express's `trust proxy`: which proxies in front of the API may say who the client is
   * (X-Forwarded-For), so that the sign-in limit counts each client address on its own
   * instead of the proxy's. Unset: none (the socket's address). Otherwise a hop count
   * (`1`), `true` (any: only when every request comes through the proxy), or a
   * comma-separated list of addresses, CIDR ranges and the names `loopback`, `linklocal`,
   * `uniquelocal`.
   */
  TRUST_PROXY: z.preprocess((v) => (v === '' ? undefined : v), z.string().optional()).transform((v, ctx) => {
    if (v === undefined || v === 'false') return false;
    const value: boolean | number | string = v === 'true' ? true : /^\d+$/.test(v) ? Number(v) : v;
    try {
      // Express compiles the setting when it is set: a bad address fails here, not at the first request.
      express().set('trust proxy', value);
    } catch (err) {
      ctx.addIssue({ code: 'custom', message: `not a trust proxy setting: ${(err as Error).message}` });
      return z.NEVER;
    }
    return value;
  }),
  /**
   * `on`: the plans of src/plans/catalogue.ts are the operator's accounting of the
   * organizations of a hosted, multi-tenant install (plan limits, 429 past the Free
   * allowance, invoices). `off`: a single-tenant install, with no plan limits, no invoices
   * and no plan screens (docs/OPERATIONS.md, "Plans").
   */
  PLANS: z.enum(['on', 'off']).default('on'),
  /**
   * How often the workers look for billing periods to close into invoices; 0 schedules
   * nothing (the tests, which move their clocks by months, run the job themselves).
   */
  INVOICE_INTERVAL_MS: z.coerce.number().int().refine((v) => v === 0 || v >= 100, 'must be 0 or at least 100').default(60_000),
  /**
   * How long after a period's end it is closed: operations of its last moments reach
   * PostgreSQL first (the job also waits for any outbox entry of the period still in Redis).
   */
  INVOICE_GRACE_SECONDS: z.coerce.number().int().min(0).default(300),
  /**
   * The port of GET /metrics (Prometheus) of an API process, on METRICS_HOST. Unset: served
   * on the API's own port, and then only there; set, on this port only, and the API port
   * answers 404 (docs/OPERATIONS.md, "Metrics"). 0 takes any free port.
   */
  METRICS_PORT: optionalPort,
  /**
   * The port of a worker process's own GET /metrics. Unset: a worker serves none (`npm
   * start`, which runs the workers inside the API process, serves theirs with the API's).
   */
  WORKER_METRICS_PORT: optionalPort,
  /**
   * Per-organization plan usage series (svc_plan_usage_operations{organization}) on the
   * API port's /metrics, which anyone who reaches the API may scrape. Unset: only on
   * METRICS_PORT; the API port's scrape has the aggregates alone, no tenant id.
   */
  METRICS_ORGANIZATION_SERIES: bool.default('0'),
  /** The address the metrics ports listen on; unset: HOST. */
  METRICS_HOST: z.preprocess((v) => (v === '' ? undefined : v), z.string().optional()),
  MOCK_UPSTREAM_PORT: z.coerce.number().int().min(0).max(65535).default(4010),
  /**
   * How long a web process lets the requests and streams in flight finish after SIGTERM
   * before it cuts what is left (src/shutdown.ts).
   */
  SHUTDOWN_GRACE_MS: z.coerce.number().int().min(0).default(30_000),
  /**
   * How long a money operation whose Redis reply was lost waits for Redis to answer again,
   * to learn its outcome, before it answers 503 outcome_unknown (src/ledger/service.ts).
   */
  OUTCOME_WAIT_MS: z.coerce.number().int().min(0).max(60_000).default(2_000),
  /**
   * The delays between the attempts of a webhook delivery, in ms, comma-separated: the
   * Standard Webhooks schedule (5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h). After the last
   * retry fails the delivery is marked failed (src/webhooks/processor.ts).
   */
  WEBHOOK_RETRY_SCHEDULE_MS: z
    .string()
    .regex(/^\d+(,\d+)*$/, 'must be delays in ms, comma-separated')
    .default('5000,300000,1800000,7200000,18000000,36000000,36000000')
    .transform((v) => v.split(',').map(Number)),
  /** How long one webhook attempt may take before it counts as failed (a timeout). */
  WEBHOOK_TIMEOUT_MS: z.coerce.number().int().min(1).default(10_000),
  /**
   * How often the workers poll for events that the persist worker did not fan out to
   * webhook endpoints itself (killed between its commit and its push, a push that failed):
   * the push's safety net (src/webhooks/dispatch.ts).
   */
  WEBHOOK_DISPATCH_INTERVAL_MS: z.coerce.number().int().min(10).default(5_000),
  /**
   * How old an event not fanned out must be before the poll takes it: until then it is
   * left to the push of the worker that persisted it (with that worker's queue and config).
   */
  WEBHOOK_DISPATCH_GRACE_MS: z.coerce.number().int().min(0).default(10_000),
  /**
   * The lock of a webhook job (BullMQ's lockDuration; the stalled-job check runs as often):
   * a delivery in progress in a worker killed meanwhile is attempted again by another
   * worker within about twice this. A pending delivery overdue by twice this counts as
   * lost, and the dispatcher queues it again (src/webhooks/dispatch.ts).
   */
  WEBHOOK_STALLED_MS: z.coerce.number().int().min(1_000).default(30_000),
  /**
   * An endpoint is disabled when its last WEBHOOK_DISABLE_FAILED_DELIVERIES finished
   * deliveries all failed every retry, and the oldest of them was made at least
   * WEBHOOK_DISABLE_FAILING_MS ago (5 days): it has been failing that long (docs/API.md, "Webhooks").
   */
  WEBHOOK_DISABLE_FAILED_DELIVERIES: z.coerce.number().int().min(1).default(5),
  WEBHOOK_DISABLE_FAILING_MS: z.coerce.number().int().min(0).default(5 * 24 * 3_600_000),
  /**
   * The operator's endpoint for organization-level events (`plan.changed`,
   * `invoice.created`: src/webhooks/operator.ts), signed with OPERATOR_WEBHOOK_SECRET
   * (`whsec_...`, required with the URL). Unset: no operator event is recorded.
   */
  OPERATOR_WEBHOOK_URL: z.preprocess((v) => (v === '' ? undefined : v), z.string().url().optional()),
  OPERATOR_WEBHOOK_SECRET: z.preprocess((v) => (v === '' ? undefined : v), z.string().startsWith('whsec_').optional()),
});

export type Config = z.infer<typeof schema>;

/** Every environment variable the configuration reads (README.md, "Configuration", lists them). */
export const config_variables = Object.keys(schema.shape) as (keyof Config)[];

export function loadConfig(env: NodeJS.ProcessEnv = process.env, overrides: Partial<Config> = {}): Config {
  const parsed = schema.safeParse(env);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ');
    throw new Error(`invalid configuration: ${problems}`);
  }
  return { ...parsed.data, ...overrides };
}
