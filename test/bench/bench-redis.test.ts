/**
 * The benches' own Redis (BENCH_REDIS_PERSISTENCE, bench/lib/bench-redis.ts): the durability
 * measurement in docs/PERFORMANCE.md is only worth something if the server really runs with
 * the persistence it was asked for, and a bench must leave neither the server nor its
 * directory behind.
 */
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { describeRedis, parseRedisPersistence, startBenchRedis } from '../../bench/lib/bench-redis.js';
import { cpuSeconds } from '../../bench/lib/cpu.js';

const logDir = mkdtempSync(join(tmpdir(), 'svc-test-bench-redis-'));
afterAll(() => rmSync(logDir, { recursive: true, force: true }));

describe('the bench Redis', () => {
  it('defaults to the shared Redis and refuses an unknown setting', () => {
    expect(parseRedisPersistence(undefined)).toBe('shared');
    expect(parseRedisPersistence('always')).toBe('always');
    expect(() => parseRedisPersistence('alway')).toThrow(/BENCH_REDIS_PERSISTENCE must be one of/);
  });

  it.each([
    ['always', 'yes', 'always'],
    ['everysec', 'yes', 'everysec'],
    ['none', 'no', undefined],
  ] as const)('%s: runs with that persistence, writes its file in its own directory, and stop() leaves nothing behind', async (setting, appendonly, appendfsync) => {
    const own = await startBenchRedis(setting, logDir, 10_000);
    const redis = new Redis(own.url, { lazyConnect: true });
    try {
      await redis.connect();
      expect(await redis.config('GET', 'appendonly')).toEqual(['appendonly', appendonly]);
      if (appendfsync) expect(await redis.config('GET', 'appendfsync')).toEqual(['appendfsync', appendfsync]);
      expect(await redis.config('GET', 'dir')).toEqual(['dir', own.dir]);
      await redis.set('k', 'v');
      // Redis 7 keeps its append-only files in appendonlydir.
      expect(existsSync(join(own.dir, 'appendonlydir'))).toBe(appendonly === 'yes');
      expect(await describeRedis(redis, setting, own)).toContain(appendonly === 'yes' ? `\`appendfsync ${appendfsync}\`` : '`appendonly no`');
    } finally {
      redis.disconnect();
      await own.stop();
    }
    expect(Number.isNaN(cpuSeconds(own.pid))).toBe(true);
    expect(existsSync(own.dir)).toBe(false);
    expect(readdirSync(logDir)).toContain('redis.log');
  });
});
