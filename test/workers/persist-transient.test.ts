/**
 * A customer whose write fails for a transient reason (workers/persist.ts, retryLater)
 * does not pause the persist loop for the others: its pass reports no failure (no 1 s
 * sleep), the others are written and trimmed, and the failing customer goes back to the
 * dirty set on its own after persist_retry_wait_ms. A pass in which nothing could be
 * written still pauses as a whole.
 */
import { describe, expect, it } from 'vitest';
import { persist_retry_wait_ms, PersistLoop } from '../../workers/persist.js';
import { customerKeys, dirtyKeyOf } from '../../src/redis/keys.js';
import type { OutboxEntry } from '../../src/redis/codec.js';
import { waitFor } from '../helpers.js';
import { p, svc, useTestService } from '../support/service.js';

// No workers of the service's own: the loop below is the only one copying its entries.
useTestService({ workers: false });

/** The statement path, failing with a deadlock (40P01: transient) for entries of the customers in `down`. */
function flakyWriter(down: Set<string>) {
  return {
    insertEntries(entries: OutboxEntry[]) {
      if (entries.some((e) => down.has(e.customer_id))) return Promise.reject(Object.assign(new Error('deadlock detected'), { code: '40P01' }));
      return svc.rt.ledgerQueries.insertEntries(entries);
    },
    close: () => Promise.resolve(),
  };
}

describe('a transient failure of one customer', () => {
  it('costs the others no pause: they are written, it alone waits persist_retry_wait_ms', async () => {
    for (const c of ['flaky', 'steady']) {
      expect((await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: c, amount: 100 } })).status).toBe(200);
    }
    const prefix = svc.rt.config.REDIS_PREFIX;
    const k = (c: string) => customerKeys(prefix, p.projectId, c);
    const loop = new PersistLoop(svc.rt.redis, svc.rt.ledgerQueries, prefix, 50, svc.rt.logger, {}, flakyWriter(new Set(['flaky'])));
    const pass = await loop.pass();
    expect(pass.failed).toBe(false);
    expect(await svc.rt.redis.xlen(k('steady').outbox)).toBe(0);
    // Its deposit's entry and the deposit.created event.
    expect(await svc.rt.redis.xlen(k('flaky').outbox)).toBe(2);
    // Not back in the dirty set at once (the next pass would fail on it again), but after the pause.
    const dirty = () => svc.rt.redis.sismember(dirtyKeyOf(prefix, k('flaky').base), k('flaky').base);
    expect(await dirty()).toBe(0);
    const started = Date.now();
    await waitFor(async () => (await dirty()) === 1 || null, persist_retry_wait_ms * 3, 'flaky back in the dirty set');
    expect(Date.now() - started).toBeGreaterThanOrEqual(persist_retry_wait_ms - 100);
    await loop.stop();
  });

  it('a pass that wrote nothing reports the failure (the loop pauses) and gives the customer back at once', async () => {
    expect((await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'alone', amount: 100 } })).status).toBe(200);
    const prefix = svc.rt.config.REDIS_PREFIX;
    const base = customerKeys(prefix, p.projectId, 'alone').base;
    // 'flaky' is back in the dirty set from the test above, and still failing.
    const loop = new PersistLoop(svc.rt.redis, svc.rt.ledgerQueries, prefix, 50, svc.rt.logger, {}, flakyWriter(new Set(['alone', 'flaky'])));
    expect((await loop.pass()).failed).toBe(true);
    expect(await svc.rt.redis.sismember(dirtyKeyOf(prefix, base), base)).toBe(1);
    await loop.stop();
  });
});
