/**
 * The marks a Redis that came back empty held for customers whose keys live elsewhere
 * (src/reconcile/shared-keys.ts): an outbox with entries gets its dirty mark back, and a
 * customer with entries or a pending TTL its active mark, due at its first TTL, so that
 * the persist loop and the sweeper find it without any request of its own. On a cluster
 * those marks live on other masters than the customer's keys; here, on one Redis, the
 * marks are deleted by hand and the step is run as the recovery runs it. The webhooks
 * queue gets its dispatch schedule back and a job for every pending delivery.
 */
import { sql } from 'slonik';
import { describe, expect, it } from 'vitest';
import { insertEvents } from '../../src/events/store.js';
import { newId } from '../../src/ids.js';
import { LedgerOutbox } from '../../src/ledger/outbox.js';
import { projectRecorder } from '../../src/reconcile/recovery.js';
import { restoreSharedKeys } from '../../src/reconcile/shared-keys.js';
import { singleRedisScope } from '../../src/redis/generation.js';
import { activeKeyOf, dirtyKeyOf, trimDueKeyOf } from '../../src/redis/keys.js';
import { fanOut } from '../../src/webhooks/dispatch.js';
import { deliveryIdOf } from '../../src/webhooks/deliveries.js';
import { dispatch_job } from '../../src/webhooks/queue.js';
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

  it('remakes the webhook dispatch schedule and queues every pending delivery of the prefix\'s projects, a retry after its remaining wait', async () => {
    const queue = svc.rt.webhookQueue;
    const mine = await svc.call('POST', '/v1/webhooks', { key: p.projectKey, body: { url: 'https://example.com/hook' } });
    expect(mine.status).toBe(201);
    // Another project, which this prefix does not serve (the persist loop never recorded it).
    const other = await svc.project();
    const theirs = await svc.call('POST', '/v1/webhooks', { key: other.projectKey, body: { url: 'https://example.com/hook' } });
    await projectRecorder(svc.rt)([p.projectId]);
    const event = (projectId: string) => ({ id: newId('evt'), type: 'deposit.created' as const, created_at: new Date(Date.now() + 1_000).toISOString(), project_id: projectId, data: { customer_id: 'hooked' } });
    const [due, retrying, done, elsewhere] = [event(p.projectId), event(p.projectId), event(p.projectId), event(other.projectId)];
    await svc.rt.db.transaction(async (tx) => {
      await insertEvents(tx, [due, retrying, done, elsewhere]);
      await fanOut(tx, [due.id, retrying.id, done.id, elsewhere.id]);
      // Fanned out already: no dispatcher of a test file beside this one takes them.
      await tx.query(sql.unsafe`UPDATE events SET fanned_out_at = now() WHERE id = ANY(${sql.array([due.id, retrying.id, done.id, elsewhere.id], 'text')})`);
      await tx.query(sql.unsafe`UPDATE webhook_deliveries SET next_attempt_at = now() + interval '10 minutes' WHERE event_id = ${retrying.id}`);
      await tx.query(sql.unsafe`UPDATE webhook_deliveries SET status = 'succeeded', next_attempt_at = NULL WHERE event_id = ${done.id}`);
    });
    // Lost with Redis (the test before made it).
    await queue.removeJobScheduler(dispatch_job);

    await restoreSharedKeys(svc.rt, singleRedisScope);

    expect(await queue.getJobScheduler(dispatch_job)).toMatchObject({ every: svc.rt.config.WEBHOOK_DISPATCH_INTERVAL_MS });
    const job = async (eventId: string, endpointId: string) => queue.getJob(deliveryIdOf(eventId, endpointId));
    const dueJob = await job(due.id, mine.body.id);
    expect([await dueJob?.getState(), dueJob?.data]).toEqual(['waiting', { deliveryId: deliveryIdOf(due.id, mine.body.id), manual: false }]);
    const retryJob = await job(retrying.id, mine.body.id);
    expect(await retryJob?.getState()).toBe('delayed');
    expect(retryJob!.opts.delay).toBeGreaterThan(9 * 60_000);
    expect(retryJob!.opts.delay).toBeLessThanOrEqual(10 * 60_000);
    expect(await job(done.id, mine.body.id)).toBeUndefined();
    expect(await job(elsewhere.id, theirs.body.id)).toBeUndefined();
    // Nothing left pending in the shared database for the stale re-queue of another file's worker.
    for (const [project, endpoint] of [[p, mine], [other, theirs]] as const) {
      expect((await svc.call('DELETE', `/v1/webhooks/${endpoint.body.id}`, { key: project.projectKey })).status).toBe(200);
    }
  });
});
