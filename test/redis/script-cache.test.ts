/**
 * Scripts run by their SHA1, with the source sent only when Redis answers NOSCRIPT
 * (src/redis/scripts.ts): after Redis lost its script cache (a restart, SCRIPT FLUSH) a
 * call still runs, once, and Redis knows the script again for the next one. On a Redis of
 * the test's own: a SCRIPT FLUSH of the shared one would show other test files' scripts
 * twice on the wire (EVALSHA refused, then EVAL).
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { AofRedis } from '../crash/redis-server.js';
import { registerScripts, scriptSource } from '../../src/redis/scripts.js';

const own = new AofRedis();
let redis: Redis;
const due = `test:script-cache:${randomBytes(4).toString('hex')}:due`;

beforeAll(async () => {
  await own.start();
  redis = new Redis({ path: own.socket });
});
afterAll(async () => {
  redis?.disconnect();
  await own.stop();
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
