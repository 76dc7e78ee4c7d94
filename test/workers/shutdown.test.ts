/**
 * Stopping the workers while Redis is away: BullMQ's worker close waits for its blocking
 * connection to end, which a connection caught reconnecting never does (bullmq#4656), so
 * a graceful stop during a Redis outage hung for good. The stop is bounded by
 * worker_close_wait_ms, and stopping twice waits for the same stop.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { worker_close_wait_ms } from '../../workers/index.js';
import { startTestService, waitFor, type TestService } from '../helpers.js';
import { ownRedis, type OwnRedis } from '../support/own-redis.js';

let redis: OwnRedis;
let svc: TestService;

beforeAll(async () => {
  redis = await ownRedis('svc-worker-shutdown-');
  await redis.start();
  svc = await startTestService({ workers: true, config: { REDIS_URL: redis.url } });
});

afterAll(async () => {
  // The service's own cleanup deletes its keys, which needs its Redis back.
  if (!redis.running) await redis.start();
  await svc?.close();
  await redis?.remove();
});

describe('stopping the workers', () => {
  it('ends within its bound while Redis is down, and a second stop waits for the same one', async () => {
    // BullMQ's blocking connection is internal; the state that hung is the one between two
    // reconnection attempts, so the stop starts right when the connection is in it.
    const blocking = (svc.workers!.queueWorker as unknown as { blockingConnection: { client: Promise<{ status: string }> } }).blockingConnection;
    const client = await blocking.client;
    await redis.kill();
    await waitFor(() => client.status === 'reconnecting', 10_000, 'the blocking connection to wait for its next reconnection');
    const started = Date.now();
    const first = svc.workers!.stop();
    const second = svc.workers!.stop();
    expect(second).toBe(first);
    await first;
    const took = Date.now() - started;
    expect(took).toBeLessThan(worker_close_wait_ms + 2_000);
  }, 30_000);
});
