/**
 * The marks a Redis that came back empty held for customers whose keys live elsewhere
 * (src/reconcile/shared-keys.ts): an outbox with entries gets its dirty mark back, and a
 * customer with entries or a pending TTL its active mark, due at its first TTL, so that
 * the persist loop and the sweeper find it without any request of its own. On a cluster
 * those marks live on other masters than the customer's keys; here, on one Redis, the
 * marks are deleted by hand and the step is run as the recovery runs it.
 */
import { describe, expect, it } from 'vitest';
import { LedgerOutbox } from '../../src/ledger/outbox.js';
import { projectRecorder } from '../../src/reconcile/recovery.js';
import { restoreSharedKeys } from '../../src/reconcile/shared-keys.js';
import { singleRedisScope } from '../../src/redis/generation.js';
import { activeKeyOf, dirtyKeyOf, trimDueKeyOf } from '../../src/redis/keys.js';
import { p, svc, useTestService } from '../support/service.js';

// No workers: the outbox keeps what the test leaves in it.
useTestService();

async function post(path: string, body: Record<string, unknown>) {
  const res = await svc.call('POST', path, { key: p.projectKey, body });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
}

describe('the shared keys of a Redis that came back empty', () => {
  it('marks an outbox with entries dirty again, and a customer with a pending TTL active until it is due', async () => {
    const prefix = svc.rt.config.REDIS_PREFIX;
    const keys = svc.rt.ledger.keys({ projectId: p.projectId, organizationId: p.organizationId }, 'marked');
    // Known to PostgreSQL (the recovery walks the customers of the projects the persist
    // loop recorded for this prefix), with one entry still waiting.
    await post('/v1/customers/deposit', { customer_id: 'marked', amount: 1_000, idempotency_key: 'marked-dep' });
    await new LedgerOutbox(svc.rt.redis, svc.rt.ledgerQueries, prefix, svc.rt.logger).drain(keys.base);
    await projectRecorder(svc.rt)([p.projectId]);
    await post('/v1/billing/freeze', { customer_id: 'marked', transaction_id: 'marked-ttl', amount: 300, release_after_seconds: 600 });
    const [, ttlDue] = await svc.rt.redis.zrange(keys.ttl, 0, 0, 'WITHSCORES');
    expect(await svc.rt.redis.xlen(keys.outbox)).toBe(1);
    const dirty = dirtyKeyOf(prefix, keys.base);
    const active = activeKeyOf(prefix, keys.base);
    const trim = trimDueKeyOf(prefix, keys.base);
    await svc.rt.redis.srem(dirty, keys.base);
    await svc.rt.redis.zrem(active, keys.base);
    await svc.rt.redis.zrem(trim, keys.base);

    await restoreSharedKeys(svc.rt, singleRedisScope);

    expect(await svc.rt.redis.sismember(dirty, keys.base)).toBe(1);
    expect(await svc.rt.redis.zscore(active, keys.base)).toBe(ttlDue);
    // Its deposit's record waits for the trim.
    expect(Number(await svc.rt.redis.zscore(trim, keys.base))).toBeLessThanOrEqual(Date.now());
  });
});
