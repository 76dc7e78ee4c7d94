/**
 * /health on a single Redis and on a Redis Cluster (this file runs in both suites): the
 * persistence of every master is read, not of one node, and the queue's count of dirty
 * customers sums every shard of the dirty marks.
 */
import { describe, expect, it } from 'vitest';
import { isCluster } from '../../src/redis/client.js';
import { customerKeys, dirty_shards, dirtyKey, shardOf } from '../../src/redis/keys.js';
import { svc, useTestService } from '../support/service.js';

useTestService({ variants: [] });

describe('/health', () => {
  it('reports the durability of every master, the weakest for the whole', async () => {
    const h = await svc.call('GET', '/health');
    expect(h.status).toBe(200);
    const redis = h.body.checks.redis;
    if (isCluster(svc.rt.redis)) {
      const masters = svc.rt.redis.nodes('master').map((n) => `${n.options.host}:${n.options.port}`);
      expect(Object.keys(redis.redis_durability_by_master).sort()).toEqual(masters.sort());
      // The test cluster persists nothing: every master is `off`, and so is the whole.
      expect(Object.values(redis.redis_durability_by_master)).toEqual(masters.map(() => 'off'));
      expect(redis.redis_durability).toBe('off');
    } else {
      expect(redis.redis_durability_by_master).toBeUndefined();
      expect(['always', 'everysec', 'no', 'off', 'unknown']).toContain(redis.redis_durability);
    }
  });

  it('counts the dirty customers of every shard', async () => {
    const prefix = svc.rt.config.REDIS_PREFIX;
    // Customers in two different shards (no workers run here: the marks stay).
    const bases: string[] = [];
    for (let i = 0; bases.length < 2; i++) {
      const base = customerKeys(prefix, 'health-project', `c${i}`).base;
      if (bases.length === 0 || shardOf(base, dirty_shards) !== shardOf(bases[0], dirty_shards)) bases.push(base);
    }
    await Promise.all(bases.map((base) => svc.rt.redis.sadd(dirtyKey(prefix, shardOf(base, dirty_shards)), base)));
    try {
      const h = await svc.call('GET', '/health');
      expect(h.body.checks.queue.dirty_customers).toBe(2);
    } finally {
      await Promise.all(bases.map((base) => svc.rt.redis.srem(dirtyKey(prefix, shardOf(base, dirty_shards)), base)));
    }
  });
});
