/**
 * The per-command proof of src/redis/sent.ts, on one connection made by createRedis and
 * a TCP proxy to the shared Redis: a command that was written and lost its reply never
 * fails as "not sent", whatever error ioredis gives it; one that never left the offline
 * queue does; one that failed in the offline queue is not written after a reconnect; and
 * a written command whose connection closes fails at once as "outcome unknown", instead of
 * waiting for its commandTimeout.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createRedis } from '../../src/redis/client.js';
import { CommandNotSentError, OutcomeUnknownError } from '../../src/redis/sent.js';
import { testConfig, waitFor } from '../helpers.js';
import { TcpProxy } from '../support/tcp-proxy.js';

const redisUrl = testConfig().REDIS_URL;
const prefix = `tsent${randomBytes(4).toString('hex')}:`;
let proxy: TcpProxy;
let direct: Redis;
let conn: Redis | null = null;

beforeAll(() => {
  direct = new Redis(redisUrl);
});
afterAll(async () => {
  const keys = await direct.keys(`${prefix}*`);
  if (keys.length) await direct.del(...keys);
  direct.disconnect();
});
afterEach(async () => {
  conn?.disconnect();
  conn = null;
  await proxy?.close();
});

async function connect(opts: { commandTimeout?: number } = {}): Promise<Redis> {
  proxy = TcpProxy.to(redisUrl, 6379);
  await proxy.start();
  conn = createRedis(proxy.via(redisUrl), opts);
  await conn.ping();
  return conn;
}

describe('which failed Redis commands are proven unsent', () => {
  it('a command written before the connection dropped is not; one still in the offline queue is', async () => {
    const c = await connect();
    proxy.dropReplies();
    const written = c.set(`${prefix}written`, '1').catch((err: unknown) => err);
    await waitFor(async () => (await direct.get(`${prefix}written`)) === '1', 5_000, 'the SET to apply');
    await proxy.refuse();
    proxy.cut();
    // Queued while the connection is down: never written.
    const queued = c.set(`${prefix}queued`, '1').catch((err: unknown) => err);
    const [w, q] = await Promise.all([written, queued]);
    // Failed when its connection closed, before ioredis's MaxRetriesPerRequestError.
    expect(w).toBeInstanceOf(OutcomeUnknownError);
    expect(w).not.toBeInstanceOf(CommandNotSentError);
    expect(q).toBeInstanceOf(CommandNotSentError);
    expect((q as CommandNotSentError).original.name).toBe('MaxRetriesPerRequestError');
    expect(await direct.get(`${prefix}queued`)).toBeNull();
  });

  it('a command that timed out in the offline queue is never written after the reconnect', async () => {
    const c = await connect({ commandTimeout: 200 });
    // The connection is cut and the next one never gets its ready check answered:
    // commands wait in the offline queue until they time out.
    proxy.dropReplies();
    proxy.cut();
    await waitFor(() => c.status === 'connect', 5_000, 'a connection waiting for its ready check');
    const err = await c.set(`${prefix}timed-out`, '1').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CommandNotSentError);
    expect((err as Error).message).toBe('Command timed out');
    // Redis answers again: the connection becomes ready and replays its offline queue.
    proxy.forward();
    proxy.cut();
    await waitFor(() => c.status === 'ready', 5_000, 'the connection to be ready again');
    await c.set(`${prefix}after`, '1');
    expect(await direct.get(`${prefix}timed-out`)).toBeNull();
  });

  it('a written command of a pipeline cut after an earlier reply fails as outcome unknown, not as ioredis\'s AbortError', async () => {
    const c = await connect();
    // Auto-pipelined in one batch: the SET answers at once, the BLPOP waits (without
    // blocking Redis) until the connection is cut. ioredis then aborts the rest of a
    // pipeline whose first replies came (abortIncompletePipelines).
    const list = `${prefix}list`;
    const pipeline = c.pipeline().set(`${prefix}first`, '1').blpop(list, 5).exec();
    await waitFor(async () => (await direct.get(`${prefix}first`)) === '1', 5_000, 'the SET to apply');
    await new Promise((r) => setTimeout(r, 50));
    proxy.cut();
    const results = (await pipeline) as [Error | null, unknown][];
    expect(results[0]).toEqual([null, 'OK']);
    expect(results[1][0]).toBeInstanceOf(OutcomeUnknownError);
    expect((results[1][0] as OutcomeUnknownError).cause).toMatchObject({ name: 'AbortError' });
  });

  it('a written command whose connection closes fails at once as outcome unknown, even when the reconnect succeeds at once', async () => {
    // The default commandTimeout (5 s): the failure must come from the close, not the timeout.
    const c = await connect();
    proxy.dropReplies();
    const started = Date.now();
    const written = c.set(`${prefix}in-flight`, '1').catch((err: unknown) => err);
    await waitFor(async () => (await direct.get(`${prefix}in-flight`)) === '1', 5_000, 'the SET to apply');
    // Redis answers again before ioredis reconnects: no reconnect fails, so ioredis's
    // MaxRetriesPerRequestError never comes.
    proxy.forward();
    proxy.cut();
    const err = await written;
    expect(Date.now() - started).toBeLessThan(1_000);
    expect(err).toBeInstanceOf(OutcomeUnknownError);
    expect(err).not.toBeInstanceOf(CommandNotSentError);
    await waitFor(() => c.status === 'ready', 5_000, 'the connection to be ready again');
    expect(await c.get(`${prefix}in-flight`)).toBe('1');
  });
});
