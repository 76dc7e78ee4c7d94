/**
 * A TTL freeze whose expiry job cannot be queued (the queue is down) still answers with
 * its result, not an error: the freeze applied. The TTL settles all the same, by the
 * sweeper (or lazily in the customer's next script). And every freeze gets an expiry job
 * of its own, whatever its customer and transaction ids contain.
 */
import { describe, expect, it } from 'vitest';
import { sweep } from '../../workers/sweep.js';
import { active_mark_window_ms } from '../../src/ledger/marks.js';
import { waitFor } from '../helpers.js';
import { p, svc, useTestService } from '../support/service.js';

useTestService({ workers: true });

describe('a TTL freeze whose expiry job cannot be queued', () => {
  it('answers 200 and is released by the sweeper when due', async () => {
    expect((await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'c1', amount: 100 } })).status).toBe(200);
    const queue = svc.rt.ledgerQueue;
    const add = queue.add.bind(queue);
    queue.add = () => Promise.reject(new Error('queue unreachable'));
    try {
      const freeze = await svc.call('POST', '/v1/billing/freeze', { key: p.projectKey, body: { customer_id: 'c1', transaction_id: 'f1', amount: 40, release_after_seconds: 1 } });
      expect(freeze.status).toBe(200);
      expect(freeze.body).toMatchObject({ frozen_amount: 40, is_idempotent_replay: false });
    } finally {
      queue.add = add;
    }
    // Past the TTL, and past the API's active mark on the customer: the sweeper looks at a customer once its mark is over.
    svc.rt.clock.advance(active_mark_window_ms + 1_000);
    const t = await svc.rt.redis.time();
    const nowMs = Number(t[0]) * 1000 + Math.floor(Number(t[1]) / 1000) + svc.rt.clock.offsetMs();
    await sweep(svc.rt.redis, svc.rt.scripts, svc.rt.config.REDIS_PREFIX, svc.rt.ledger, nowMs);
    const ledger = await svc.call('GET', '/v1/customers/c1/ledger?type=UNFREEZE', { key: p.projectKey });
    expect(ledger.body.data).toEqual([expect.objectContaining({ transaction_id: 'f1', amount: 40, reason: 'ttl_release' })]);
  });
});

describe('expiry jobs of freezes whose ids contain the job id separators', () => {
  it('each freeze gets a job of its own, and every job runs', async () => {
    // Pairs that shared one job id when `:` was replaced by `|`: the second job was
    // dropped as a duplicate, and its freeze waited for the sweeper.
    const freezes = [
      { customer: 'a', tx: 'b|c' },
      { customer: 'a|b', tx: 'c' },
      { customer: 'x', tx: 'y:z' },
      { customer: 'x:y', tx: 'z' },
    ];
    for (const f of freezes) {
      expect((await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: f.customer, amount: 100 } })).status).toBe(200);
      const r = await svc.call('POST', '/v1/billing/freeze', { key: p.projectKey, body: { customer_id: f.customer, transaction_id: f.tx, amount: 10, release_after_seconds: 1 } });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
    }
    const jobs = (await svc.rt.ledgerQueue.getJobs(['delayed', 'wait', 'active', 'completed']))
      .filter((j) => j?.name === 'expire' && (j.data as { projectId?: string }).projectId === p.projectId);
    expect(new Set(jobs.map((j) => j.id)).size).toBe(freezes.length);
    expect(jobs.every((j) => !j.id!.includes(':'))).toBe(true);
    // The sweeper runs once a minute here: only the jobs can release these in time.
    for (const f of freezes) {
      await waitFor(
        async () => {
          const r = await svc.call('GET', `/v1/customers/${encodeURIComponent(f.customer)}/ledger?type=UNFREEZE`, { key: p.projectKey });
          return r.body.data.some((e: { transaction_id: string; reason: string }) => e.transaction_id === f.tx && e.reason === 'ttl_release');
        },
        10_000,
        `the expiry job of ${f.customer}/${f.tx} to release it`,
      );
    }
  });
});
