/**
 * Scripts run by their SHA1, with the source sent only when Redis answers NOSCRIPT
 * (src/redis/scripts.ts): after Redis lost its script cache (a restart, SCRIPT FLUSH) a
 * call still runs, once, and Redis knows the script again for the next one.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { registerScripts, scriptSource } from '../../src/redis/scripts.js';

const redis = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
const due = `test:script-cache:${randomBytes(4).toString('hex')}:due`;

afterAll(async () => {
  await redis.del(due);
  redis.disconnect();
});

describe('script cache', () => {
  it('runs a script Redis forgot by sending its source, once, and by its SHA1 after', async () => {
    const scripts = registerScripts(redis);
    const { sha1 } = scriptSource('trim_due');
    await redis.zadd(due, 5, 'c1');
    await redis.script('FLUSH');
    expect(await redis.script('EXISTS', sha1)).toEqual([0]);
    // Moves c1 from score 5 to 9 once: a second run of the same call would see 9, not 5.
    expect(await scripts.runOther('trim_due', [due], ['c1', '5', '9'])).toBe(1);
    expect(await redis.zscore(due, 'c1')).toBe('9');
    expect(await redis.script('EXISTS', sha1)).toEqual([1]);
    expect(await scripts.runOther('trim_due', [due], ['c1', '9', '12'])).toBe(1);
    expect(await redis.zscore(due, 'c1')).toBe('12');
  });
});
