/**
 * GET /health: 200 while money operations can be served (Redis answers), `degraded` when
 * PostgreSQL is down or the workers lag behind the outbox; 503 only without Redis.
 */
import type { Runtime } from './runtime.js';
import { dirtySetKey } from './redis/keys.js';
import { sql } from 'slonik';

export const worker_heartbeat_stale_ms = 15_000;
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
      const [dirty, beat] = await Promise.all([rt.redis.scard(dirtySetKey(prefix)), rt.redis.get(heartbeatKey(prefix))]);
      const beatAge = beat === null ? null : Date.now() - Number(beat);
      return { dirty_customers: dirty, worker_heartbeat_age_ms: beatAge };
    }),
  ]);
  const workersLag = queue.ok && (queue.value.worker_heartbeat_age_ms === null || queue.value.worker_heartbeat_age_ms > worker_heartbeat_stale_ms);
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
