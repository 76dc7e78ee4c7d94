/**
 * BullMQ 5 retries a closing worker's job completion without pause when its connection
 * has closed, and the process spins for ever (workers/bullmq-closing.ts): this hung a CI
 * run past every timeout. Each case runs in a child process, which the test kills if it
 * has not exited in time: a spin in the test's own process would stop its timers too.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { scanKeys } from '../../src/redis/scan.js';

const redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const prefixes: string[] = [];

afterAll(async () => {
  const redis = new Redis(redisUrl);
  try {
    for (const prefix of prefixes) {
      await scanKeys(redis, `${prefix}:*`, 100, async (keys) => void (keys.length > 0 && (await redis.del(...keys))));
    }
  } finally {
    redis.disconnect();
  }
});

async function run(fix: boolean, waitMs: number): Promise<{ exited: boolean; code: number | null; out: string }> {
  const prefix = `{svcspin-${randomBytes(4).toString('hex')}}`;
  prefixes.push(prefix);
  const child = spawn(process.execPath, ['--import', 'tsx', 'test/workers/fixtures/closing-spin.ts'], {
    env: { ...process.env, REDIS_URL: redisUrl, QUEUE_PREFIX: prefix, CLOSING_FIX: fix ? '1' : '0' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (out += d));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const code = await Promise.race([exited, new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), waitMs))]);
  if (code !== 'timeout') return { exited: true, code, out };
  child.kill('SIGKILL');
  await exited;
  return { exited: false, code: null, out };
}

describe('a closing queue worker whose connection closed under a job in flight', () => {
  it('without the fix, spins: its timers never fire and it never exits', async () => {
    const r = await run(false, 6_000);
    expect(r.exited, r.out).toBe(false);
    expect(r.out).toContain('released');
    expect(r.out).not.toContain('timerAfterMs');
  }, 20_000);

  it('with the fix, keeps its timers and exits', async () => {
    const r = await run(true, 15_000);
    expect(r.exited, r.out).toBe(true);
    expect(r.code, r.out).toBe(0);
    const { timerAfterMs } = JSON.parse(r.out.trim().split('\n').pop()!) as { timerAfterMs: number };
    expect(timerAfterMs).toBeLessThan(1_000);
  }, 30_000);
});
