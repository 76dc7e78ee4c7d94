/**
 * GET /health: 200 while money operations can be served (Redis answers), `degraded` when
 * PostgreSQL is down, the workers lag behind the outbox (no heartbeat, or entries older
 * than outbox_lag_degraded_ms waiting), Redis is being recovered after a restart
 * (src/redis/generation.ts), or ledger entries PostgreSQL refused for good sit in
 * quarantine (src/ledger/quarantine.ts); 503 only without Redis.
 *
 * `warnings` says what an operator should fix and does not change the status: a Redis
 * whose persistence can lose acknowledged writes (anything but AOF with
 * `appendfsync always`, which is fine on a development machine and not in production),
 * customers whose entries the persist loop set aside, ledger anomalies a repair kept.
 * On a Redis Cluster every master is asked for its persistence, and the weakest answers
 * for the whole (each master holds acknowledged writes of its own slots alone).
 */
import { isCluster, type RedisClient } from './redis/client.js';
import type { Redis } from 'ioredis';
import type { DatabasePool } from 'slonik';
import type { Config } from './config/index.js';
import type { RedisGeneration } from './redis/generation.js';
import type { Lifecycle } from './lifecycle.js';
import type { LedgerQueries } from './ledger/queries.js';
import { customerKeysFromBase, dirty_shards, dirtyKey } from './redis/keys.js';
import { anomaliesKey } from './reconcile/repair.js';
import { setAsideKey } from './ledger/outbox.js';
import { sql } from 'slonik';
import { z } from 'zod';
import { describeRoute } from './openapi/registry.js';

const worker_heartbeat_stale_ms = 15_000;
/** Older unpersisted entries than this make the service `degraded`. */
const outbox_lag_degraded_ms = 30_000;
/** Dirty outboxes looked at to measure the lag, per shard of the dirty marks. */
const outbox_lag_sample_size = 8;
export const heartbeatKey = (prefix: string) => `${prefix}worker:heartbeat`;

/** How long a Redis's persistence settings are cached (CONFIG GET is not free). */
const durability_cache_ms = 2_000;

/** What a Redis crash can lose: `always` nothing acknowledged; `everysec` about a second; `no` and `off` more. */
export type RedisDurability = 'always' | 'everysec' | 'no' | 'off' | 'unknown';

const durabilityCache = new WeakMap<Redis, { atMs: number; value: RedisDurability }>();

/** Weakest first: what a crash of that node can lose. */
const durability_order: RedisDurability[] = ['off', 'no', 'unknown', 'everysec', 'always'];

/**
 * The persistence of every master (a single Redis is its own one master, named `single`),
 * and the weakest of them.
 */
async function durabilityOfMasters(redis: RedisClient): Promise<{ weakest: RedisDurability; byMaster: Record<string, RedisDurability> }> {
  const nodes: [string, Redis][] = isCluster(redis) ? redis.nodes('master').map((n) => [`${n.options.host}:${n.options.port}`, n]) : [['single', redis]];
  const values = await Promise.all(nodes.map(([, n]) => redisDurability(n)));
  const byMaster = Object.fromEntries(nodes.map(([name], i) => [name, values[i]]));
  const weakest = values.reduce((a, b) => (durability_order.indexOf(b) < durability_order.indexOf(a) ? b : a), 'always' as RedisDurability);
  return { weakest: values.length === 0 ? 'unknown' : weakest, byMaster };
}

/**
 * Reads appendonly and appendfsync with CONFIG GET; `unknown` when CONFIG is disabled or
 * renamed (managed Redis services often do): the operator then has to know.
 */
async function redisDurability(redis: Redis): Promise<RedisDurability> {
  const cached = durabilityCache.get(redis);
  if (cached && Date.now() - cached.atMs < durability_cache_ms) return cached.value;
  let value: RedisDurability;
  try {
    const [aof, fsync] = await Promise.all([redis.config('GET', 'appendonly'), redis.config('GET', 'appendfsync')]);
    const read = (pair: unknown) => (Array.isArray(pair) ? String(pair[1] ?? '') : '');
    const fsyncValue = read(fsync);
    value = read(aof) !== 'yes' ? 'off' : fsyncValue === 'always' || fsyncValue === 'everysec' || fsyncValue === 'no' ? fsyncValue : 'unknown';
  } catch {
    value = 'unknown';
  }
  durabilityCache.set(redis, { atMs: Date.now(), value });
  return value;
}

const durability_warnings: Record<RedisDurability, string | null> = {
  always: null,
  everysec: 'Redis runs with appendfsync everysec: a Redis crash can lose the last second of acknowledged operations; production needs appendfsync always (docs/OPERATIONS.md)',
  no: 'Redis runs with appendfsync no: a Redis crash can lose acknowledged operations; production needs appendfsync always (docs/OPERATIONS.md)',
  off: 'Redis runs without AOF (appendonly no): a Redis crash loses what the workers had not yet copied to PostgreSQL; fine for development, production needs appendonly yes with appendfsync always (docs/OPERATIONS.md)',
  unknown: 'Redis persistence could not be read (CONFIG is disabled): make sure it runs with appendonly yes and appendfsync always (docs/OPERATIONS.md)',
};

/** What the workers have left to persist, as /health and the metrics (src/metrics/stores.ts) read it. */
export interface OutboxState {
  /** Customers marked dirty: their outboxes wait for the persist loop. */
  dirtyCustomers: number;
  /** Age of the oldest first entry among the sampled outboxes (ms): how far PostgreSQL is behind. */
  lagMs: number;
  /** Age of the workers' heartbeat (ms); null when none beat. */
  heartbeatAgeMs: number | null;
  /**
   * Entries waiting in the outboxes of the dirty customers (with `lengths`): exact when
   * every dirty customer was sampled (at most outbox_lag_sample_size per shard), else the
   * sample's mean length times the dirty customers.
   */
  entriesWaiting?: number;
}

/**
 * Samples the dirty shards: outbox_lag_sample_size customers of each, whose first entry's
 * id carries the Redis time of its write. A bounded number of commands whatever the
 * backlog: two per shard, and one or two per sampled outbox.
 */
export async function outboxState(redis: RedisClient, prefix: string, opts: { lengths?: boolean } = {}): Promise<OutboxState> {
  const shards = Array.from({ length: dirty_shards }, (_, n) => dirtyKey(prefix, n));
  const [counts, beat, samples, [seconds, micros]] = await Promise.all([
    Promise.all(shards.map((key) => redis.scard(key))),
    redis.get(heartbeatKey(prefix)),
    Promise.all(shards.map((key) => redis.srandmember(key, outbox_lag_sample_size))),
    redis.time(),
  ]);
  const dirty = counts.reduce((a, b) => a + b, 0);
  const sample = samples.flat();
  const [firsts, lengths] = await Promise.all([
    Promise.all(sample.map((base) => redis.xrange(customerKeysFromBase(base).outbox, '-', '+', 'COUNT', 1))),
    opts.lengths ? Promise.all(sample.map((base) => redis.xlen(customerKeysFromBase(base).outbox))) : null,
  ]);
  const nowMs = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
  const oldestMs = Math.min(nowMs, ...firsts.flat().map(([id]) => Number(id.split('-')[0])));
  const state: OutboxState = { dirtyCustomers: dirty, lagMs: nowMs - oldestMs, heartbeatAgeMs: beat === null ? null : Date.now() - Number(beat) };
  if (lengths !== null) {
    const sampled = lengths.reduce((a, b) => a + b, 0);
    state.entriesWaiting = sample.length >= dirty || sample.length === 0 ? sampled : Math.round((sampled / sample.length) * dirty);
  }
  return state;
}

async function check<T>(fn: () => Promise<T>, timeoutMs = 1_000): Promise<{ ok: true; value: T } | { ok: false; error: string }> {
  let timer: NodeJS.Timeout | undefined;
  try {
    const value = await Promise.race([
      fn(),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error('timed out')), timeoutMs);
      }),
    ]);
    return { ok: true, value };
  } catch (err) {
    return { ok: false, error: (err as Error).message };
  } finally {
    clearTimeout(timer);
  }
}

/** What GET /health and /health/ready read: the stores, the generation guard, whether the process stops. */
export interface HealthDeps {
  config: Config;
  redis: RedisClient;
  db: DatabasePool;
  generation: RedisGeneration;
  lifecycle: Lifecycle;
  ledgerQueries: LedgerQueries;
}

export async function health(rt: HealthDeps) {
  const prefix = rt.config.REDIS_PREFIX;
  const [redis, postgres, queue] = await Promise.all([
    check(async () => {
      await rt.redis.ping();
      const info = await rt.redis.info('persistence');
      const aof = /aof_enabled:(\d)/.exec(info)?.[1] === '1';
      const rdbSaves = /rdb_last_save_time/.test(info);
      const [durability, setAside, anomalies] = await Promise.all([
        durabilityOfMasters(rt.redis),
        rt.redis.hlen(setAsideKey(prefix)),
        rt.redis.hlen(anomaliesKey(prefix)),
      ]);
      return {
        aof_enabled: aof,
        rdb: rdbSaves,
        // The weakest master's, on a cluster; each master's below.
        redis_durability: durability.weakest,
        ...(isCluster(rt.redis) ? { redis_durability_by_master: durability.byMaster } : {}),
        // The generation guard: false while this Redis is checked against PostgreSQL.
        verified: rt.generation.verified,
        run_id: rt.generation.runId,
        persist_set_aside: setAside,
        ledger_anomalies: anomalies,
      };
    }),
    check(async () => ({ quarantined_entries: await rt.ledgerQueries.quarantine(prefix).openCount() })),
    check(async () => {
      const o = await outboxState(rt.redis, prefix);
      return { dirty_customers: o.dirtyCustomers, outbox_lag_ms: o.lagMs, worker_heartbeat_age_ms: o.heartbeatAgeMs };
    }),
  ]);
  const workersLag =
    queue.ok &&
    (queue.value.worker_heartbeat_age_ms === null || queue.value.worker_heartbeat_age_ms > worker_heartbeat_stale_ms || queue.value.outbox_lag_ms > outbox_lag_degraded_ms);
  const recovering = redis.ok && !redis.value.verified;
  // Entries PostgreSQL refused for good are holes in the ledger of record: degraded until
  // an operator releases them, never down (money operations are served).
  const quarantined = postgres.ok && postgres.value.quarantined_entries > 0;
  const status = !redis.ok ? 'down' : !postgres.ok || !queue.ok || workersLag || recovering || quarantined ? 'degraded' : 'ok';
  const warnings: string[] = [];
  if (redis.ok) {
    const w = durability_warnings[redis.value.redis_durability];
    if (w) warnings.push(w);
    if (recovering) warnings.push('Redis restarted: money operations wait until what it may have forgotten is restored from PostgreSQL');
    if (redis.value.persist_set_aside > 0) {
      warnings.push(`${redis.value.persist_set_aside} customers' entries clash with the ledger and are set aside: run npm run reconcile -- --repair (docs/OPERATIONS.md)`);
    }
    if (redis.value.ledger_anomalies > 0) {
      warnings.push(`${redis.value.ledger_anomalies} customers have ledger anomalies kept by a repair (entries written on a Redis that had forgotten others): see docs/OPERATIONS.md`);
    }
  }
  if (quarantined) {
    warnings.push(`${postgres.value.quarantined_entries} ledger entries refused by PostgreSQL are quarantined (holes in the ledger): npm run quarantine -- list (docs/OPERATIONS.md)`);
  }
  return {
    httpStatus: redis.ok ? 200 : 503,
    body: {
      status,
      warnings,
      checks: {
        // Redis answers: `ok`; `generation` says whether money operations may use it yet.
        redis: redis.ok ? { status: 'ok', generation: recovering ? 'recovering' : 'verified', ...redis.value } : { status: 'down', error: redis.error },
        postgres: postgres.ok ? { status: 'ok', ...postgres.value } : { status: 'down', error: postgres.error },
        queue: queue.ok ? { status: workersLag ? 'lagging' : 'ok', ...queue.value } : { status: 'down', error: queue.error },
      },
    },
  };
}

/** How long GET /health/ready waits for each of Redis and PostgreSQL to answer. */
const ready_check_timeout_ms = 1_000;

/**
 * GET /health/ready: whether a load balancer should send this process new requests. 503
 * once the process is stopping (src/shutdown.ts: from SIGTERM on, while what is in flight
 * finishes), or while Redis or PostgreSQL does not answer within ready_check_timeout_ms
 * (a PING, a `SELECT 1`); else 200. A process listens only once it has started, so a
 * request never finds it starting. GET /health/live answers 200 as long as the process
 * can answer at all.
 */
export async function readiness(rt: HealthDeps) {
  if (rt.lifecycle.stopping) return { httpStatus: 503, body: { status: 'stopping' as const } };
  const [redis, postgres] = await Promise.all([
    check(() => rt.redis.ping(), ready_check_timeout_ms),
    check(() => rt.db.oneFirst(sql.unsafe`SELECT 1`), ready_check_timeout_ms),
  ]);
  // Checked again: the process may have begun to stop while the checks ran.
  const ready = redis.ok && postgres.ok && !rt.lifecycle.stopping;
  const state = (c: { ok: boolean; error?: string }) => (c.ok ? { status: 'ok' } : { status: 'down', error: c.error });
  return {
    httpStatus: ready ? 200 : 503,
    body: { status: ready ? ('ready' as const) : rt.lifecycle.stopping ? ('stopping' as const) : ('not_ready' as const), checks: { redis: state(redis), postgres: state(postgres) } },
  };
}

// The documented answer (src/openapi/).
const down = z.object({ status: z.literal('down'), error: z.string() }).strict();
const durability = z.enum(['always', 'everysec', 'no', 'off', 'unknown']);
const healthSchema = z
  .object({
    status: z.enum(['ok', 'degraded', 'down']),
    warnings: z.array(z.string()).openapi({ description: 'What an operator should fix; does not change the status.' }),
    checks: z
      .object({
        redis: z.union([
          z
            .object({
              status: z.literal('ok'),
              generation: z.enum(['verified', 'recovering']),
              aof_enabled: z.boolean(),
              rdb: z.boolean(),
              redis_durability: durability,
              redis_durability_by_master: z.record(durability).optional().openapi({ description: 'On a Redis Cluster: each master.' }),
              verified: z.boolean(),
              run_id: z.string().nullable(),
              persist_set_aside: z.number().int(),
              ledger_anomalies: z.number().int(),
            })
            .strict(),
          down,
        ]),
        postgres: z.union([
          z
            .object({
              status: z.literal('ok'),
              quarantined_entries: z.number().int().openapi({ description: 'Ledger entries PostgreSQL refused for good, parked and not released (each makes the status `degraded`).' }),
            })
            .strict(),
          down,
        ]),
        queue: z.union([
          z
            .object({
              status: z.enum(['ok', 'lagging']),
              dirty_customers: z.number().int(),
              outbox_lag_ms: z.number(),
              worker_heartbeat_age_ms: z.number().nullable(),
            })
            .strict(),
          down,
        ]),
      })
      .strict(),
  })
  .strict()
  .openapi('Health');

describeRoute({
  method: 'GET',
  path: '/health',
  tag: 'Health',
  callers: ['public'],
  summary: 'Service health',
  description: '200 while money operations can be served (Redis answers), `degraded` when PostgreSQL is down, the workers lag or ledger entries are quarantined; 503 only without Redis.',
  responses: {
    200: { description: '`ok` or `degraded`', schema: healthSchema },
    503: { description: 'Redis is down (`status: "down"`)', schema: healthSchema },
  },
});

const probe = z.object({ status: z.literal('ok') }).strict();
const readinessSchema = z
  .object({
    status: z.enum(['ready', 'not_ready', 'stopping']),
    checks: z.object({ redis: z.union([probe, down]), postgres: z.union([probe, down]) }).strict().optional().openapi({ description: 'Absent once the process is stopping.' }),
  })
  .strict()
  .openapi('Readiness');

describeRoute({
  method: 'GET',
  path: '/health/live',
  tag: 'Health',
  callers: ['public'],
  summary: 'Liveness probe',
  description: '200 as long as the process can answer at all.',
  responses: { 200: { description: 'The process answers', schema: z.object({ status: z.literal('live') }).strict() } },
});
describeRoute({
  method: 'GET',
  path: '/health/ready',
  tag: 'Health',
  callers: ['public'],
  summary: 'Readiness probe',
  description: `Whether a load balancer should send this process new requests: 503 once it is stopping, or while Redis or PostgreSQL does not answer within ${ready_check_timeout_ms} ms.`,
  responses: {
    200: { description: '`ready`', schema: readinessSchema },
    503: { description: '`not_ready` or `stopping`', schema: readinessSchema },
  },
});
