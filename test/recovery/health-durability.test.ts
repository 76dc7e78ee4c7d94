/**
 * /health reports what a Redis crash can lose (issue 8, item 3): `redis_durability` from
 * the Redis's own settings, and a warning unless it runs AOF with `appendfsync always`,
 * the production setting. The status stays `ok` either way (a development Redis is
 * allowed), and a Redis whose CONFIG command is disabled reads as `unknown`, with a
 * warning, instead of failing the check. Runs on a redis-server of its own, whose
 * settings the test changes.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, waitFor, type TestService } from '../helpers.js';
import { ownRedis, type OwnRedis } from '../support/own-redis.js';

let redis: OwnRedis;
let svc: TestService;

beforeAll(async () => {
  redis = await ownRedis('svc-recovery-health-');
  await redis.start(['--save', '', '--appendonly', 'yes', '--appendfsync', 'always']);
  svc = await startTestService({ config: { REDIS_URL: redis.url } });
}, 30_000);

afterAll(async () => {
  await svc?.close();
  await redis?.remove();
});

async function durabilityOnceItIs(expected: string): Promise<{ status: string; warnings: string[] }> {
  const health = await waitFor(async () => {
    const h = await svc.call('GET', '/health');
    return h.status === 200 && h.body.checks.redis.redis_durability === expected ? h : null;
  }, 10_000, `redis_durability ${expected}`);
  return health.body;
}

describe('/health and the durability of Redis', () => {
  it('says always without a warning, and warns for everysec, no AOF, and settings it cannot read', async () => {
    const always = await durabilityOnceItIs('always');
    expect(always.warnings.filter((w) => /appendfsync|AOF|persistence/.test(w))).toEqual([]);
    expect((await svc.call('GET', '/health')).body.checks.redis.aof_enabled).toBe(true);

    const admin = new Redis(redis.url);
    try {
      await admin.config('SET', 'appendfsync', 'everysec');
      const everysec = await durabilityOnceItIs('everysec');
      expect(everysec.warnings.join('\n')).toMatch(/appendfsync everysec: a Redis crash can lose the last second/);

      await admin.config('SET', 'appendonly', 'no');
      const off = await durabilityOnceItIs('off');
      expect(off.warnings.join('\n')).toMatch(/without AOF/);
    } finally {
      admin.disconnect();
    }

    // A managed Redis may refuse CONFIG: the check still answers, and says it does not know.
    await redis.kill();
    await redis.start(['--save', '', '--appendonly', 'yes', '--appendfsync', 'always', '--rename-command', 'CONFIG', '']);
    const unknown = await durabilityOnceItIs('unknown');
    expect(unknown.warnings.join('\n')).toMatch(/could not be read/);
    expect((await svc.call('GET', '/health')).body.checks.redis.generation).toBe('verified');
  }, 60_000);
});
