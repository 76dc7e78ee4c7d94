/**
 * The persist loop's waits (workers/persist.ts). After a small pass (batchWaitMs): long
 * enough that the next pass carries about persist_batch_grow_below entries at the rate the
 * last one saw, never shorter than persist_batch_wait_ms nor longer than
 * persist_batch_wait_max_ms, so that the outbox lag stays well within its 1 s bound. After
 * an empty pass (nextIdleWaitMs): PERSIST_IDLE_MS, doubled after each empty pass up to
 * PERSIST_IDLE_MAX_MS; a real loop on a real Redis, idle, polls accordingly, and still
 * copies an entry written after the quiet spell within the longest wait.
 */
import { describe, expect, it } from 'vitest';
import { batchWaitMs, nextIdleWaitMs, persist_batch_grow_below, persist_batch_wait_max_ms, persist_batch_wait_ms, PersistLoop } from '../../workers/persist.js';
import { customerKeys } from '../../src/redis/keys.js';
import { waitFor } from '../helpers.js';
import { p, svc, useTestService } from '../support/service.js';

// No workers of the service's own: the loop below is the only one copying its entries.
useTestService({ workers: false });

describe('the wait after a small pass', () => {
  it('grows as the rate falls, within its bounds', () => {
    // 1,000 entries/s: 40 entries over 40 ms; 256 need 256 ms, more than the bound.
    expect(batchWaitMs(40, 40, 5)).toBe(persist_batch_wait_max_ms);
    // 4,000 entries/s: 180 entries over 45 ms; 256 need 64 ms, of which the pass took 4.
    expect(batchWaitMs(180, 45, 4)).toBe(60);
    // Near persist_batch_grow_below already: the shortest wait.
    expect(batchWaitMs(persist_batch_grow_below - 1, 45, 10)).toBe(persist_batch_wait_ms);
    // A lone entry after an idle spell: the longest.
    expect(batchWaitMs(1, 25, 1)).toBe(persist_batch_wait_max_ms);
    expect(persist_batch_wait_max_ms).toBeLessThan(1_000);
  });
});

describe('the wait after an empty pass', () => {
  it('doubles from PERSIST_IDLE_MS up to PERSIST_IDLE_MAX_MS, and starts over after a pass that moved entries', () => {
    const waits: number[] = [];
    let w: number | null = null;
    for (let i = 0; i < 7; i++) waits.push((w = nextIdleWaitMs(w, 25, 250)));
    expect(waits).toEqual([25, 50, 100, 200, 250, 250, 250]);
    expect(nextIdleWaitMs(null, 25, 250)).toBe(25);
    // A maximum below the idle wait (a misconfiguration) leaves the idle wait as it is.
    expect(nextIdleWaitMs(25, 25, 10)).toBe(25);
  });

  it('polls a few times a second when idle, and copies an entry written afterwards within the longest wait', async () => {
    const idle_ms = 5;
    const idle_max_ms = 80;
    const loop = new PersistLoop(svc.rt.redis, svc.rt.ledgerQueries, svc.rt.config.REDIS_PREFIX, idle_ms, svc.rt.logger, {}, undefined, idle_max_ms);
    let passes = 0;
    const pass = loop.pass.bind(loop);
    loop.pass = () => {
      passes++;
      return pass();
    };
    loop.start();
    try {
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      // Without the back-off, 1 s at 5 ms is about 200 passes; with it 5, 10, 20, 40, then 80 ms.
      expect(passes).toBeGreaterThanOrEqual(5);
      expect(passes).toBeLessThanOrEqual(20);
      const customer = `idle-${Date.now()}`;
      const made = await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: customer, amount: 10 } });
      expect(made.status).toBe(200);
      const outbox = customerKeys(svc.rt.config.REDIS_PREFIX, p.projectId, customer).outbox;
      const writtenAt = Date.now();
      await waitFor(async () => (await svc.rt.redis.xlen(outbox)) === 0, 5_000, 'the entry to be copied');
      expect(Date.now() - writtenAt).toBeLessThan(idle_max_ms + 500);
    } finally {
      await loop.stop();
    }
  });
});
