/**
 * GET /health: 200 while money operations can be served (Redis answers), `degraded` when
 * PostgreSQL is down or the workers lag behind the outbox (no heartbeat, or entries older
 * than outbox_lag_degraded_ms waiting); 503 only without Redis.
 */
import type { Runtime } from './runtime.js';
import { customerKeysFromBase, dirtySetKey } from './redis/keys.js';
import { sql } from 'slonik';

export const worker_heartbeat_stale_ms = 15_000;
/** Older unpersisted entries than this make the service `degraded`. */
export const outbox_lag_degraded_ms = 30_000;
/** Dirty outboxes looked at to measure the lag. */
export const outbox_lag_sample_size = 100;
export const heartbeatKey = (prefix: string) => `${prefix}worker:heartbeat`;

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

export async function health(rt: Runtime) {
  const prefix = rt.config.REDIS_PREFIX;
  const [redis, postgres, queue] = await Promise.all([
    check(async () => {
      await rt.redis.ping();
      const info = await rt.redis.info('persistence');
      const aof = /aof_enabled:(\d)/.exec(info)?.[1] === '1';
      const rdbSaves = /rdb_last_save_time/.test(info);
      return { aof_enabled: aof, rdb: rdbSaves };
    }),
    check(() => rt.db.oneFirst(sql.unsafe`SELECT 1`)),
    check(async () => {
      const [dirty, beat, sample, [seconds, micros]] = await Promise.all([
        rt.redis.scard(dirtySetKey(prefix)),
        rt.redis.get(heartbeatKey(prefix)),
        rt.redis.srandmember(dirtySetKey(prefix), outbox_lag_sample_size),
        rt.redis.time(),
      ]);
      // Outbox entry ids carry the Redis time of their write: the oldest first entry among
      // the sampled outboxes is how far PostgreSQL is behind.
      const firsts = await Promise.all(sample.map((base) => rt.redis.xrange(customerKeysFromBase(base).outbox, '-', '+', 'COUNT', 1)));
      const nowMs = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
      const oldestMs = Math.min(nowMs, ...firsts.flat().map(([id]) => Number(id.split('-')[0])));
      const beatAge = beat === null ? null : Date.now() - Number(beat);
      return { dirty_customers: dirty, outbox_lag_ms: nowMs - oldestMs, worker_heartbeat_age_ms: beatAge };
    }),
  ]);
  const workersLag =
    queue.ok &&
    (queue.value.worker_heartbeat_age_ms === null || queue.value.worker_heartbeat_age_ms > worker_heartbeat_stale_ms || queue.value.outbox_lag_ms > outbox_lag_degraded_ms);
  const status = !redis.ok ? 'down' : !postgres.ok || !queue.ok || workersLag ? 'degraded' : 'ok';
  return {
    httpStatus: redis.ok ? 200 : 503,
    body: {
      status,
      checks: {
        redis: redis.ok ? { status: 'ok', ...redis.value } : { status: 'down', error: redis.error },
        postgres: postgres.ok ? { status: 'ok' } : { status: 'down', error: postgres.error },
        queue: queue.ok ? { status: workersLag ? 'lagging' : 'ok', ...queue.value } : { status: 'down', error: queue.error },
      },
    },
  };
}
