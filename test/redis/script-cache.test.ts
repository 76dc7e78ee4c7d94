/**
 * Scripts run as Redis functions (FCALL), with their library loaded only when Redis
 * answers "Function not found" (src/redis/scripts.ts): after Redis lost its functions (an
 * emptied Redis, FUNCTION FLUSH) a call still runs, once, and Redis knows the function
 * again for the next one. On a Redis of the test's own: a FUNCTION FLUSH of the shared one
 * would show other test files' functions twice on the wire (FCALL refused, FCALL again).
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

/** Names of the libraries Redis has loaded. */
async function libraries(): Promise<string[]> {
  const list = (await redis.call('FUNCTION', 'LIST')) as unknown[][];
  return list.map((lib) => String(lib[1]));
}

describe('function libraries', () => {
  it('runs a script whose function Redis forgot by loading its library, once, and by FCALL after', async () => {
    const scripts = registerScripts(redis);
    const { fn, library } = scriptSource('trim_due');
    expect(library.startsWith(`#!lua name=${fn}\n`)).toBe(true);
    await redis.zadd(due, 5, 'c1');
    await redis.call('FUNCTION', 'FLUSH');
    expect(await libraries()).toEqual([]);
    // Moves c1 from score 5 to 9 once: a second run of the same call would see 9, not 5.
    expect(await scripts.runOther('trim_due', [due], ['c1', '5', '9'])).toBe(1);
    expect(await redis.zscore(due, 'c1')).toBe('9');
    expect(await libraries()).toEqual([fn]);
    expect(await scripts.runOther('trim_due', [due], ['c1', '9', '12'])).toBe(1);
    expect(await redis.zscore(due, 'c1')).toBe('12');
  });

  it('keeps the functions across kill -9 and a restart from the append-only file', async () => {
    const { fn } = scriptSource('trim_due');
    expect(await libraries()).toContain(fn);
    redis.disconnect();
    await own.kill();
    await own.start();
    redis = new Redis({ path: own.socket });
    expect(await libraries()).toContain(fn);
  });
});
